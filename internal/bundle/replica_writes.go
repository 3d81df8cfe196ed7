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
	switch b.opts.Mode {
	case ModeSlave:
		reason = slaveRefusal(b.Config().System.BrokerID, false, b.masterName(ctx))
	case ModeGregor:
		reason = "this broker is the synchronous slave of a samsa master and takes no puts; send them to the master"
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
	path := ""
	if b.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		path = b.Registry.Paths().BrokerID(b.Config().System.BrokerID) + "/master"
		if data, _, err := b.Registry.Get(ctx, path); err == nil && len(data) > 0 {
			return string(data)
		}
	}
	if rc := b.receiver(); rc != nil {
		if r := rc.Receiver(); r != nil {
			if st := r.Status(); st.Connected && st.MasterAddr != "" {
				return "(replication address " + st.MasterAddr + ")"
			}
		}
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
// follows now (after a failover, not the one it was configured with) until
// ctx ends. It only ever rewrites a refusal that is in place
// (Broker.UpdateRefusal), so a promotion that withdrew it is never undone.
func (b *Bundle) followMasterInRefusal(ctx context.Context) {
	tk := time.NewTicker(refusalEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		case <-b.RoleChanged():
		}
		if b.opts.Mode == ModeGregor || b.Role().Role != siterole.Slave {
			continue
		}
		name := b.masterName(ctx)
		if ctx.Err() != nil {
			return
		}
		b.Broker.UpdateRefusal(replicaHolder, broker.Refusal{
			Reason: slaveRefusal(b.Config().System.BrokerID, b.demotedReceiver() != nil, name)})
	}
}
