package bundle

import (
	"context"
	"fmt"
	"time"

	"metaq/georeplicator"
)

// masterAliveEvidence lists what tells this slave site that its master is
// alive and reachable, so that promote refuses without force: the
// replication link is up; gossip has the master's bundle of this brokerId
// alive (at another site); this site's ZooKeeper has the brokerId's master
// node, held by a live session that is not this site's own. Empty when
// none of them does.
func (b *Bundle) masterAliveEvidence(ctx context.Context, st georeplicator.ReceiverStatus) []string {
	var ev []string
	if st.Connected {
		ev = append(ev, fmt.Sprintf("the replication link to the master (%s) is connected", st.MasterAddr))
	}
	brokerID := b.Config().System.BrokerID
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		if m, ok := tc.Topology().Master(brokerID); ok && m.Meta.Site != b.Config().Site.Name {
			ev = append(ev, fmt.Sprintf("gossip has the master's bundle %s (site %s) alive", m.Name, m.Meta.Site))
		}
	}
	if b.Registry != nil {
		zctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		path := b.Registry.Paths().Broker(brokerID, -1)
		ok, stat, err := b.Registry.Exists(zctx, path)
		switch {
		case err != nil:
			// ZooKeeper unreachable is no evidence either way: a site
			// losing its master may lose more.
			b.log.Warn("FAILOVER: promote cannot read this site's ZooKeeper", "path", path, "err", err)
		case ok && stat.EphemeralOwner != 0 && stat.EphemeralOwner != b.Registry.SessionID():
			ev = append(ev, fmt.Sprintf("this site's ZooKeeper has the master node %s held by a live session (0x%x)", path, stat.EphemeralOwner))
		}
	}
	return ev
}

// lastLagReport is the last per-partition lag report the master sent rc's
// receiver, nil without one (a master that predates them, or none yet).
func lastLagReport(rc *receiverComponent) *georeplicator.LagReport {
	r := rc.Receiver()
	if r == nil {
		return nil
	}
	lr, ok := r.LastLagReport()
	if !ok {
		return nil
	}
	return &lr
}
