package bundle

import (
	"context"
	"strconv"
	"time"

	"metaq/broker"
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
		reason = "this broker is a slave of broker " + strconv.Itoa(b.Config().System.BrokerID) + " and takes no puts; send them to its master " + b.masterName(ctx)
	case ModeGregor:
		reason = "this broker is the synchronous slave of a samsa master and takes no puts; send them to the master"
	default:
		return
	}
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: reason})
}

// masterName names an async slave's master as well as the slave knows it:
// the meta:// URL the master registered in ZooKeeper, else the replication
// address of async_slave.properties.
func (b *Bundle) masterName(ctx context.Context) string {
	if b.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		path := b.Registry.Paths().BrokerID(b.Config().System.BrokerID) + "/master"
		if data, _, err := b.Registry.Get(ctx, path); err == nil && len(data) > 0 {
			return string(data)
		}
		if b.Slave == nil || b.Slave.MasterAddress == "" {
			return "(registered at " + path + ")"
		}
	}
	if b.Slave != nil && b.Slave.MasterAddress != "" {
		return "(replication address " + b.Slave.MasterAddress + ")"
	}
	return "(unknown)"
}
