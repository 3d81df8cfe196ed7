package bundle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/topology"
)

// A master that stepped down (a newer generation took over: another site
// was promoted while this one was cut off, or before it came back) rejoins
// as a slave of the new master by itself, without a restart or an
// operator's command: runRejoin demotes it (Demote) as soon as it knows
// where the new master is, in ZooKeeper or, with ZooKeeper off, by gossip.
// The receiver then connects whenever the new master can be reached, cuts
// and saves aside what this site holds beyond the new master's promotion
// ends, and follows byte-identically.

// rejoinEvery is how often a master that stepped down looks again for the
// new master while none is known.
const rejoinEvery = 250 * time.Millisecond

// startRejoin starts runRejoin; closeFailover stops it.
func (b *Bundle) startRejoin() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f := &b.failover
	f.mu.Lock()
	f.stopRejoin = func() { cancel(); <-done }
	f.mu.Unlock()
	go func() {
		defer close(done)
		b.runRejoin(ctx)
	}()
}

// wakeRejoin tells runRejoin to look now (the shipper's fence changed). It
// never blocks: the shipper calls it holding its fence lock.
func (b *Bundle) wakeRejoin() {
	select {
	case b.failover.rejoinWake <- struct{}{}:
	default:
	}
}

// runRejoin demotes this master once its shipper stepped down, and retries
// until the demotion is done or ctx ends. A switchover in progress demotes
// by itself.
func (b *Bundle) runRejoin(ctx context.Context) {
	tk := time.NewTicker(rejoinEvery)
	defer tk.Stop()
	var (
		newer   uint64 // the generation that took over; 0 while none
		lastWhy string
		held    int // a slaveId whose node another live session holds; 0 if none
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.failover.rejoinWake:
		case <-tk.C:
		}
		b.reclaimAbandoned(ctx)
		// A shipper that stepped down names the generation; a demotion that
		// failed half way (no shipper, no receiver) is retried with it.
		switch s := b.runningShipper(); {
		case b.demotedReceiver() != nil:
			newer = 0
		case s != nil:
			newer = 0
			if f := s.Fence(); f.SteppedDown {
				newer = f.Newer
			}
		}
		if newer == 0 {
			continue
		}
		if b.failover.role.Busy() != siterole.None {
			continue
		}
		d, why := b.rejoinTarget(ctx, newer, held)
		if d == nil {
			if why != lastWhy {
				b.log.Warn("FAILOVER: this master stepped down; waiting to learn where the new master is", "generation", newer, "why", why)
				lastWhy = why
			}
			continue
		}
		if err := b.Demote(ctx, *d); err != nil {
			if errors.Is(err, registry.ErrBrokerNodeHeld) {
				// Another slave registered with this slaveId (a site whose
				// session expired took it back, or took it meanwhile): the
				// next attempt takes a free one instead of waiting for ever.
				held = d.SlaveID
			}
			if msg := err.Error(); msg != lastWhy {
				b.log.Error("FAILOVER: rejoining as a slave of the new master failed; retrying", "generation", newer, "err", err)
				lastWhy = msg
			}
			continue
		}
		b.log.Warn("FAILOVER: this former master rejoined as a slave of the master of generation "+strconv.FormatUint(newer, 10)+
			"; records it held beyond that master's promotion are cut and saved under <dataPath>/replication/unreplicated when it connects (list them with `metaq-server unreplicated`)",
			"slaveId", d.SlaveID, "master", d.NewMaster)
		newer, lastWhy, held = 0, "", 0
	}
}

// rejoinTarget is the demotion that makes this master a slave of the
// master of generation newer (or a later one), or nil and why not yet. With
// ZooKeeper the receiver finds the master there; without it, gossip must
// name its replication address. A slaveId recorded before is kept, but
// for held: one whose node another live session was found to hold.
func (b *Bundle) rejoinTarget(ctx context.Context, newer uint64, held int) (*Demotion, string) {
	brokerID := b.Config().System.BrokerID
	d := &Demotion{NewMaster: fmt.Sprintf("(the master of generation %d)", newer), Generation: newer}
	var gossip *topology.Topology
	if tc := compOf[*topologyComponent](b); tc != nil {
		gossip = tc.Topology()
	}
	if gossip != nil {
		if m, ok := gossip.Master(brokerID); ok && m.Meta.Generation >= newer {
			d.NewMaster = fmt.Sprintf("%s at site %s (generation %d)", m.Meta.ServeURL, m.Meta.Site, m.Meta.Generation)
			d.MasterAddress, d.Generation = m.Meta.ReplAddr, m.Meta.Generation
		}
	}
	if b.Registry != nil {
		d.MasterAddress = "" // the receiver follows ZooKeeper
	} else if d.MasterAddress == "" {
		if gossip == nil {
			return nil, "ZooKeeper and gossip are off: restart this broker as a slave of the new master (start slave -s async_slave.properties with its masterAddress)"
		}
		return nil, "gossip names no master of this generation with a replication address yet"
	}
	if r := b.persistedSlaveRole(); r != nil {
		d.SlaveID, d.Group = r.SlaveID, r.SlaveGroup // as before: this site was a slave once already
		if r.SlaveID != held {
			return d, ""
		}
	}
	id, err := b.rejoinSlaveID(ctx, gossip)
	if err != nil {
		return nil, err.Error()
	}
	d.SlaveID = id
	return d, ""
}

