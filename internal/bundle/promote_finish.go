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

	"metaq/broker"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/clock"
	"metaq/internal/siterole"
	"metaq/topology"
)

// A promotion raises the brokerId's generation first (nextGeneration).
// From then on the master of the older generation steps down as soon as
// it sees the newer one, so a promotion that fails after the raise (the
// identity file cannot be written on a full disk, the shipper cannot
// publish while ZooKeeper is away, the master node stays held by another
// session) must not be left half done: nobody would be master. The steps
// after the raise (completePromotion) are therefore each done once and
// retried, 1 s to 10 s apart (at once when this site's registry gets its
// ZooKeeper session back: most of these steps wait for it), by a
// background finisher that keeps the
// Promoting transition until the site is master of the generation it
// raised, or a newer generation takes over (another site was promoted
// since): then it undoes what it did, and the site follows that master
// (abandonPromotion). Status reports the pending promotion.
//
// The finisher has an overall bound (Options.PromoteFinishTimeout, else
// [replication] promoteFinishTimeoutMs, 5 minutes by default): a step that keeps failing (a disk that stays full)
// must not leave the brokerId without a master for good. Past the bound
// the site gives up (giveUpPromotion): it stops what the promotion
// started, takes no puts, marks the generation abandoned in ZooKeeper
// (registry.AbandonGeneration) and follows again as the slave it was. The
// master that stepped down for that generation, when it is alive, reads
// the mark and takes mastership back at the next generation
// (reclaimAbandoned): the brokerId has a master again without an
// operator. A site that took puts at its generation (a switchover's held
// puts reached it before it could register) never gives up: it alone holds
// them; it keeps retrying and status says why. Status reports a promotion
// given up (promotionGivenUp).

// Bounds of the finisher's retries.
const (
	finishFirstRetry = time.Second
	finishMaxRetry   = 10 * time.Second
	// defaultPromoteFinishTimeout is Options.PromoteFinishTimeout's default.
	defaultPromoteFinishTimeout = 5 * time.Minute
)

// ErrPromotionPending: a promotion failed after it raised the generation
// (or after a raise whose answer was lost) and is being finished in the
// background (awaitPromotionFinish).
var ErrPromotionPending = errors.New("the promotion is being finished in the background")

// promoteFinishTimeout is how long the finisher retries before it gives
// up: Options.PromoteFinishTimeout when set, else [replication]
// promoteFinishTimeoutMs.
func (b *Bundle) promoteFinishTimeout() time.Duration {
	if d := b.opts.PromoteFinishTimeout; d > 0 {
		return d
	}
	if d := b.Config().Replication.PromoteFinishTimeout; d > 0 {
		return d
	}
	return defaultPromoteFinishTimeout
}

// promotion is a promotion past the raise of its generation: what it did
// so far, so that a retry repeats only the steps that have not succeeded.
type promotion struct {
	gen          uint64
	o            PromoteOptions
	rep          PromoteReport
	fenceSession int64
	rc           *receiverComponent // the receiver the site followed with
	id           *georeplicator.IdentityStore
	start        time.Time

	// unconfirmed is the token of a raise of gen whose answer was lost and
	// whose outcome could not be read back yet (registry.RaiseUnknownError):
	// nothing else was done; the finisher first learns whether the raise
	// is this site's (confirmRaise).
	unconfirmed string

	receiverStopped bool
	recorded        bool // identity.json names this site master of gen
	sc              *shipperComponent
	fenceWaited     bool // the wait after taking a dead master's node (or Auto's) is done

	steps stepTimes // how long each step took, logged when the promotion ends
}

// stepTimes records how long each step of a promotion took, for the log
// line that ends it: between a switchover's raise and the new master's
// registration ZooKeeper may list no master (the old one cut off from its
// ZooKeeper), so where that time goes must show (FAILOVER.md).
type stepTimes struct {
	last time.Time
	b    strings.Builder
}

// mark records the time since the previous mark (or since start) as
// step's.
func (s *stepTimes) mark(start time.Time, step string) {
	now := time.Now()
	if s.last.IsZero() {
		s.last = start
	}
	fmt.Fprintf(&s.b, "%s=%v ", step, now.Sub(s.last).Round(time.Millisecond))
	s.last = now
}

func (s *stepTimes) String() string { return strings.TrimSpace(s.b.String()) }

// PendingPromotion is a promotion that failed after it raised the
// generation and is being finished in the background (Status).
type PendingPromotion struct {
	Generation uint64    `json:"generation"`
	Since      time.Time `json:"since"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"lastError"`
	// Shipping: the shipper of the new generation runs (the site waits for
	// the master node or its registration as master).
	Shipping bool `json:"shipping"`
	// GiveUpAt is when the finisher gives up (Options.PromoteFinishTimeout
	// after Since); NotGivingUp says why it keeps retrying past it.
	GiveUpAt    time.Time `json:"giveUpAt"`
	NotGivingUp string    `json:"notGivingUp,omitempty"`
	// RaiseUnconfirmed: the raise's answer was lost and whether it
	// committed is not known yet; nothing else was done.
	RaiseUnconfirmed bool `json:"raiseUnconfirmed,omitempty"`
}

