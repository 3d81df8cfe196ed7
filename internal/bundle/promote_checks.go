package bundle

import (
	"context"
	"fmt"
	"time"

	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/topology"
)

// masterAliveEvidence lists what tells this slave site that its master is
// alive and reachable, so that promote refuses without force: the
// replication link is up; gossip has the master's bundle of this brokerId
// alive (at another site). heldBy is the live session, not this site's
// own, that holds the brokerId's master node in this site's ZooKeeper (0
// when none does): Promote decides whether that session belongs to a dead
// master (siterole.FenceDeadMaster) or is evidence too.
func (b *Bundle) masterAliveEvidence(ctx context.Context, st georeplicator.ReceiverStatus) (ev []string, heldBy int64) {
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
			heldBy = stat.EphemeralOwner
		}
	}
	return ev, heldBy
}

// deadMasterFacts is what this site knows about a master whose ZooKeeper
// session may outlive it (siterole.FenceDeadMaster).
func (b *Bundle) deadMasterFacts(rc *receiverComponent, st georeplicator.ReceiverStatus) siterole.DeadMasterFacts {
	f := siterole.DeadMasterFacts{Connected: st.Connected, AckBound: ackBound(b.Config().ZooKeeper.SessionTimeout)}
	// The master was last heard when it last sent an entry or a lag
	// report, or when the link to it was last up.
	last := st.LastApply
	if lr := lastLagReport(rc); lr != nil && lr.Received.After(last) {
		last = lr.Received
	}
	if st.LinkUp.After(last) {
		last = st.LinkUp
	}
	switch {
	case !last.IsZero():
		f.Silent = time.Since(last)
	case !st.Started.IsZero():
		// Never heard from a master since this receiver started (a site
		// restarted while its master was gone): the master has been
		// silent at least that long.
		f.NeverHeardFor = time.Since(st.Started)
	}
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return f
	}
	f.Gossip = true
	t := tc.Topology()
	brokerID := b.Config().System.BrokerID
	alive, down, peers := false, false, false
	for _, m := range t.Members() {
		if m.Name == t.Name() {
			continue
		}
		if m.State == topology.StateAlive {
			peers = true
		}
		if m.Meta.BrokerID != brokerID || m.Meta.Role != topology.RoleMaster {
			continue
		}
		// A master of this brokerId at this site too: a master that
		// restarted as a slave leaves its old node, declared down.
		switch m.State {
		case topology.StateDown:
			down = true
		default:
			alive = true // alive or suspect: not declared down
		}
	}
	f.MasterDown = down && !alive
	// No master member at all while gossip reaches live members: a master
	// alive anywhere they reach would be among them.
	f.NoMaster = !alive && !down && peers
	if f.NoMaster {
		// Only a generation newer than the one this site followed, with
		// no master, makes that a dead master's (siterole.FenceDeadMaster):
		// slaves started before their master see no master either. It
		// counts wherever it is seen: in an ensemble, or followed by a
		// site in gossip (siterole.LeftUnfinished).
		var known uint64
		if id, err := b.identity(); err == nil {
			known = id.Generation()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Unfinished = siterole.LeftUnfinished(b.unfinishedFacts(ctx, known))
	}
	return f
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