// rejoinSlaveID is the slaveId a former master takes: the lowest one above
// 0 that no slave of this brokerId uses, in ZooKeeper (ids/<id>/slave<n>)
// or by gossip. The new master normally left its own, so the sites swap.
func (b *Bundle) rejoinSlaveID(ctx context.Context, gossip *topology.Topology) (int, error) {
	brokerID := b.Config().System.BrokerID
	used := map[int]bool{}
	if b.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		kids, err := b.Registry.Children(ctx, b.Registry.Paths().BrokerID(brokerID))
		if err != nil {
			return 0, fmt.Errorf("reading the slaves of broker %d in ZooKeeper: %w", brokerID, err)
		}
		for _, k := range kids {
			if n, err := strconv.Atoi(strings.TrimPrefix(k, "slave")); err == nil && strings.HasPrefix(k, "slave") {
				used[n] = true
			}
		}
	}
	if gossip != nil {
		for _, m := range gossip.Members() {
			if m.Name != gossip.Name() && m.Meta.BrokerID == brokerID && m.Meta.Role == topology.RoleSlave && m.State == topology.StateAlive {
				used[m.Meta.SlaveID] = true
			}
		}
	}
	n := 1
	for used[n] {
		n++
	}
	return n, nil
}

// persistedSlaveRole is the slave role this site recorded when it was
// demoted before (it keeps its slaveId and group), nil otherwise.
func (b *Bundle) persistedSlaveRole() *georeplicator.Role {
	id, err := b.identity()
	if err != nil {
		return nil
	}
	if r := id.Role(); r != nil && r.Name == georeplicator.RoleSlave {
		return r
	}
	return nil
}

// reclaimAbandoned makes this former master, which stepped down for a
// generation whose raiser then gave its promotion up (promote_finish.go,
// registry.AbandonGeneration), master again at the next generation: the
// brokerId would otherwise have no master while this site is alive. It
// acts only while it follows no one (its receiver is not connected) and
// the abandoned generation is the one it stepped down for.
func (b *Bundle) reclaimAbandoned(ctx context.Context) {
	rc := b.demotedReceiver()
	cur := b.failover.role.Current()
	if b.Registry == nil || rc == nil || rc.Connected() || cur.Role != siterole.Slave || cur.Generation == 0 ||
		b.failover.role.Busy() != siterole.None {
		return
	}
	by, ok := b.abandonedRaise(ctx, b.Config().System.BrokerID, cur.Generation)
	if !ok || by.Site == b.Config().Site.Name {
		b.reclaimGivenBack(ctx, cur.Generation)
		return
	}
	gen := cur.Generation
	b.log.Warn("FAILOVER: the promotion this master stepped down for was given up by its site; taking mastership back",
		"abandoned", gen, "by", by.Site)
	rep, err := b.PromoteWith(ctx, PromoteOptions{Force: true, Reclaim: true, ReclaimFrom: gen})
	if err != nil {
		b.log.Error("FAILOVER: taking mastership back after an abandoned promotion failed", "abandoned", gen, "err", err)
		return
	}
	b.log.Warn("FAILOVER: master again after the promotion it stepped down for was given up", "generation", rep.Generation, "abandoned", gen, "by", by.Site)
}

// reclaimGivenBack makes this former master, which stepped down for
// generation gen, master again when the raise of gen was given back
// (registry.UndoRaise marks it; siterole.ReclaimGivenBack): every
// ensemble holds less, and nobody will be master of gen. The raise goes
// from the newest generation the ensembles hold to a number above gen,
// by the majority rule of a promotion that is not forced.
func (b *Bundle) reclaimGivenBack(ctx context.Context, gen uint64) {
	// The rule needs every ensemble to hold less; this site's own is read
	// first, so that a slave waiting for the master of a generation that
	// stands (the common case) reads nothing else every tick.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	own, err := b.Registry.Generation(rctx, b.Config().System.BrokerID)
	cancel()
	if err != nil || own >= gen {
		return
	}
	f := b.givenBackFacts(ctx, gen)
	ok, from, why := siterole.ReclaimGivenBack(f)
	if !ok {
		return
	}
	b.log.Warn("FAILOVER: the raise this master stepped down for was given back; taking mastership back", "givenBack", gen, "from", from, "why", why)
	rep, err := b.PromoteWith(ctx, PromoteOptions{Force: true, Reclaim: true, ReclaimFrom: from, ReclaimAbove: gen})
	if err != nil {
		b.log.Error("FAILOVER: taking mastership back after a given-back raise failed", "givenBack", gen, "err", err)
		return
	}
	b.log.Warn("FAILOVER: master again after the raise it stepped down for was given back", "generation", rep.Generation, "givenBack", gen)
}

// givenBackFacts is what siterole.ReclaimGivenBack knows here about
// generation gen: the generation and the give-back mark in this site's
// ensemble and in every other ensemble this bundle holds a session to,
// whether those are all the deployment's, and a master of gen or newer in
// gossip.
func (b *Bundle) givenBackFacts(ctx context.Context, gen uint64) siterole.GivenBackFacts {
	f := siterole.GivenBackFacts{Generation: gen}
	id := b.Config().System.BrokerID
	total, ens := b.raiseEnsembles()
	covered, _ := b.reachesListedSites(ens)
	read := 0
	for _, e := range ens {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		g, by, err := e.reg.GenerationRaiser(rctx, id)
		cancel()
		if err != nil {
			continue
		}
		read++
		eg := siterole.EnsembleGen{Site: e.site, Generation: g, GivenBack: by.GivenBack}
		if e.reg == b.Registry {
			f.Own, f.OwnRead = eg, true
		} else {
			f.Others = append(f.Others, eg)
		}
	}
	f.Complete = covered && read == len(ens) && len(ens) >= total
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		for _, p := range gossipPeers(tc.Topology(), id) {
			if !p.Self && p.Role == siterole.Master && (p.Alive || p.Suspect) && p.Generation >= gen {
				f.MasterOf = p.Site
			}
		}
	}
	return f
}