// GivenUpPromotion is the last promotion the finisher gave up (Status):
// the site follows again as a slave, and the master that stepped down for
// the generation may take mastership back.
type GivenUpPromotion struct {
	PendingPromotion
	GaveUpAt time.Time `json:"gaveUpAt"`
	// Abandoned: the generation is marked abandoned in ZooKeeper (or
	// ZooKeeper is off).
	Abandoned bool `json:"abandoned"`
}

// promotionGivenUp is the last promotion the finisher gave up, nil when none.
func (b *Bundle) promotionGivenUp() *GivenUpPromotion {
	f := &b.failover
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gaveUp == nil {
		return nil
	}
	g := *f.gaveUp
	return &g
}

// finishOutcome is how the finisher of a promotion ended: done is closed
// then; rep and err are set before (err nil: the promotion completed).
type finishOutcome struct {
	done chan struct{}
	rep  PromoteReport
	err  error
}

// awaitPromotionFinish waits up to bound for the background finisher of
// the promotion that failed after its raise: the report once it completed,
// else an error naming what is still pending or why it ended.
func (b *Bundle) awaitPromotionFinish(ctx context.Context, bound time.Duration) (PromoteReport, error) {
	f := &b.failover
	f.mu.Lock()
	o := f.finish
	f.mu.Unlock()
	if o == nil {
		return PromoteReport{}, errors.New("no promotion is being finished")
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-o.done:
		return o.rep, o.err
	case <-ctx.Done():
	case <-t.C:
	}
	if p := b.pendingPromotion(); p != nil {
		what := fmt.Sprintf("generation %d is raised and this site's", p.Generation)
		if p.RaiseUnconfirmed {
			what = fmt.Sprintf("whether this site raised generation %d is not known yet (the answer was lost)", p.Generation)
		}
		return PromoteReport{}, fmt.Errorf("%w: %s, but the promotion is not finished after %v: attempt %d failed: %s; "+
			"it keeps retrying until %s, then gives up (status: pendingPromotion)",
			ErrPromotionPending, what, bound, p.Attempts, p.LastError, p.GiveUpAt.UTC().Format(time.RFC3339))
	}
	select {
	case <-o.done:
		return o.rep, o.err
	default:
		return PromoteReport{}, fmt.Errorf("%w: not finished within %v", ErrPromotionPending, bound)
	}
}

// pendingPromotion is the promotion being finished, nil when none.
func (b *Bundle) pendingPromotion() *PendingPromotion {
	f := &b.failover
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		return nil
	}
	p := *f.pending
	return &p
}

func (f *failoverState) setPending(p *PendingPromotion) {
	f.mu.Lock()
	f.pending = p
	f.mu.Unlock()
}

