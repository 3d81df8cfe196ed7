package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/georeplicator"
)

// A promotion or a demotion at run time records the role it gave the site
// in its identity file (<dataPath>/replication/identity.json, with the
// generation). At start that role overrides the start command: a former
// master restarted with its unchanged server.ini comes back as a slave of
// the current master, never as a second master, and a promoted site
// restarted with `start slave` comes back as master of the generation it
// won (a newer generation elsewhere still makes it step down and rejoin).
// `metaq-server role -clear` removes the record.

// identityFile is where a site's replication identity lives.
func identityFile(dataPath string) string {
	return filepath.Join(dataPath, "replication", "identity.json")
}

// PersistedRole reads the role a site took at run time from the identity
// file under dataPath: nil when none was recorded (or there is no file).
func PersistedRole(dataPath string) (*georeplicator.Role, error) {
	id, err := existingIdentity(dataPath)
	if id == nil || err != nil {
		return nil, err
	}
	return id.Role(), nil
}

// existingIdentity opens the identity file under dataPath, nil when there
// is none (a site that never replicated).
func existingIdentity(dataPath string) (*georeplicator.IdentityStore, error) {
	file := identityFile(dataPath)
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return georeplicator.OpenIdentity(file)
}

// ClearPersistedRole removes that record, so the next start takes the role
// its command line and configuration say. It returns the role removed.
func ClearPersistedRole(dataPath string) (*georeplicator.Role, error) {
	id, err := existingIdentity(dataPath)
	if id == nil || err != nil {
		return nil, err
	}
	r := id.Role()
	if r == nil {
		return nil, nil
	}
	return r, id.SetRole(nil)
}

// RoleOverride says, for an operator, how the persisted role r changes a
// start in mode, and how to go back; "" when it does not (no role, the
// same role, or a samsa/gregor start, which a failover never changes).
func RoleOverride(mode Mode, r *georeplicator.Role, configFile string) string {
	if r == nil {
		return ""
	}
	since := r.Since.Format(time.RFC3339)
	switch {
	case mode == ModeMaster && r.Name == georeplicator.RoleSlave:
		return fmt.Sprintf("started as master, but this site became a slave (slaveId %d, group %s) of the master of generation %d at %s, after a failover: "+
			"it starts as that slave and follows the current master, with its puts refused. To make it master again, use `metaq-server switchover -to <this site>` at the current master; "+
			"`metaq-server role -clear -f %s` (server stopped) makes the next start take the configured role, a second master unless the current one is gone",
			r.SlaveID, r.SlaveGroup, r.Generation, since, configFile)
	case mode == ModeSlave && r.Name == georeplicator.RoleMaster:
		return fmt.Sprintf("started as slave, but this site became master of generation %d at %s (a promotion or a switchover): it starts as that master; "+
			"a newer generation elsewhere still makes it step down and follow. To start it as a slave, stop it and run `metaq-server role -clear -f %s` first",
			r.Generation, since, configFile)
	}
	return ""
}

// applyPersistedRole applies the persisted role before anything starts: it
// changes the mode and the slave configuration the bundle runs with, and
// logs the override loudly.
func (b *Bundle) applyPersistedRole() error {
	if b.opts.Mode != ModeMaster && b.opts.Mode != ModeSlave {
		return nil
	}
	cfg := b.Config()
	r, err := PersistedRole(cfg.System.DataPath)
	if err != nil {
		return fmt.Errorf("bundle: the role recorded in %s: %w", identityFile(cfg.System.DataPath), err)
	}
	notice := RoleOverride(b.opts.Mode, r, cfg.File)
	if notice == "" {
		return nil
	}
	if r.Name == georeplicator.RoleMaster && b.zkEnabled() {
		// A newer generation took over while this site was down: it starts
		// as configured (a slave) rather than as a master that would only
		// step down again.
		if gen, err := b.zkGeneration(); err == nil && gen > r.Generation {
			b.log.Warn("FAILOVER: this site was master of generation "+strconv.FormatUint(r.Generation, 10)+
				", but ZooKeeper has generation "+strconv.FormatUint(gen, 10)+": starting as the slave the command line says", "file", identityFile(cfg.System.DataPath))
			return nil
		}
	}
	b.log.Warn("FAILOVER: ROLE FROM THE DATA DIRECTORY OVERRIDES THE START COMMAND: "+notice, "file", identityFile(cfg.System.DataPath))
	if r.Name == georeplicator.RoleSlave {
		b.opts.Mode = ModeSlave
		b.formerMaster = true
		b.Slave = b.withSiteLink(config.Slave{
			File:          identityFile(cfg.System.DataPath) + " (the role this former master took at run time)",
			SlaveID:       r.SlaveID,
			SlaveGroup:    r.SlaveGroup,
			SlaveMaxDelay: 500 * time.Millisecond,
			MasterAddress: r.MasterAddress,
		})
		return nil
	}
	b.opts.Mode = ModeMaster
	b.Slave = nil
	return nil
}

// zkGeneration reads the brokerId's master generation from ZooKeeper with
// a short-lived session (the bundle's own registry depends on the role).
func (b *Bundle) zkGeneration() (uint64, error) {
	cfg := b.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := registry.New(ctx, registry.Options{Connect: cfg.ZooKeeper.Connect, Root: cfg.ZooKeeper.Root,
		SessionTimeout: cfg.ZooKeeper.SessionTimeout, ConnectionTimeout: min(cfg.ZooKeeper.ConnectionTimeout, 10*time.Second),
		Dialer: b.opts.ZooKeeperDialer, Logger: b.log})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return r.Generation(ctx, cfg.System.BrokerID)
}
