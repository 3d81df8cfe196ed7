package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// won, unless ZooKeeper already has a newer one (its site's ensemble, or
// another site's recorded ensemble it reaches): it then starts as the
// slave its command says. A newer generation seen later still makes it
// step down and rejoin.
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
	if b.opts.Mode == ModeMaster && (r == nil || r.Name != georeplicator.RoleSlave) && b.zkEnabled() {
		// A master that was killed or cut off while another site was
		// promoted has no role recorded: the generation tells, before
		// anything touches a znode.
		superseded, err := b.supersededMaster()
		if err != nil {
			return err
		}
		if superseded != nil {
			r = superseded
		}
	}
	notice := RoleOverride(b.opts.Mode, r, cfg.File)
	if notice == "" {
		return nil
	}
	if r.Name == georeplicator.RoleMaster && b.zkEnabled() {
		// A newer generation took over while this site was down: it starts
		// as configured (a slave) rather than as a master that would only
		// step down again. With one ensemble per site, this site's own may
		// have missed that promotion (it was cut off or down while the
		// generation was raised in the others): the other sites' ensembles
		// it reaches tell too, before it acknowledges a put as master of
		// the old generation.
		gen, err := b.zkGeneration()
		where := "ZooKeeper"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		other, site, _ := b.recordedGenerations(ctx)
		cancel()
		if other > gen {
			gen, where, err = other, "site "+site+"'s ZooKeeper", nil
		}
		if err == nil && gen > r.Generation {
			b.log.Warn("FAILOVER: this site was master of generation "+strconv.FormatUint(r.Generation, 10)+
				", but "+where+" has generation "+strconv.FormatUint(gen, 10)+": starting as the slave the command line says", "file", identityFile(cfg.System.DataPath))
			b.supersededBy = gen
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
	gen, _, err := b.zkMastership()
	return gen, err
}

// zkMastership reads the brokerId's master generation and the slaveIds its
// slaves use (ids/<id>/slave<n>) from ZooKeeper with a short-lived session
// that registers nothing.
func (b *Bundle) zkMastership() (uint64, map[int]bool, error) {
	cfg := b.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := registry.New(ctx, registry.Options{Connect: cfg.ZooKeeper.Connect, Root: cfg.ZooKeeper.Root,
		SessionTimeout: cfg.ZooKeeper.SessionTimeout, ConnectionTimeout: min(cfg.ZooKeeper.ConnectionTimeout, 10*time.Second),
		Dialer: b.opts.ZooKeeperDialer, Logger: b.log})
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	gen, err := r.Generation(ctx, cfg.System.BrokerID)
	if err != nil {
		return 0, nil, err
	}
	kids, err := r.Children(ctx, r.Paths().BrokerID(cfg.System.BrokerID))
	if err != nil && !errors.Is(err, registry.ErrNoNode) {
		return 0, nil, err
	}
	return gen, usedSlaveIDs(kids), nil
}

// usedSlaveIDs are the slaveIds of the slave<n> children of ids/<id>.
func usedSlaveIDs(kids []string) map[int]bool {
	used := map[int]bool{}
	for _, k := range kids {
		if n, err := strconv.Atoi(strings.TrimPrefix(k, "slave")); err == nil && strings.HasPrefix(k, "slave") {
			used[n] = true
		}
	}
	return used
}

// freeSlaveID is the lowest slaveId above 0 that used does not hold.
func freeSlaveID(used map[int]bool) int {
	n := 1
	for used[n] {
		n++
	}
	return n
}

// supersededMaster is the slave role a master started with its unchanged
// command takes when ZooKeeper's generation of its brokerId is newer than
// the one in its identity file (another site was promoted while it was
// down), recorded in the identity file; nil when it is still master, or
// when ZooKeeper cannot be read (it then starts as master and acknowledges
// nothing until it confirms its generation).
func (b *Bundle) supersededMaster() (*georeplicator.Role, error) {
	cfg := b.Config()
	id, err := existingIdentity(cfg.System.DataPath)
	if err != nil {
		return nil, fmt.Errorf("bundle: the identity in %s: %w", identityFile(cfg.System.DataPath), err)
	}
	var known uint64
	if id != nil {
		known = id.Generation()
	}
	gen, used, err := b.zkMastership()
	if err != nil {
		b.log.Warn("FAILOVER: cannot read this brokerId's generation from ZooKeeper before registering as master; "+
			"starting as master, which takes no puts until its generation is confirmed", "err", err)
		return nil, nil
	}
	// With one ensemble per site, this site's may have missed a promotion
	// elsewhere (its site was cut off): the other sites' ensembles it
	// reaches tell.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	other, site, otherUsed := b.recordedGenerations(ctx)
	cancel()
	if other > gen {
		b.log.Warn("FAILOVER: another site's ZooKeeper has a newer generation than this site's", "site", site, "generation", other, "here", gen)
		gen = other
		for id := range otherUsed {
			used[id] = true
		}
	}
	if gen <= known {
		return nil, nil
	}
	if id == nil {
		if id, err = b.identity(); err != nil {
			return nil, err
		}
	}
	r := &georeplicator.Role{Name: georeplicator.RoleSlave, Generation: gen, SlaveID: freeSlaveID(used),
		SlaveGroup: "meta-slave-group-" + cfg.Site.Name, Since: time.Now()}
	if err := id.SetRole(r); err != nil {
		return nil, fmt.Errorf("bundle: record the slave role of a superseded master: %w", err)
	}
	b.log.Warn("FAILOVER: this master's generation "+strconv.FormatUint(known, 10)+" is older than ZooKeeper's "+strconv.FormatUint(gen, 10)+
		": another site was promoted while it was down; it starts as a slave of the current master, registering nothing as master",
		"slaveId", r.SlaveID, "group", r.SlaveGroup)
	return r, nil
}

// guardMaster is the registry's MasterGuard: a master writes its master
// node and its topics' master entries only while ZooKeeper's generation
// of its brokerId is not newer than its own. Otherwise it steps down (its
// shipper refuses puts, runRejoin makes it a slave of the new master).
func (b *Bundle) guardMaster(ctx context.Context) error {
	if b.Registry == nil {
		return nil // the registry's first session: applyPersistedRole checked
	}
	brokerID := b.Config().System.BrokerID
	gen, err := b.Registry.Generation(ctx, brokerID)
	if err != nil {
		return fmt.Errorf("read the generation of broker %d: %w", brokerID, err)
	}
	// The other sites' ensembles this bundle reaches: its own may have
	// missed a promotion elsewhere (one ensemble per site).
	where := "ZooKeeper"
	if other, site := b.otherGenerations(ctx); other > gen {
		gen, where = other, "site "+site+"'s ZooKeeper"
	}
	var known uint64
	if id := b.failover.openedIdentity(); id != nil {
		known = id.Generation()
	} else if id, err := existingIdentity(b.Config().System.DataPath); err == nil && id != nil {
		known = id.Generation()
	}
	if gen <= known {
		return nil
	}
	b.failover.role.StepDown(gen, fmt.Sprintf("generation %d took over in %s", gen, where))
	if s := b.runningShipper(); s != nil {
		s.ObserveGeneration(gen, where)
	}
	b.wakeRejoin()
	return fmt.Errorf("%w: %s has generation %d, this master %d", registry.ErrNotCurrentMaster, where, gen, known)
}