// completePromotion does the steps of a promotion after the raise of its
// generation that are not done yet: stop following, record the identity,
// start shipping, take the master node and register as master, take puts.
func (b *Bundle) completePromotion(ctx context.Context, p *promotion) error {
	f := &b.failover
	rep := &p.rep
	if h := f.completeFails.Load(); h != nil {
		if err := (*h)(); err != nil {
			return err
		}
	}
	if !p.receiverStopped {
		// Gossip keeps this site's position while it stops following: what
		// the receiver applied before it stops, then up to its stop.
		r := p.rc.Receiver()
		if r != nil {
			f.setStopped(stoppedPos{pos: r.Status().AppliedPos, held: true})
		}
		if err := f.role.stopReceiver(p.rc); err != nil {
			b.log.Warn("FAILOVER: stopping replication from the old master", "err", err)
		}
		if r != nil {
			f.setStopped(stoppedPos{pos: r.Status().AppliedPos, held: true})
		}
		p.receiverStopped = true
		p.steps.mark(p.start, "stopReceiver")
	}
	if !p.recorded {
		if err := b.Store.Flush(); err != nil {
			return fmt.Errorf("promote: flush: %w", err)
		}
		// Ends taken once: a promotion raised again (raiseAgain) forked
		// from the old master's log where it first did.
		if rep.Ends == nil {
			rep.Ends = map[string]int64{}
			for _, pt := range b.Store.Partitions() {
				rep.Ends[georeplicator.PartKey(pt.Topic, pt.Partition)] = pt.Max
			}
		}
		if err := recordPromotion(p.id, p.gen, rep.Ends); err != nil {
			return fmt.Errorf("promote: record generation %d: %w", p.gen, err)
		}
		p.recorded = true
		p.steps.mark(p.start, "record")
	}
	// The slave checkpoint (the receiver's CheckpointFile) is a position in
	// the old master's log; from now on this log diverges from it, so a
	// later rejoin must resume by partition ends (and cut what the master
	// lacks), never at that position.
	checkpoint := filepath.Join(b.Config().System.DataPath, "replication", "slave.checkpoint")
	if err := os.Remove(checkpoint); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("promote: %w", err)
	}
	rep.Generation = p.gen
	if p.sc == nil {
		sc, err := f.role.startShipper(ctx, b)
		if err != nil {
			return fmt.Errorf("promote: start shipping: %w", err)
		}
		p.sc = sc
		p.steps.mark(p.start, "startShipper")
		b.Broker.SetPromotionEnds(rep.Ends)
		if p.o.Handover {
			// The old master handed over and holds the puts that reached it
			// for this site (broker/hold.go): take them before ZooKeeper names
			// this site, when producers move here and MetaQ's Java producer
			// drops its connection to the old master with them. Puts to topics
			// with minSyncSites wait for the slave sites to follow here.
			b.Broker.AwaitSitesFor(b.Config().Replication.HandoverHold)
			b.Broker.AllowWrites(replicaHolder)
			b.endTakeOverHold() // what reached this site meanwhile is stored here
			b.endStaleHold()
		}
	}
	if h := f.beforeRegister.Load(); h != nil {
		(*h)()
	}
	if b.Registry != nil {
		err := b.registerPromoted(ctx, p)
		p.steps.mark(p.start, "register")
		if err != nil {
			return err
		}
	}
	if h := f.beforeWritesOpen.Load(); h != nil {
		(*h)()
	}
	b.Broker.AllowWrites(replicaHolder)
	b.endTakeOverHold() // what reached this site since the raise is stored here
	b.endStaleHold()
	if s := p.sc.Shipper(); s != nil {
		rep.Fence = s.Fence()
	}
	rep.Took = time.Since(p.start)
	f.role.becomeMaster(siterole.State{Role: siterole.Master, Generation: p.gen, Why: promoteWhy(p.o.Force)})
	b.refreshGossip()
	if p.o.Handover && b.Registry != nil {
		if _, err := b.clampConsumerOffsets(ctx, rep.Ends); err != nil {
			b.log.Warn("FAILOVER: checking consumer offsets against this site's ends", "err", err)
		}
	}
	b.log.Warn("FAILOVER: this site is now master", "generation", p.gen, "forced", p.o.Force,
		"behindBytes", rep.BehindBytes, "took", rep.Took, "steps", p.steps.String())
	return nil
}

// recordPromotion writes gen, ends and the master role to the identity
// file. A write that failed before left them in memory (IdentityStore
// changes its copy first): the retry writes that copy again.
func recordPromotion(id *georeplicator.IdentityStore, gen uint64, ends map[string]int64) error {
	if id.Generation() == gen {
		return id.SetRole(&georeplicator.Role{Name: georeplicator.RoleMaster, Generation: gen})
	}
	return id.Promote(gen, ends)
}

// registerPromoted takes the master node in ZooKeeper (from a dead or
// handing-over master's session, or once it is free) and registers this
// site as master of p.gen.
func (b *Bundle) registerPromoted(ctx context.Context, p *promotion) error {
	rep, o, gen := &p.rep, p.o, p.gen
	if o.Handover {
		return b.registerHandedOver(ctx, p)
	}
	if p.fenceSession != 0 {
		done, err := b.takeOverFromDeadMaster(ctx, p)
		if done || err != nil {
			return err
		}
	}
	if o.Auto && rep.FencedSession == "" && !p.fenceWaited {
		if err := clock.Sleep(ctx, ackBound(b.Config().ZooKeeper.SessionTimeout)); err != nil {
			return fmt.Errorf("promote: %w", err)
		}
		p.fenceWaited = true
	}
	// A lost master's session may hold its nodes until it expires;
	// consumers have committed their last offsets read there by then.
	waitStart := time.Now()
	if err := b.Registry.AwaitMasterFree(ctx); err != nil {
		return fmt.Errorf("promote: %w (this site ships its log at generation %d but takes no puts)", err, gen)
	}
	rep.Waited += time.Since(waitStart)
	if _, err := b.clampConsumerOffsets(ctx, rep.Ends); err != nil {
		b.log.Warn("FAILOVER: checking consumer offsets against this site's ends", "err", err)
	}
	// Producers and consumers that follow ZooKeeper move here.
	if err := b.Registry.BecomeMaster(ctx); err != nil {
		return fmt.Errorf("promote: register as master in ZooKeeper (this site ships its log at generation %d but takes no puts): %w", gen, err)
	}
	return nil
}

