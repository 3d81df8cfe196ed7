package bundle

import (
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker"
	"metaq/internal/siterole"
)

// A master with ZooKeeper acknowledges a put only while it confirmed its
// generation there recently (siterole.MayAcknowledge): a master that was
// paused (SIGSTOP, a long GC, a frozen VM) or cut off from its ZooKeeper
// while another site was promoted answers 503 (retriable) from the moment
// it runs again until a read shows its generation is still the current
// one; a read that shows a newer one makes it step down. The bound is
// below the ZooKeeper session timeout, which a promotion without -force
// waits out: a master paused long enough to be replaced never finds its
// last confirmation fresh.
//
// Such a master holds the puts that reach it while it waits for the
// confirmation, instead of refusing them (a just-started master with
// [replication] sites needs a majority of the listed sites' ensembles,
// which takes moments; one that was paused or cut off re-confirms): the
// broker's Hold with HoldOptions.Local, bounded as a switchover's hold
// ([replication] handoverHoldMs, handoverHoldBytes). Once confirmed it ends
// the hold and the held puts are stored and acknowledged; a put whose time
// is up first gets the refusal above (503, retriable), and so does every
// put with handoverHoldMs=0. Nothing held is acknowledged unless the
// generation was confirmed when it is stored and answered.
//
// The same hold keeps the answer of a put that passed the write check and
// was stored, but answered by the store after the confirmation lapsed (a
// loaded machine, a slow ensemble, a slave site's slow fsync of a
// minSyncSites topic): the refusal at its answer starts the hold, and the
// answer waits in it (broker.Hold, awaitAck). The confirmation of the same
// generation ends the hold and the put is acknowledged; a newer
// generation makes this master step down (onFence ends the hold under the
// fence's refusal) and the put, in its divergent tail, is answered 500,
// stored here but not acknowledged, as is one whose time is up first.

// ackGuard remembers when the running shipper last confirmed its
// generation in ZooKeeper.
type ackGuard struct {
	base      time.Time    // monotonic origin of confirmed
	confirmed atomic.Int64 // nanoseconds since base; 0 = never
	bound     time.Duration
	// replicated: a slave site follows or followed this master, a failover
	// happened (a generation above 0), or fenceSites is set: another site
	// could be promoted. Until then the guard lets puts through, as a
	// plain MetaQ broker keeps serving while its ZooKeeper is away.
	replicated atomic.Bool
	// raised: a promotion started this master at the generation it had
	// just raised; before its first confirmation it is not returning
	// (siterole.ConfirmFacts). Set before the guard is read.
	raised bool
	// refusedWhy is the last reason a round did not confirm, logged once.
	refusedWhy atomic.Value
	// lapsedAt (nanoseconds since base; 0 = never) is when the master
	// took its confirmation back (lapse): a round of reads begun before
	// confirms nothing, and the next confirmation is a returning master's.
	lapsedAt atomic.Int64

	// hold is the Hold of puts while this master waits for its
	// confirmation (holdUnconfirmed), nil when none; starting serialises
	// its start (the write check only tries it; close waits for it);
	// closed: the shipper closed, no hold is started any more.
	hold     atomic.Pointer[broker.Hold]
	starting sync.Mutex
	closed   atomic.Bool
	// kick wakes watchGeneration for a round of reads at once (a hold
	// began: the sooner the confirmation, the shorter the wait).
	kick chan struct{}
}

// returning reports whether this master has no confirmation within the
// bound (siterole.ConfirmFacts.Returning): one started by the bundle, not
// confirmed yet, one whose last confirmation is stale (it was paused or
// cut off from its ZooKeeper), or one that took it back (lapse).
func (g *ackGuard) returning(now time.Time) bool {
	at := g.confirmedAt()
	if at.IsZero() {
		return !g.raised || g.lapsedAt.Load() != 0
	}
	return now.Sub(at) > g.bound
}

// lapse takes the confirmation back: a master that handed over and takes
// puts again because the new generation was not seen (switchover) may
// have been replaced in ensembles it does not read, and confirms again
// as a returning master before it acknowledges.
func (g *ackGuard) lapse() {
	g.lapsedAt.Store(max(int64(time.Since(g.base)), 1))
	g.confirmed.Store(0)
}

