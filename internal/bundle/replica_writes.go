package bundle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"metaq/broker"
	"metaq/internal/siterole"
)

// replicaHolder is the write gate holder (broker.Broker.RefuseWrites) of a
// bundle that runs as a replica.
const replicaHolder = "replica"

// refuseReplicaWrites makes a replica refuse client writes before its
// broker starts serving: an async slave, or a gregor slave, keeps its
// master's offsets and ids, so a put stored there would make it diverge
// from the master (and stop replication for good). Replication itself (the
// georeplicator's appends, the samsa master's syncs) is not gated.
func (b *Bundle) refuseReplicaWrites(ctx context.Context) {
	var reason string
	switch {
	case b.opts.Mode == ModeGregor:
		reason = "this broker is the synchronous slave of a samsa master and takes no puts; send them to the master"
	case b.failover.role.isSlave():
		reason = slaveRefusal(b.Config().System.BrokerID, false, b.masterName(ctx))
	default:
		return
	}
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: reason})
}

// slaveRefusal is the reason a replica's puts are refused: a slave names
// the master it follows now, a former master (demoted) says it is no longer
// master.
func slaveRefusal(brokerID int, demoted bool, master string) string {
	if demoted {
		return fmt.Sprintf("this broker is no longer master of broker %d; it follows the new master %s: send puts there", brokerID, master)
	}
	return "this broker is a slave of broker " + strconv.Itoa(brokerID) + " and takes no puts; send them to its master " + master
}

// masterName names the master this replica follows now, as well as it
// knows it: the meta:// URL the master of its brokerId registered in
// ZooKeeper (a promoted site registers there), else the replication address
// its receiver is connected to (after a failover, the new master's, found
// in ZooKeeper or by gossip), else the master a demotion named, else the
// replication address of async_slave.properties.
func (b *Bundle) masterName(ctx context.Context) string {
	return b.masterNameFor(ctx, b.connectedMaster())
}

// masterNameFor is masterName with the replication address the receiver
// is connected to given ("" = none).
func (b *Bundle) masterNameFor(ctx context.Context, connected string) string {
	path := ""
	if b.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		path = b.Registry.Paths().BrokerID(b.Config().System.BrokerID) + "/master"
		if data, _, err := b.Registry.Get(ctx, path); err == nil && len(data) > 0 {
			return string(data)
		}
	}
	if connected != "" {
		return "(replication address " + connected + ")"
	}
	if m := b.Role().Master; m != "" {
		return m
	}
	if sl := b.SlaveConfig(); sl != nil && sl.MasterAddress != "" {
		return "(replication address " + sl.MasterAddress + ")"
	}
	if path != "" {
		return "(registered at " + path + ")"
	}
	return "(unknown)"
}

// refusalEvery is how often a replica checks which master its put refusal
// should name.
const refusalEvery = 2 * time.Second

// followMasterInRefusal keeps a replica's put refusal naming the master it
// follows now until ctx ends: once the replica follows a master of a newer
// generation than the one its refusal was written for (a failover moved it
// to another master after it started or was demoted), the refusal names the
// master it is connected to. It only ever rewrites a refusal that is in
// place (Broker.UpdateRefusal), so a promotion that withdrew it is never
// undone.
func (b *Bundle) followMasterInRefusal(ctx context.Context) {
	tk := time.NewTicker(refusalEvery)
	defer tk.Stop()
	var (
		since   time.Time // the role the refusal was written for
		written uint64    // the generation it names the master of
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		case <-b.RoleChanged():
		}
		role := b.Role()
		if b.opts.Mode == ModeGregor || role.Role != siterole.Slave {
			continue
		}
		if !role.Since.Equal(since) {
			since, written = role.Since, role.Generation
		}
		id := b.failover.openedIdentity()
		addr := b.connectedMaster()
		if id == nil || addr == "" || id.Generation() <= written {
			continue
		}
		gen := id.Generation()
		name := b.masterNameFor(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if b.Broker.UpdateRefusal(replicaHolder, broker.Refusal{
			Reason: slaveRefusal(b.Config().System.BrokerID, b.demotedReceiver() != nil, name)}) {
			written = gen
		}
	}
}

// connectedMaster is the replication address this replica's receiver is
// connected to, "" while it is not.
func (b *Bundle) connectedMaster() string {
	if rc := b.receiver(); rc != nil {
		if r := rc.Receiver(); r != nil {
			if st := r.Status(); st.Connected {
				return st.MasterAddr
			}
		}
	}
	return ""
}