// takeOverFromDeadMaster registers this site as master of p.gen in place
// of the dead master whose session p.fenceSession still holds the master
// node, instead of waiting for that session to expire; false when that
// session holds no master node (any more). The generation is raised: a
// master that is in fact alive either reads the newer generation within
// its watch period and steps down, or cannot confirm its own within
// ackBound and acknowledges nothing, so after ackBound it takes no puts
// either way. Only then are the dead master's node and its topics' master
// entries replaced by this site's, in one multi
// (registry.BecomeMasterFrom): removing the node first left ZooKeeper
// listing <id>-m under topics-pub with no master node for the whole
// ackBound (3 s with 30 s sessions), and a client reading the listing then
// found a partition without a master.
func (b *Bundle) takeOverFromDeadMaster(ctx context.Context, p *promotion) (bool, error) {
	rep := &p.rep
	path := b.Registry.Paths().Broker(b.Config().System.BrokerID, -1)
	ok, st, err := b.Registry.Exists(ctx, path)
	if err != nil {
		return false, fmt.Errorf("promote: read the master node %s: %w", path, err)
	}
	if !ok || st.EphemeralOwner != p.fenceSession {
		return false, nil
	}
	if !p.fenceWaited {
		if err := clock.Sleep(ctx, ackBound(b.Config().ZooKeeper.SessionTimeout)); err != nil {
			return false, fmt.Errorf("promote: %w", err)
		}
		p.fenceWaited = true
	}
	if _, err := b.clampConsumerOffsets(ctx, rep.Ends); err != nil {
		b.log.Warn("FAILOVER: checking consumer offsets against this site's ends", "err", err)
	}
	// Producers and consumers that follow ZooKeeper move here.
	if err := b.Registry.BecomeMasterFrom(ctx, p.fenceSession); err != nil {
		return false, fmt.Errorf("promote: register as master in ZooKeeper in place of the dead master's session 0x%x (this site ships its log at generation %d but takes no puts): %w",
			p.fenceSession, p.gen, err)
	}
	rep.FencedSession = fmt.Sprintf("0x%x", p.fenceSession)
	b.log.Warn("FAILOVER: removed the dead master's node instead of waiting for its session to expire, in one step with this site's registration; a master that is in fact alive acknowledges nothing and steps down at the newer generation",
		"session", rep.FencedSession, "generation", p.gen)
	return true, nil
}

// registerHandedOver registers this site as master of p.gen in ZooKeeper
// after a switchover's handover. The old master's node and its topics'
// master entries are replaced by this site's in one step while its session
// holds them (registry.BecomeMasterFrom), first of all, so that ZooKeeper
// lists a master throughout, also when the old master's session ends
// meanwhile: a master cut off from its ZooKeeper hands over while its
// session runs out, its nodes go with it, and ZooKeeper listed no master
// until this site had taken the node, checked the consumer offsets and
// registered node by node. The offsets are checked once this site is
// master (completePromotion): it holds the old master's whole log, so
// none is beyond its ends, and producers that ZooKeeper sends here must
// not find it still promoting meanwhile (its puts answered 503).
func (b *Bundle) registerHandedOver(ctx context.Context, p *promotion) error {
	rep, gen := &p.rep, p.gen
	path := b.Registry.Paths().Broker(b.Config().System.BrokerID, -1)
	owner := int64(0)
	if ok, st, err := b.Registry.Exists(ctx, path); err == nil && ok && st.EphemeralOwner != b.Registry.SessionID() {
		owner = st.EphemeralOwner // the old master's: it handed over
	}
	p.steps.mark(p.start, "readMasterNode")
	if owner == 0 {
		// No node of the old master's (its session ended): one another
		// session holds is waited for, as by any promotion.
		waitStart := time.Now()
		if err := b.Registry.AwaitMasterFree(ctx); err != nil {
			return fmt.Errorf("promote: %w (this site ships its log at generation %d but takes no puts)", err, gen)
		}
		rep.Waited += time.Since(waitStart)
		p.steps.mark(p.start, "awaitMasterFree")
	}
	// Producers and consumers that follow ZooKeeper move here.
	if err := b.Registry.BecomeMasterFrom(ctx, owner); err != nil {
		return fmt.Errorf("promote: register as master in ZooKeeper (this site ships its log at generation %d but takes no puts): %w", gen, err)
	}
	return nil
}