// confirmGeneration confirms g's generation held when the round of reads
// begun at readStart confirms it (siterole.ConfirmsGeneration): with
// [replication] sites, a returning master needs its generation to be the
// newest in a majority of the listed sites' ensembles. The hold of puts
// awaiting the confirmation ends only once the check lets writes through:
// a round that began longer than the bound ago confirms too little.
func (b *Bundle) confirmGeneration(g *ackGuard, held uint64, reads map[string]uint64, readStart time.Time) {
	if lapsed := g.lapsedAt.Load(); lapsed != 0 && int64(readStart.Sub(g.base)) < lapsed {
		return // begun before the master took its confirmation back
	}
	cfg := b.Config()
	ok, why := siterole.ConfirmsGeneration(siterole.ConfirmFacts{Site: cfg.Site.Name, Sites: cfg.Replication.Sites,
		Generation: held, Returning: g.returning(readStart), Read: reads})
	if ok {
		g.confirm(readStart)
		if g.returning(time.Now()) {
			// The round took longer than the bound (a loaded machine, a
			// slow ensemble): the confirmation dates from its start and is
			// stale already, so ending the hold now would refuse what it
			// keeps (503, not stored) at once. It keeps them for a round
			// that confirms within the bound (the next one starts now: this
			// one took longer than the bound, so they come no faster than
			// that), or until their time is up. Stored puts whose answers
			// wait for the confirmation (the broker's hold) are kept too.
			g.wake()
			return
		}
		if last, _ := g.refusedWhy.Load().(string); last != "" {
			b.log.Info("FAILOVER: this master confirmed its generation; it acknowledges puts again", "generation", held)
			g.refusedWhy.Store("")
		}
		g.endHold() // what waited for the confirmation is stored and acknowledged
		return
	}
	if last, _ := g.refusedWhy.Load().(string); last != why {
		b.log.Warn("FAILOVER: this master's generation is not confirmed; it acknowledges nothing", "generation", held, "why", why)
		g.refusedWhy.Store(why)
	}
}

// observe records whether another site could be promoted: a slave site
// follows or followed, a failover happened, fenceSites is set, or
// [replication] sites lists other sites (listedSites, this one included).
func (g *ackGuard) observe(slaveGroups int, generation uint64, fenceSites, listedSites int) {
	if slaveGroups > 0 || generation > 0 || fenceSites > 1 || listedSites > 1 {
		g.replicated.Store(true)
	}
}

func newAckGuard(sessionTimeout time.Duration) *ackGuard {
	return &ackGuard{base: time.Now(), bound: ackBound(sessionTimeout), kick: make(chan struct{}, 1)}
}

// readTimeout bounds each read of a confirmation round. A confirmation
// dates from when its round began, so just before the next one lands it
// is up to two rounds old: rounds that a stalled ensemble stretches to
// the read's timeout must stay well within half the bound, or a master
// whose own ensemble (or an answering majority) confirms it still lapses
// and refuses puts. A third of the bound (0.33-1 s) is far above a
// ZooKeeper read's round trip across a WAN.
func (g *ackGuard) readTimeout() time.Duration {
	return g.bound / 3
}

// wake asks watchGeneration for a round of reads now.
func (g *ackGuard) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// endHold ends the hold of puts awaiting the confirmation, if any: what
// it held takes the route of a put arriving now (stored and acknowledged
// once confirmed; the write gate's refusal otherwise).
func (g *ackGuard) endHold() {
	if h := g.hold.Swap(nil); h != nil {
		h.End()
	}
}