// finishPromotion hands p, which failed with err after raising its
// generation, to a background finisher that owns the transition (end)
// from now on; closeFailover stops it.
func (b *Bundle) finishPromotion(p *promotion, end func(), err error) {
	f := &b.failover
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		end()
		return
	}
	now := time.Now()
	f.pending = &PendingPromotion{Generation: p.gen, Since: now, Attempts: 1, LastError: err.Error(), Shipping: p.sc != nil,
		GiveUpAt: now.Add(b.promoteFinishTimeout()), RaiseUnconfirmed: p.unconfirmed != ""}
	f.stopFinish = func() { cancel(); <-done }
	out := &finishOutcome{done: make(chan struct{}), err: err}
	f.finish = out
	f.mu.Unlock()
	msg := "FAILOVER: the promotion failed after raising the generation; finishing it in the background"
	if p.unconfirmed != "" {
		msg = "FAILOVER: whether the promotion raised the generation is not known (its answer was lost); finding out and finishing it in the background"
	}
	b.log.Error(msg, "generation", p.gen, "givesUpAfter", b.promoteFinishTimeout(), "err", err)
	go func() {
		defer close(done)
		defer close(out.done)
		defer end()
		defer f.setPending(nil)
		// A promotion's take-over hold outlives a failed first attempt
		// (PromoteWith, promoteOnHandover); whatever the outcome, it ends
		// here.
		defer b.endTakeOverHold()
		out.rep, out.err = b.runFinishPromotion(ctx, p, now.Add(b.promoteFinishTimeout()), err)
	}()
}

// runFinishPromotion retries completePromotion until it succeeds (nil
// error and the report), a newer generation than p's takes over
// (abandonPromotion), the bound giveUpAt passes (giveUpPromotion) or ctx
// ends; first is the error the promotion failed with.
func (b *Bundle) runFinishPromotion(ctx context.Context, p *promotion, giveUpAt time.Time, first error) (PromoteReport, error) {
	wait := finishFirstRetry
	if b.finishRetry > 0 {
		wait = b.finishRetry
	}
	last := first
	regained := b.sessionRegained()
	for attempt := 2; ; attempt++ {
		if err := b.finishWait(ctx, wait, regained); err != nil {
			return p.rep, fmt.Errorf("the bundle stopped while the promotion was being finished: %w", last)
		}
		// Taken before the attempt: a session that comes back while it
		// fails wakes the next wait at once.
		regained = b.sessionRegained()
		if b.finishRetry <= 0 {
			wait = min(2*wait, finishMaxRetry)
		}
		if p.unconfirmed != "" {
			done, err := b.confirmRaise(ctx, p, attempt, giveUpAt)
			if done {
				return p.rep, err
			}
			if p.unconfirmed != "" {
				last = err
				continue
			}
		}
		if newer, from := b.newerGeneration(ctx, p); newer > p.gen {
			b.abandonPromotion(ctx, p, newer, from)
			return p.rep, fmt.Errorf("the promotion to generation %d was abandoned: generation %d took over (seen at %s); this site follows its master", p.gen, newer, from)
		}
		switch act, why := siterole.SharedGeneration(b.sharedGenFacts(ctx, p)); act {
		case siterole.GiveUpAndFollow:
			gen := p.gen
			b.yieldGeneration(ctx, p, why)
			return p.rep, fmt.Errorf("the promotion to generation %d was given up: %s", gen, why)
		case siterole.RaiseAgain:
			if err := b.raiseAgain(ctx, p, why); err != nil {
				last = err
				b.log.Warn("FAILOVER: raising a newer generation for the promotion failed; retrying", "generation", p.gen, "attempt", attempt, "err", err)
				continue
			}
		}
		err := b.completePromotion(ctx, p)
		if err == nil {
			b.log.Warn("FAILOVER: finished the promotion that had failed", "generation", p.gen, "attempts", attempt)
			return p.rep, nil
		}
		if ctx.Err() != nil {
			return p.rep, fmt.Errorf("the bundle stopped while the promotion was being finished: %w", err)
		}
		last = err
		notGivingUp := ""
		if !time.Now().Before(giveUpAt) {
			if notGivingUp = b.cannotGiveUp(p); notGivingUp == "" {
				b.giveUpPromotion(ctx, p, attempt, err)
				return p.rep, fmt.Errorf("the promotion to generation %d was given up after %v (%d attempts; last: %w): this site follows again as a slave, and the master that stepped down for generation %d takes mastership back",
					p.gen, b.promoteFinishTimeout(), attempt, err, p.gen)
			}
		}
		b.failover.mu.Lock()
		if pp := b.failover.pending; pp != nil {
			pp.Attempts, pp.LastError, pp.Shipping, pp.NotGivingUp = attempt, err.Error(), p.sc != nil, notGivingUp
		}
		b.failover.mu.Unlock()
		b.log.Warn("FAILOVER: finishing the promotion failed; retrying", "generation", p.gen, "attempt", attempt, "in", wait, "err", err, "notGivingUp", notGivingUp)
	}
}

// sessionRegained is the registry's SessionRegained channel, nil (never
// ready) without ZooKeeper.
func (b *Bundle) sessionRegained() <-chan struct{} {
	if b.Registry == nil {
		return nil
	}
	return b.Registry.SessionRegained()
}

// finishWait waits wait before the finisher's next attempt, or less when
// regained is closed: the registry has its ZooKeeper session back (seed
// 941054: the finisher waited out its backoff after bj's registry had its
// session again, and no site was master meanwhile). It fails when ctx ends.
func (b *Bundle) finishWait(ctx context.Context, wait time.Duration, regained <-chan struct{}) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-regained:
		b.log.Info("FAILOVER: this site's ZooKeeper session is back; finishing the promotion now")
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// confirmRaise reads whether p's raise, whose answer was lost, committed
// (p.unconfirmed). Ours: it clears p.unconfirmed and the promotion goes
// on. Not ours (it did not commit, or a newer generation took over): the
// finisher ends (done) with the site as it was, a slave still following.
// Still unknown: the error, and done once giveUpAt passed (the site again
// stays as it was, its raise marked nowhere: the outcome is unknown).
func (b *Bundle) confirmRaise(ctx context.Context, p *promotion, attempt int, giveUpAt time.Time) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	mine, err := b.Registry.RaiseOutcome(rctx, b.Config().System.BrokerID, p.gen, p.unconfirmed)
	cancel()
	switch {
	case err == nil && mine:
		b.log.Warn("FAILOVER: the raise whose answer was lost had committed: finishing the promotion", "generation", p.gen)
		p.unconfirmed = ""
		b.failover.mu.Lock()
		if pp := b.failover.pending; pp != nil {
			pp.RaiseUnconfirmed = false
		}
		b.failover.mu.Unlock()
		return false, nil
	case err == nil:
		b.log.Warn("FAILOVER: the raise whose answer was lost did not commit (or a newer generation took over): no promotion; this site follows as before", "generation", p.gen)
		return true, fmt.Errorf("the raise of generation %d did not commit, or a newer generation took over: no promotion; this site follows its master as before", p.gen)
	}
	err = fmt.Errorf("promote: reading whether the raise of generation %d committed: %w", p.gen, err)
	if !time.Now().Before(giveUpAt) {
		f := &b.failover
		f.mu.Lock()
		g := &GivenUpPromotion{GaveUpAt: time.Now()}
		if f.pending != nil {
			g.PendingPromotion = *f.pending
		}
		g.Generation, g.Attempts, g.LastError = p.gen, attempt, err.Error()
		f.gaveUp = g
		f.mu.Unlock()
		b.log.Error("FAILOVER: GIVING UP the promotion: whether its raise committed could not be read within its bound; this site follows as before",
			"generation", p.gen, "bound", b.promoteFinishTimeout(), "err", err)
		return true, fmt.Errorf("the promotion to generation %d was given up: %w", p.gen, err)
	}
	b.failover.mu.Lock()
	if pp := b.failover.pending; pp != nil {
		pp.Attempts, pp.LastError = attempt, err.Error()
	}
	b.failover.mu.Unlock()
	return false, err
}

// cannotGiveUp is why the finisher of p must keep retrying past its bound,
// "" when it may give up: a site that took puts at p's generation (a
// switchover's held puts reached it: its log grew beyond the ends it
// recorded) alone holds them.
func (b *Bundle) cannotGiveUp(p *promotion) string {
	if p.sc == nil || !p.o.Handover {
		return ""
	}
	for _, pt := range b.Store.Partitions() {
		if end, ok := p.rep.Ends[georeplicator.PartKey(pt.Topic, pt.Partition)]; !ok || pt.Max > end {
			return fmt.Sprintf("this site took puts at generation %d (%s-%d grew beyond its promotion end): it alone holds them", p.gen, pt.Topic, pt.Partition)
		}
	}
	return ""
}

// giveUpPromotion ends p once its finisher's bound passed: the shipper it
// started stops, puts are refused, the generation is marked abandoned in
// ZooKeeper (retried until done, moved on, or ctx ends) so that the
// master that stepped down for it takes mastership back
// (reclaimAbandoned), and this site follows again as the slave it was.
func (b *Bundle) giveUpPromotion(ctx context.Context, p *promotion, attempts int, last error) {
	f := &b.failover
	b.log.Error("FAILOVER: GIVING UP the promotion: it could not be finished within its bound; this site follows again as a slave",
		"generation", p.gen, "bound", b.promoteFinishTimeout(), "attempts", attempts, "err", last)
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: fmt.Sprintf(
		"this broker is a slave of broker %d: its promotion to generation %d was given up", b.Config().System.BrokerID, p.gen)})
	if p.sc != nil {
		if _, err := f.role.stopShipper(); err != nil {
			b.log.Warn("FAILOVER: stopping the shipper of the promotion given up", "err", err)
		}
		p.sc = nil
		b.Broker.SetPromotionEnds(nil)
	}
	abandoned := b.Registry == nil
	for wait := finishFirstRetry; !abandoned; wait = min(2*wait, finishMaxRetry) {
		err := b.Registry.AbandonGeneration(ctx, b.Config().System.BrokerID, p.gen)
		if err == nil || errors.Is(err, registry.ErrGenerationMoved) {
			abandoned = err == nil
			break
		}
		b.log.Warn("FAILOVER: marking the generation given up as abandoned in ZooKeeper failed; retrying", "generation", p.gen, "in", wait, "err", err)
		if clock.Sleep(ctx, wait) != nil {
			break
		}
	}
	f.mu.Lock()
	g := &GivenUpPromotion{GaveUpAt: time.Now(), Abandoned: abandoned}
	if f.pending != nil {
		g.PendingPromotion = *f.pending
	}
	g.Generation, g.Attempts, g.LastError = p.gen, attempts, last.Error()
	f.gaveUp = g
	f.mu.Unlock()
	b.followAgain(ctx, p, p.gen, "promotion to generation "+strconv.FormatUint(p.gen, 10)+" given up after "+b.promoteFinishTimeout().String())
}