// holdUnconfirmed makes the broker hold puts while this master waits for
// the confirmation of its generation (see the top of this file); the
// write check calls it when it refuses a put for want of one. Nothing is
// started while a hold is in effect (this one, or a switchover's), while
// a transition runs (a switchover holds puts its own way; a promotion's
// or a demotion's refusals apply), after the shipper closed, or with
// handoverHoldMs=0.
func (b *Bundle) holdUnconfirmed(g *ackGuard) {
	if h := g.hold.Load(); h != nil && !h.Ended() {
		return
	}
	if g.closed.Load() || b.Broker.Holding() || b.failover.role.Busy() != siterole.None || !g.starting.TryLock() {
		return
	}
	defer g.starting.Unlock()
	if g.closed.Load() { // under starting: Close ends what was started before
		return
	}
	o, ok := b.holdOptions("this master is confirming its generation in ZooKeeper")
	if !ok {
		return
	}
	o.Local = true
	h, err := b.Broker.HoldWrites(o)
	if err != nil {
		return // another hold began meanwhile: it takes the puts
	}
	g.hold.Store(h)
	// A round of reads now: its confirmation ends the hold, also when the
	// confirmation came between the refusal and the hold (the write check
	// may run on the store's writer goroutine, where ending the hold here,
	// which stores what it held, could wait for that goroutine).
	g.wake()
}

// close stops starting holds and ends the one in effect (the shipper
// closes): what it held is answered while the write check still applies.
func (g *ackGuard) close() {
	g.closed.Store(true)
	// A barrier: a hold being started is in g.hold once the lock is taken.
	g.starting.Lock()
	//lint:ignore SA2001 the empty section waits for a start in progress
	g.starting.Unlock()
	g.endHold()
}

// endConfirmHold ends the running shipper's hold of puts awaiting the
// confirmation, if any (a fence, a switchover).
func (b *Bundle) endConfirmHold() {
	if sc := b.failover.role.shipper(); sc != nil && sc.guard != nil {
		sc.guard.endHold()
	}
}

// ackBound is how old a confirmation may be: a third of the session
// timeout, within [1 s, 3 s]. A promotion may take a dead master's node
// once the master has been silent for longer (siterole.FenceDeadMaster),
// so it also bounds how soon that can be.
func ackBound(sessionTimeout time.Duration) time.Duration {
	return min(max(sessionTimeout/3, time.Second), 3*time.Second)
}

// confirm records a read, begun at readStart, that showed this master's
// generation current. The confirmation dates from when the read began,
// not from its answer: a promotion that raised the generation while the
// read was on its way then finds the confirmation stale one ackBound
// after the raise, however slow the answer was.
func (g *ackGuard) confirm(readStart time.Time) {
	n := max(int64(readStart.Sub(g.base)), 1)
	for {
		old := g.confirmed.Load()
		if old >= n || g.confirmed.CompareAndSwap(old, n) {
			return
		}
	}
}

// confirmedAt is the last confirmation, zero when none.
func (g *ackGuard) confirmedAt() time.Time {
	n := g.confirmed.Load()
	if n == 0 {
		return time.Time{}
	}
	return g.base.Add(time.Duration(n))
}

// ackFacts is what the write check knows now.
// A promotion's shipper (g.raised) runs while the role is still the
// slave's until the promotion registered in ZooKeeper; a switchover's new
// master takes puts in that time, so it is asked as the master it becomes
// (siterole.AckFacts.Promoting), not refused as a slave.
func (b *Bundle) ackFacts(g *ackGuard) siterole.AckFacts {
	st, busy := b.failover.role.CurrentAndBusy()
	promoting := st.Role != siterole.Master && g.raised && busy == siterole.Promoting
	return siterole.AckFacts{State: st, ZooKeeper: true, Promoting: promoting,
		ConfirmedAt: g.confirmedAt(), MaxUnconfirmed: g.bound, Now: time.Now(), Standalone: !g.replicated.Load()}
}

// ackCheck is the broker's write check (Broker.SetWriteCheck). A put it
// refuses for want of a confirmation starts a hold (holdUnconfirmed): the
// broker then holds it, and those after it, instead of refusing them.
func (b *Bundle) ackCheck(g *ackGuard) func() *broker.Refusal {
	return func() *broker.Refusal {
		f := b.ackFacts(g)
		ok, why := siterole.MayAcknowledge(f)
		if ok {
			return nil
		}
		if siterole.AwaitsConfirmation(f) {
			b.holdUnconfirmed(g)
		}
		return &broker.Refusal{Reason: why + "; retry", Retry: true}
	}
}