// newerGeneration is a generation above p's seen in ZooKeeper (this
// site's ensemble or another site's), by gossip or by the promotion's own
// shipper, and where; 0 when none is known.
func (b *Bundle) newerGeneration(ctx context.Context, p *promotion) (uint64, string) {
	var best uint64
	var from string
	see := func(g uint64, where string) {
		if g > best {
			best, from = g, where
		}
	}
	if p.sc != nil {
		if s := p.sc.Shipper(); s != nil {
			if fe := s.Fence(); fe.SteppedDown {
				see(fe.Newer, "this site's shipper")
			}
		}
	}
	see(b.observedGeneration(ctx))
	return best, from
}

// observedGeneration is the highest generation of this brokerId that
// ZooKeeper (this site's ensemble and the other sites' this bundle
// reaches) or gossip (a master other than this bundle) shows, and where it
// was seen; reads that fail count as nothing seen.
func (b *Bundle) observedGeneration(ctx context.Context) (uint64, string) {
	var best uint64
	var from string
	see := func(g uint64, where string) {
		if g > best {
			best, from = g, where
		}
	}
	brokerID := b.Config().System.BrokerID
	if b.Registry != nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if g, err := b.Registry.Generation(rctx, brokerID); err == nil {
			see(g, "this site's ZooKeeper")
		}
		cancel()
		if g, site := b.otherGenerations(ctx); g > 0 {
			see(g, "site "+site+"'s ZooKeeper")
		}
	}
	if tc := compOf[*topologyComponent](b); tc != nil {
		if t := tc.Topology(); t != nil {
			if m, ok := t.Master(brokerID); ok {
				see(m.Meta.Generation, "gossip from "+m.Meta.Site)
			}
		}
	}
	return best, from
}

// abandonPromotion undoes p once generation newer (seen at from) took
// over: a shipper the promotion started steps down and runRejoin makes
// the site a slave of the new master (Demote); without one the site
// follows again at once, as the slave it was.
func (b *Bundle) abandonPromotion(ctx context.Context, p *promotion, newer uint64, from string) {
	b.log.Warn("FAILOVER: abandoning the promotion: a newer generation took over; this site follows its master",
		"generation", p.gen, "newer", newer, "seenAt", from)
	if p.sc != nil {
		if s := p.sc.Shipper(); s != nil {
			s.ObserveGeneration(newer, from) // onFence wakes runRejoin
		}
		return
	}
	b.followAgain(ctx, p, newer, "promotion to generation "+strconv.FormatUint(p.gen, 10)+" abandoned: follows the master of generation "+strconv.FormatUint(newer, 10))
}

// followAgain makes the site of p, whose shipper does not run, follow
// again as the slave it was: the master of generation newer (or later),
// found in ZooKeeper (or at its masterAddress without ZooKeeper).
func (b *Bundle) followAgain(ctx context.Context, p *promotion, newer uint64, why string) {
	f := &b.failover
	sl := f.role.slaveConfig()
	if sl == nil {
		b.log.Error("FAILOVER: no slave configuration to follow the new master with; restart this site as a slave", "generation", newer)
		return
	}
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: fmt.Sprintf(
		"this broker is a slave of broker %d; it follows the master of generation %d: send puts there", b.Config().System.BrokerID, newer)})
	if p.recorded {
		if err := p.id.SetRole(&georeplicator.Role{Name: georeplicator.RoleSlave, Generation: newer,
			SlaveID: sl.SlaveID, SlaveGroup: sl.SlaveGroup, MasterAddress: sl.MasterAddress}); err != nil {
			b.log.Error("FAILOVER: recording the slave role", "err", err)
		}
	}
	follow := *sl
	if b.Registry != nil {
		follow.MasterAddress = "" // the receiver finds the new master in ZooKeeper
	}
	follow.File = "(promotion abandoned at run time)"
	if err := f.role.startReceiver(ctx, b, b.withSiteLink(follow)); err != nil {
		b.log.Error("FAILOVER: following the new master after the abandoned promotion failed; restart this site as a slave", "err", err)
		return
	}
	cur := f.role.Current()
	f.role.Set(siterole.State{Role: siterole.Slave, Generation: newer, SlaveID: sl.SlaveID, SlaveGroup: sl.SlaveGroup,
		Master: cur.Master, Why: why})
	b.refreshGossip()
}

// sharedGenFacts gathers what the finisher of p knows about another site
// holding p's generation: a master of it by gossip, and its raiser in
// every ensemble this site reaches (siterole.SharedGeneration).
func (b *Bundle) sharedGenFacts(ctx context.Context, p *promotion) siterole.SharedGenFacts {
	self := b.Config().Site.Name
	f := siterole.SharedGenFacts{Site: self, Generation: p.gen, TookPuts: b.cannotGiveUp(p) != ""}
	id := b.Config().System.BrokerID
	if tc := compOf[*topologyComponent](b); tc != nil {
		if t := tc.Topology(); t != nil {
			for _, m := range t.Members() {
				if m.State == topology.StateAlive && m.Meta.Role == topology.RoleMaster && m.Meta.BrokerID == id &&
					m.Meta.Generation == p.gen && m.Meta.Site != "" && m.Meta.Site != self {
					f.OtherMaster = m.Meta.Site
				}
			}
		}
	}
	// Only a forced raise, which needs no majority, can share its number
	// with another raise; a raise that won a majority of the ensembles
	// owns it even where a loser's undo failed and still names the loser.
	if b.Registry == nil || p.unconfirmed != "" || !p.o.Force || p.o.Reclaim {
		return f
	}
	_, ens := b.raiseEnsembles()
	for _, e := range ens {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		g, by, err := e.reg.GenerationRaiser(rctx, id)
		cancel()
		if err == nil && g == p.gen && by.Site != "" && by.Site != self && !by.Abandoned && (f.OtherRaiser == "" || by.Site < f.OtherRaiser) {
			f.OtherRaiser = by.Site
		}
	}
	return f
}

// yieldGeneration gives p's generation up to another site that holds the
// same number (siterole.SharedGeneration): the shipper p started stops,
// puts are refused, the epoch p recorded leaves the identity's history
// (the two logs forked at the generation before), and the site follows
// the master of that generation. Unlike giveUpPromotion it marks nothing
// abandoned: the generation is the other site's.
func (b *Bundle) yieldGeneration(ctx context.Context, p *promotion, why string) {
	b.log.Error("FAILOVER: another site holds the generation this promotion raised; giving it up", "generation", p.gen, "why", why)
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: fmt.Sprintf(
		"this broker is a slave of broker %d: %s", b.Config().System.BrokerID, why)})
	if p.sc != nil {
		if _, err := b.failover.role.stopShipper(); err != nil {
			b.log.Warn("FAILOVER: stopping the shipper of the generation given up", "err", err)
		}
		p.sc = nil
		b.Broker.SetPromotionEnds(nil)
	}
	// Also when the record failed: the identity changed its copy first.
	if err := p.id.DropEpoch(p.gen); err != nil {
		b.log.Error("FAILOVER: removing the generation given up from the identity's history", "generation", p.gen, "err", err)
	}
	b.followAgain(ctx, p, p.gen, why)
}

// raiseAgain raises a newer generation for p (the forced rule), whose
// generation another site holds while this site took puts at it: the
// epoch recorded for the old number leaves the identity's history, the
// shipper started at it stops, and the finisher completes the promotion
// at the new number (with the ends it first recorded).
func (b *Bundle) raiseAgain(ctx context.Context, p *promotion, why string) error {
	gen, err := b.nextGeneration(ctx, p.gen, p.gen, true)
	if err != nil {
		return err
	}
	b.log.Error("FAILOVER: another site holds the generation this promotion raised, and this site took puts at it; raised a newer one",
		"generation", p.gen, "newGeneration", gen, "why", why)
	if p.sc != nil {
		if _, err := b.failover.role.stopShipper(); err != nil {
			b.log.Warn("FAILOVER: stopping the shipper of the old generation", "err", err)
		}
		p.sc = nil
	}
	if err := p.id.DropEpoch(p.gen); err != nil {
		return fmt.Errorf("promote: remove generation %d from the identity's history: %w", p.gen, err)
	}
	p.recorded = false
	p.gen = gen
	b.failover.mu.Lock()
	if pp := b.failover.pending; pp != nil {
		pp.Generation = gen
	}
	b.failover.mu.Unlock()
	return nil
}

// endStaleHold ends the hold this site's own earlier handover left in
// effect (it passes puts on to the master it handed over to for
// HandoverHold after a switchover): switched back within that time, this
// site would otherwise send its producers' puts to a slave.
func (b *Bundle) endStaleHold() {
	if b.Broker.EndHold() {
		b.log.Warn("FAILOVER: this site is master again: the puts it still passed on to the master it had handed over to are taken here")
	}
}
