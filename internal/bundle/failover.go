package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/topology"
)

// failoverHolder is the write gate holder of a master that replication has
// fenced (a lost lease, or a newer generation elsewhere).
const failoverHolder = "failover"

// failoverState is what a bundle keeps about mastership of its brokerId:
// the site's role (the state machine every transition goes through), its
// replication identity (log id, generation) and the shipper or receiver a
// transition at run time started.
type failoverState struct {
	// role is the site's role, the transition in progress and what runs
	// for the role (roleOwner); Promote, Demote, switchover and the fence
	// are the only code that changes it.
	role *roleOwner
	// idMu serialises opening the identity file; it is never held with mu.
	idMu sync.Mutex
	mu   sync.Mutex // guards id, stopRejoin, pending, stopFinish, closed and stopped
	id   *georeplicator.IdentityStore
	// stopped is the log position this site had applied when the
	// promotion under way stopped its stream receiver (held: one is under
	// way and had a position). Gossip carries it until the site is master
	// (appliedPos): gossiped as 0, a sibling took itself for the candidate
	// and promoted itself against this site's raise.
	stopped stoppedPos
	// pending is a promotion that failed after raising the generation and
	// is finished in the background (promote_finish.go); stopFinish ends
	// its finisher (closeFailover).
	pending    *PendingPromotion
	stopFinish func()
	// finish is how the last finisher ended (awaitPromotionFinish); gaveUp
	// the last promotion it gave up (Status).
	finish *finishOutcome
	gaveUp *GivenUpPromotion
	closed bool // closeFailover ran: no finisher starts
	// beforeRegister, tests only: called by a promotion once it ships at
	// its generation (a switchover's new master takes puts from then on),
	// before it registers in ZooKeeper and its role becomes master.
	beforeRegister atomic.Pointer[func()]
	// afterHandoverTold, tests only: called by a switchover's new master
	// once it told the old master it took over, before it opens its
	// writes (a slow step there).
	afterHandoverTold atomic.Pointer[func()]
	// beforeWritesOpen, tests only: called by a promotion once it
	// registered in ZooKeeper (producers move here), before it opens its
	// writes.
	beforeWritesOpen atomic.Pointer[func()]
	// completeFails, tests only: called at the start of every attempt of
	// the steps after the raise (completePromotion); an error fails it.
	completeFails atomic.Pointer[func() error]
	// takingOver is the hold of the puts that reach this site while it
	// is promoted, from its raise (a switchover's: from the handover) until
	// the promotion opens writes (holdWhileTakingOver), nil when none.
	takingOver *broker.Hold
	// handovers are promotions a master's handover started (owned here,
	// waited for by closeFailover).
	handovers sync.WaitGroup
	// remote are switchovers slave sites asked this master for.
	remote remoteSwitchovers
	// handedFrom is the master that last handed mastership over to this
	// site (a switchover), nil without one (handoverSlaveEntry).
	handedFrom *handoverOrigin
	// rejoinWake wakes runRejoin; stopRejoin ends it (closeFailover).
	rejoinWake chan struct{}
	stopRejoin func()
	// notices is what a handover's new master told this master over the
	// replication link (takeover_notice.go).
	notices takeoverNotices
}

// identity opens <dataPath>/replication/identity.json once. The file is
// read under idMu, not mu, which mastership takes at every gossip refresh.
func (b *Bundle) identity() (*georeplicator.IdentityStore, error) {
	f := &b.failover
	if id := f.openedIdentity(); id != nil {
		return id, nil
	}
	f.idMu.Lock()
	defer f.idMu.Unlock()
	if id := f.openedIdentity(); id != nil {
		return id, nil
	}
	dir := filepath.Join(b.Config().System.DataPath, "replication")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	id, err := georeplicator.OpenIdentity(filepath.Join(dir, "identity.json"))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.id = id
	f.mu.Unlock()
	return id, nil
}

// openedIdentity is the identity store once opened, else nil.
func (f *failoverState) openedIdentity() *georeplicator.IdentityStore {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.id
}

// Role is the site's role now: master or slave, the generation, and
// whether a master stepped down. Components read it instead of the role
// the bundle started with.
func (b *Bundle) Role() siterole.State { return b.failover.role.Current() }

// RoleChanged is closed at the next change of the role (or of the
// transition in progress).
func (b *Bundle) RoleChanged() <-chan struct{} { return b.failover.role.Changed() }

// onFence applies the shipper's fence to the broker's write gate: a fenced
// master answers puts 503 (retriable: producers that follow ZooKeeper find
// the master of the newest generation).
func (b *Bundle) onFence(f georeplicator.Fence) {
	if !f.Fenced {
		b.Broker.AllowWrites(failoverHolder)
		return
	}
	reason := "this master is fenced: " + f.Reason
	if f.SteppedDown {
		reason = fmt.Sprintf("this broker is no longer master (generation %d took over); send puts to the new master", f.Newer)
	}
	b.Broker.RefuseWrites(failoverHolder, broker.Refusal{Reason: reason, Retry: true})
	b.endConfirmHold() // what waited for a confirmation gets this refusal
	if f.SteppedDown {
		b.failover.role.StepDown(f.Newer, fmt.Sprintf("generation %d took over", f.Newer))
		b.wakeRejoin() // it becomes a slave of the new master
	}
}

// watchGeneration polls the brokerId's generation in ZooKeeper while s
// runs and tells s about a newer one (another site was promoted): s then
// steps down and the broker refuses puts. It returns when ctx ends.
func (b *Bundle) watchGeneration(ctx context.Context, s *georeplicator.Shipper, held uint64, g *ackGuard, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		readStart := time.Now()
		// Bounded as the other sites' reads are: a stalled ensemble (its
		// session connected, no answers) must not hold the round up to
		// the session's timeout, nor keep the other ensembles unread.
		rctx, cancel := context.WithTimeout(ctx, g.readTimeout())
		gen, err := b.Registry.Generation(rctx, b.Config().System.BrokerID)
		cancel()
		g.observe(len(s.Lag()), gen, b.Config().Replication.FenceSites, len(b.Config().Replication.Sites))
		if err != nil && ctx.Err() == nil {
			b.log.Warn("FAILOVER: reading the generation from ZooKeeper failed", "err", err, "bound", g.readTimeout())
		}
		if ctx.Err() == nil {
			// With one ensemble per site this site's may have missed a
			// promotion elsewhere; the other sites' ensembles this bundle
			// reaches are read too before a confirmation, and also when
			// this site's could not be read: a newer generation there
			// makes this master step down (it confirms nothing then).
			reads := b.generationReads(ctx, gen, err == nil, held, g.readTimeout())
			for site, other := range reads {
				if other > gen {
					s.ObserveGeneration(other, "site "+site+"'s ZooKeeper")
				}
			}
			if err == nil {
				s.ObserveGeneration(gen, "ZooKeeper")
				if !s.Fence().SteppedDown {
					b.confirmGeneration(g, held, reads, readStart)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// PromoteReport is what `metaq-server promote` prints.
type PromoteReport struct {
	Generation uint64 `json:"generation"`
	Forced     bool   `json:"forced"`
	// BehindBytes is how far this site was known to be behind its old
	// master when it stopped following it: the master's durable log end as
	// last reported to this site minus what it applied.
	BehindBytes int64 `json:"behindBytes"`
	MasterPos   int64 `json:"masterLogPos"`
	AppliedPos  int64 `json:"appliedLogPos"`
	// Lag is the old master's last lag report for this site's slave group
	// as gossip brought it (messages and bytes not yet here), when topology
	// runs; nil otherwise.
	Lag *topology.Report `json:"lag,omitempty"`
	// LagReport is the old master's last lag report over the replication
	// link: bytes and messages this site was behind, per partition; nil
	// when it had none (see lastLagReport).
	LagReport *georeplicator.LagReport `json:"lagReport,omitempty"`
	// Ends is each partition's end at promotion ("topic-partition").
	Ends  map[string]int64    `json:"ends"`
	Took  time.Duration       `json:"tookNs"`
	Fence georeplicator.Fence `json:"fence"`
	// Followers says, for each slave site of the brokerId, whether it
	// followed this new master within the admin call's bound, and why not
	// (FollowersNote: what could not be checked).
	Followers     []FollowerReport `json:"followers,omitempty"`
	FollowersNote string           `json:"followersNote,omitempty"`
	// FencedSession is the dead master's ZooKeeper session whose master
	// node the promotion took instead of waiting for it to expire; Waited
	// is how long it waited for the master node to be free.
	FencedSession string        `json:"fencedSession,omitempty"`
	Waited        time.Duration `json:"waitedNs"`
	// FinishedInBackground is the error a step after the raise failed with
	// first, when the background finisher completed the promotion within
	// the admin call's bound (POST /promote); "" when it did not fail.
	FinishedInBackground string `json:"finishedInBackground,omitempty"`
}

// ErrMasterReachable refuses a promotion while the master is alive and
// reachable (use force).
var ErrMasterReachable = errors.New("the master is alive and reachable from this site")

// ErrWrongRole marks a command this site's role does not allow now
// (promote at a master, switchover at a slave, either while another role
// change runs): the admin endpoint answers 409 Conflict, not 500, since
// nothing failed.
var ErrWrongRole = errors.New("this site's role does not allow the command now")

// ErrUnknownSlave marks a switchover to a slave this master does not know:
// the admin endpoint answers 404.
var ErrUnknownSlave = errors.New("no such slave")

// roleError is an error with its own text that matches sentinel.
type roleError struct {
	text     string
	sentinel error
}

func (e *roleError) Error() string { return e.text }
func (e *roleError) Unwrap() error { return e.sentinel }

// wrongRole is ErrWrongRole with the text given.
func wrongRole(format string, args ...any) error {
	return &roleError{text: fmt.Sprintf(format, args...), sentinel: ErrWrongRole}
}

// Promote makes this slave site the master of its brokerId at the next
// generation: it stops following the old master, records the generation
// and each partition's end (a returning old master cuts what it holds
// beyond them), starts shipping its log to the other sites, and takes
// writes (after the lease, when [replication] fenceSites is set). Unless
// force, it refuses while the master is reachable, while another slave
// site holds more of the old master's log or still follows it
// (ErrSiblingAhead), and when another site was promoted since this one
// last followed a master (the generation in ZooKeeper moved).
func (b *Bundle) Promote(ctx context.Context, force bool) (PromoteReport, error) {
	return b.PromoteWith(ctx, PromoteOptions{Force: force})
}

// PromoteOptions are promote's flags.
type PromoteOptions struct {
	// Force promotes even while the master looks alive (see Promote).
	Force bool
	// Wait: when the master node in this site's ZooKeeper is held by a
	// live session that cannot be told to be a dead master's (no gossip,
	// gossip not sure yet), wait for the session to expire instead of
	// refusing; the report says how long it waited.
	Wait bool
	// Handover: the master handed mastership over (a switchover) and steps
	// down: its master node and its topics' entries are replaced at once
	// instead of waited for, so that ZooKeeper lists the topics' partitions
	// throughout.
	Handover bool
	// Auto: automatic failover promotes on the dead-master rule
	// (siterole.MasterLost). Having raised the generation it waits as long
	// as a master acknowledges without confirming its generation also when
	// no live session held the master node (with one ZooKeeper per site the
	// old master's node may never have reached this site's ensemble): a
	// master that is in fact alive acknowledges nothing by then.
	Auto bool
	// ReclaimFrom: the master that stepped down for generation ReclaimFrom
	// takes mastership back after its raiser gave that promotion up
	// (reclaimAbandoned); the generation is raised from ReclaimFrom only
	// (as without Force), the other checks are skipped (as with Force).
	ReclaimFrom uint64
	// Reclaim: this is a reclaim (ReclaimFrom, which may be 0, is the
	// generation raised from). ReclaimAbove: the raise goes above this
	// generation (a number given back: siterole.ReclaimGivenBack), not
	// merely to ReclaimFrom+1.
	Reclaim      bool
	ReclaimAbove uint64
}

// PromoteWith is Promote with its options. Without Force, a master node
// held by a live session is no obstacle when that session is a dead
// master's (siterole.FenceDeadMaster: link down, gossip declared the
// master down, silent for longer than a master acknowledges without
// confirming its generation): the promotion raises the generation and
// takes the node instead of waiting for the session to expire.
func (b *Bundle) PromoteWith(ctx context.Context, o PromoteOptions) (PromoteReport, error) {
	force := o.Force
	start := time.Now()
	f := &b.failover
	if b.closing.Load() {
		return PromoteReport{}, wrongRole("promote: the bundle is stopping")
	}
	endPromoting, err := f.role.Begin(siterole.Promoting)
	if err != nil {
		return PromoteReport{}, fmt.Errorf("promote: %w", err)
	}
	end := func() {
		f.setStopped(stoppedPos{}) // the promotion is over: master, or following again
		endPromoting()
	}
	handed := false // the transition is the background finisher's
	defer func() {
		if !handed {
			end()
		}
	}()
	if f.role.Current().Role == siterole.Master {
		return PromoteReport{}, wrongRole("promote: this site is already master")
	}

	rc := b.receiver()
	if rc == nil {
		return PromoteReport{}, wrongRole("promote: this site is not a running async slave")
	}
	// A former master taking mastership back follows no one: its receiver
	// may not have begun a stream (nothing to stop, nothing behind). Nor
	// has a demoted former master that waits for its new master's
	// replication address: its master's silence counts from when it began
	// waiting (linkStatus), as any slave's that never heard from a master.
	st, ok := rc.linkStatus()
	if !ok && !o.Reclaim {
		return PromoteReport{}, wrongRole("promote: this site is not a running async slave")
	}
	var fenceSession int64 // a dead master's session whose master node this promotion takes
	if !force {
		ev, heldBy := b.masterAliveEvidence(ctx, st)
		if heldBy != 0 {
			path := b.Registry.Paths().Broker(b.Config().System.BrokerID, -1)
			switch ok, why := siterole.FenceDeadMaster(b.deadMasterFacts(rc, st)); {
			case ok:
				fenceSession = heldBy
			case o.Wait:
				b.log.Warn("FAILOVER: the master node is held by a live session that is not known to be a dead master's; promote -wait waits for it to expire",
					"path", path, "owner", fmt.Sprintf("0x%x", heldBy), "why", why, "maxWait", b.Config().ZooKeeper.SessionTimeout)
			default:
				ev = append(ev, fmt.Sprintf("this site's ZooKeeper has the master node %s held by a live session (0x%x), not known to be a dead master's: %s; "+
					"promote -wait waits for that session to expire (up to zk.zkSessionTimeoutMs, %v)", path, heldBy, why, b.Config().ZooKeeper.SessionTimeout))
			}
		}
		if len(ev) > 0 {
			return PromoteReport{}, fmt.Errorf("promote: %w: %s; stop it first or use -force", ErrMasterReachable, strings.Join(ev, "; "))
		}
	}
	if why := b.siblingAhead(st.AppliedPos); why != "" && !force {
		return PromoteReport{}, fmt.Errorf("promote: %w: %s; promote that site, or use -force (what only it holds is then cut there and saved aside)", ErrSiblingAhead, why)
	}
	rep := PromoteReport{Forced: force, MasterPos: st.MasterPos, AppliedPos: st.AppliedPos,
		BehindBytes: max(0, st.MasterPos-st.AppliedPos)}
	rep.Lag = b.lastKnownLag()
	rep.LagReport = lastLagReport(rc)
	id, err := b.identity()
	if err != nil {
		return rep, err
	}
	// The generation is taken while this site still follows: when another
	// site was promoted meanwhile, this one keeps following (and finds the
	// new master) instead of having stopped for nothing.
	known := id.Generation()
	if o.Reclaim {
		known = o.ReclaimFrom
	}
	if o.Auto {
		known = b.autoRaiseFrom(ctx, known)
	}
	gen, err := b.nextGeneration(ctx, known, max(known, o.ReclaimAbove), force && !o.Reclaim)
	var unknown *registry.RaiseUnknownError
	if errors.As(err, &unknown) && !b.closing.Load() {
		// The raise's answer was lost and ZooKeeper did not let it be read
		// back: it may have committed, and then the old master steps down.
		// The finisher learns whether it is this site's and finishes the
		// promotion, or ends it; this site follows meanwhile.
		handed = true
		b.finishPromotion(&promotion{gen: unknown.Generation, o: o, rep: rep, fenceSession: fenceSession, rc: rc, id: id, start: start, unconfirmed: unknown.Token}, end, err)
		return rep, fmt.Errorf("%w; %w: whether generation %d was raised is not known yet: the site finishes the promotion if it was, retrying 1-10 s apart (at once when its ZooKeeper session is back), for up to %v (status: pendingPromotion)",
			err, ErrPromotionPending, unknown.Generation, b.promoteFinishTimeout())
	}
	if err != nil {
		return rep, err
	}
	p := &promotion{gen: gen, o: o, rep: rep, fenceSession: fenceSession, rc: rc, id: id, start: start}
	p.steps.mark(start, "checksAndRaise")
	if !o.Handover {
		// From the raise on, ZooKeeper may name this site (the take-over of
		// the master node) before its writes open: a put reaching it then
		// would take a slave's route, to its own gateway, which finds this
		// site named as master and gives up. Held, it is stored once writes
		// open (a switchover's hold began at the handover).
		b.holdWhileTakingOver("this site is being promoted")
	}
	if o.Handover {
		b.tellOldMaster(ctx, rc, gen) // before this site stops following it
		p.steps.mark(start, "tellOldMaster")
		if h := b.failover.afterHandoverTold.Load(); h != nil {
			(*h)()
		}
	}
	// From here on the generation is this site's: no other site takes it
	// (a compare-and-set raised it), and the master of the older one steps
	// down when it sees it. A step that fails is retried in the background
	// until the promotion is done or a newer generation takes over
	// (finishPromotion), never left half done with no master of gen.
	if err := b.completePromotion(ctx, p); err != nil {
		if b.closing.Load() {
			b.endTakeOverHold()
			return p.rep, err
		}
		handed = true
		b.finishPromotion(p, end, err)
		return p.rep, fmt.Errorf("%w; %w: generation %d is raised and this site's: it retries 1-10 s apart (at once when its ZooKeeper session is back) until it is master, a newer generation takes over, or it gives up after %v (status: pendingPromotion)",
			err, ErrPromotionPending, gen, b.promoteFinishTimeout())
	}
	return p.rep, nil
}

func promoteWhy(force bool) string {
	if force {
		return "promoted (forced, or a switchover handed over)"
	}
	return "promoted"
}

// raiseTimeout bounds a promotion's raise of the generation in ZooKeeper
// (a variable for tests).
var raiseTimeout = 10 * time.Second

// handoverConfirmWait is how long a master that handed over waits for the
// new generation to exist before it takes puts again: longer than the new
// master may take to raise it.
var handoverConfirmWait = raiseTimeout + 5*time.Second

// awaitNewGeneration waits until a generation of at least want is seen
// (observedGeneration: ZooKeeper or gossip) and returns it and where it
// was seen; an error when none is within bound or ctx.
func (b *Bundle) awaitNewGeneration(ctx context.Context, want uint64, bound time.Duration) (uint64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for {
		if g, from := b.observedGeneration(ctx); g >= want {
			return g, from, nil
		}
		if n := b.failover.notices.notice(); n.gen >= want {
			return n.gen, "the new master at " + n.site + ", over the replication link", nil
		}
		select {
		case <-ctx.Done():
			return 0, "", fmt.Errorf("generation %d was not seen in ZooKeeper or by gossip within %v: %w", want, bound, ctx.Err())
		case <-tk.C:
		}
	}
}

// nextGeneration raises the brokerId's generation for a promotion and
// returns it. Without ZooKeeper it is one above the generation known here.
// Unless force, ZooKeeper's must still be the one known here: otherwise
// another site was promoted since, and a second master of a newer
// generation would fence the first while failing to register itself (two
// slave sites failing over automatically at once left no master at all);
// with one ensemble per site that compare-and-set must win in a majority
// of the deployment's ensembles (quorumRaise). A forced raise (promote
// -force, a switchover's new master) goes one above every generation it
// sees and must win in its own ensemble and in every other it reaches
// (forcedRaise): it never takes a number it can see taken. A raise that
// cannot write every [replication] sites site's ensemble takes the next
// number of its site's class (genquorum.go).
//
// above (at least known) is the generation the raise goes above: known, or
// a number given back that a reclaim must not take again.
func (b *Bundle) nextGeneration(ctx context.Context, known, above uint64, force bool) (uint64, error) {
	above = max(above, known)
	if b.Registry == nil {
		return above + 1, nil
	}
	ctx, cancel := context.WithTimeout(ctx, raiseTimeout)
	defer cancel()
	total, ens := b.raiseEnsembles()
	var gen uint64
	var err error
	switch {
	case force:
		gen, err = b.forcedRaise(ctx, ens, known)
	case total > 1:
		// One ensemble per site: a majority of them decides (genquorum.go).
		gen, err = b.quorumRaise(ctx, total, ens, known, above)
	default:
		// One ensemble known. When it is not shown to be every listed
		// site's (gossip and the record name no other), the class rule
		// applies as for a raise that cannot reach them all.
		gen = above + 1
		if covered, _ := b.reachesListedSites(ens); !covered {
			gen = b.raiseTarget(above+1, false, true)
		}
		var token string
		if token, err = registry.NewRaiseToken(); err == nil {
			_, err = b.Registry.RaiseGenerationFromToAs(ctx, b.Config().System.BrokerID, known, gen,
				registry.Raiser{Site: b.Config().Site.Name, Token: token})
		}
	}
	if errors.Is(err, registry.ErrGenerationMoved) {
		return 0, fmt.Errorf("promote: %w: another site was promoted since this site last followed a master; it follows the new master (use -force to override)", err)
	}
	if err != nil {
		return 0, fmt.Errorf("promote: raise the generation in ZooKeeper: %w", err)
	}
	return gen, nil
}

// autoRaiseFrom is the generation an automatic promotion raises from
// (siterole.AutoRaiseFrom): known, or a newer generation seen in the
// ZooKeeper ensembles this bundle reaches or followed by another site in
// gossip that no site is master of in gossip (a promotion raised it and
// never finished).
func (b *Bundle) autoRaiseFrom(ctx context.Context, known uint64) uint64 {
	f := b.unfinishedFacts(ctx, known)
	from, why := siterole.AutoRaiseFrom(f)
	if why != "" {
		b.log.Warn("FAILOVER: "+why, "generation", from, "known", known)
	}
	return from
}

// lastKnownLag is this site's slave group's lag from the last lag report
// gossip brought here, nil without topology or a report.
func (b *Bundle) lastKnownLag() *topology.Report {
	tc := compOf[*topologyComponent](b)
	sl := b.SlaveConfig()
	if tc == nil || tc.Topology() == nil || sl == nil {
		return nil
	}
	for _, r := range tc.Topology().Reports() {
		if r.BrokerID == b.Config().System.BrokerID && r.SlaveID == sl.SlaveID {
			return &r
		}
	}
	return nil
}

// promotedShipper is the shipper a promotion started, nil without one.
func (b *Bundle) promotedShipper() *shipperComponent {
	sc, _, _ := b.failover.role.runtime()
	return sc
}

// servePromote is POST /promote[?force=true] on the admin endpoint: the
// PromoteReport, or 409 while the master is reachable.
func (a *Admin) servePromote(w http.ResponseWriter, r *http.Request) {
	force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	wait, _ := strconv.ParseBool(r.URL.Query().Get("wait"))
	bound, err := followWait(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rep, err := a.b.PromoteWith(r.Context(), PromoteOptions{Force: force, Wait: wait})
	if errors.Is(err, ErrPromotionPending) {
		// A step after the raise failed: the finisher retries it. Wait for
		// it, so that the answer says what happened in the end.
		finish, ferr := finishWait(r)
		if ferr != nil {
			http.Error(w, ferr.Error(), http.StatusBadRequest)
			return
		}
		first := err
		rep, err = a.b.awaitPromotionFinish(r.Context(), finish)
		if err == nil {
			rep.FinishedInBackground = first.Error()
		} else {
			err = fmt.Errorf("promote: %w (it first failed with: %v)", err, first)
		}
	}
	switch {
	case err != nil:
		http.Error(w, err.Error(), roleChangeStatus(err))
	default:
		rep.Followers, rep.FollowersNote = a.b.awaitFollowers(r.Context(), rep.Generation, bound)
		writeJSON(w, http.StatusOK, rep)
	}
}

// roleChangeStatus is the admin endpoint's HTTP status for a promotion or
// switchover that did not happen: 409 when this site's state refuses it
// (another site's master alive, a sibling ahead, the wrong role, another
// role change running), 404 for an unknown slave, 500 when something
// failed.
func roleChangeStatus(err error) int {
	var busy *siterole.ErrBusy
	switch {
	case errors.Is(err, ErrUnknownSlave):
		return http.StatusNotFound
	case errors.Is(err, ErrMasterReachable), errors.Is(err, ErrSiblingAhead), errors.Is(err, ErrWrongRole), errors.As(err, &busy):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

// defaultFinishWait is how long POST /promote waits for the background
// finisher of a promotion that failed after its raise (finishWait).
const defaultFinishWait = 20 * time.Second

// finishWait is POST /promote's finishWait parameter (a duration).
func finishWait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("finishWait")
	if v == "" {
		return defaultFinishWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("finishWait=%q: want a duration such as 30s", v)
	}
	return d, nil
}

// closeFailover waits for a promotion a handover started and stops a
// shipper started by a promotion.
func (b *Bundle) closeFailover() error {
	f := &b.failover
	f.role.Machine.Close() // no transition starts from here on
	f.remote.stop()
	f.mu.Lock()
	stop, stopFinish := f.stopRejoin, f.stopFinish
	f.stopRejoin, f.stopFinish, f.closed = nil, nil, true
	f.mu.Unlock()
	if stopFinish != nil {
		stopFinish()
	}
	if stop != nil {
		stop()
	}
	f.handovers.Wait()
	return f.role.close()
}

// compOf returns the bundle's component of type T, nil when not running.
func compOf[T Component](b *Bundle) T {
	var zero T
	for _, c := range b.comps {
		if t, ok := c.(T); ok {
			return t
		}
	}
	return zero
}

// switchoverHolder is the write gate holder while a master hands over.
const switchoverHolder = "switchover"

// promoteOnHandover is the receiver's OnPromote: the master handed
// mastership over (a planned switchover), and this site holds everything
// it had. The promotion closes the receiver, so it runs on its own
// goroutine, which closeFailover waits for.
func (b *Bundle) promoteOnHandover(pos int64) {
	f := &b.failover
	f.handovers.Add(1)
	go func() {
		defer f.handovers.Done()
		origin := b.handoverOriginNow()
		f.mu.Lock()
		f.handedFrom = origin
		f.mu.Unlock()
		b.holdWhileTakingOver("this site is taking over from the master")
		rep, err := b.PromoteWith(context.Background(), PromoteOptions{Force: true, Handover: true})
		if !errors.Is(err, ErrPromotionPending) {
			// Failed before the raise: the put route refuses the held
			// puts. One being finished keeps them until it opens writes
			// (completePromotion) or the finisher ends (finishPromotion):
			// a slave's route would pass them back to the old master.
			b.endTakeOverHold()
		}
		if err != nil {
			f.mu.Lock()
			if f.handedFrom == origin {
				f.handedFrom = nil
			}
			f.mu.Unlock()
			b.log.Error("FAILOVER: taking over from the master failed", "at", pos, "err", err)
			return
		}
		b.log.Warn("FAILOVER: took over from the master (switchover)", "generation", rep.Generation, "at", pos, "took", rep.Took)
	}()
}

// holdWhileTakingOver holds the puts that reach this site while it takes
// over (a Local broker.Hold, bounded by handoverHoldMs and
// handoverHoldBytes), until the promotion opens writes (endTakeOverHold);
// nothing with handoverHoldMs=0 or when a hold is in effect. Until then
// this site's gateway would pass a put on to the old master: after a
// handover it no longer stores puts, holds them and passes them on to this
// site, and those that reached this site would go back to it, each side
// awaiting the other's answer until the hold's bound passed (a failed send
// in the recommended deployment); after a failover it is dead or fenced,
// and once ZooKeeper names this site the gateway finds no master at all.
// Held here, they are stored once writes open.
func (b *Bundle) holdWhileTakingOver(reason string) {
	o, ok := b.holdOptions(reason)
	if !ok || b.Broker.Holding() {
		return
	}
	o.Local = true
	h, err := b.Broker.HoldWrites(o)
	if err != nil {
		return // another hold began meanwhile: it takes the puts
	}
	f := &b.failover
	f.mu.Lock()
	f.takingOver = h
	f.mu.Unlock()
}

// endTakeOverHold ends holdWhileTakingOver's hold, if any: what it held
// takes the route of a put arriving now.
func (b *Bundle) endTakeOverHold() {
	f := &b.failover
	f.mu.Lock()
	h := f.takingOver
	f.takingOver = nil
	f.mu.Unlock()
	if h != nil {
		h.End()
	}
}

// handoverOrigin is the master that hands mastership over to this site:
// its site, the slaveId it takes (the one this site leaves), and the
// generation the handover makes this site master of.
type handoverOrigin struct {
	site    string
	slaveID int
	gen     uint64
}

// handoverOriginNow is the master this slave site follows, as gossip
// names its site, and this site's slaveId; nil when either is not known.
func (b *Bundle) handoverOriginNow() *handoverOrigin {
	sl := b.SlaveConfig()
	tc := compOf[*topologyComponent](b)
	if sl == nil || tc == nil || tc.Topology() == nil {
		return nil
	}
	m, ok := tc.Topology().Master(b.Config().System.BrokerID)
	if !ok || m.Meta.Site == "" || m.Meta.Site == b.Config().Site.Name {
		return nil
	}
	id, err := b.identity()
	if err != nil {
		return nil
	}
	return &handoverOrigin{site: m.Meta.Site, slaveID: sl.SlaveID, gen: id.Generation() + 1}
}

// handoverSlaveEntry reports, for the ensemble of site, the slaveId whose
// topics-pub entry this master leaves there when it replaces the old
// master's entries (registry.MasterMirror.LeaveSlave): only for the site
// of the master that handed over to it, and only while this site's
// generation is the handover's (not after a later promotion).
func (b *Bundle) handoverSlaveEntry(site string) (int, bool) {
	f := &b.failover
	f.mu.Lock()
	o := f.handedFrom
	f.mu.Unlock()
	if o == nil || o.site != site || f.role.Current().Generation > o.gen {
		return 0, false
	}
	return o.slaveID, true
}

// SwitchoverReport is what `metaq-server switchover` prints.
type SwitchoverReport struct {
	To string `json:"to"` // the slave that took over (group/slaveId)
	// Site is the site of the slave that took over, as gossip names it
	// ("" when gossip is off or does not know it); BrokerID the brokerId
	// whose master it now is.
	Site     string `json:"site,omitempty"`
	BrokerID int    `json:"brokerId"`
	// DurableEnd is the log end the new master held when told to take over.
	DurableEnd int64 `json:"durableEnd"`
	// WritesStopped is how long this master had refused puts when it handed
	// over; producers reach the new master once it has registered (and,
	// with fenceSites, waited out the lease).
	WritesStopped time.Duration `json:"writesStoppedNs"`
	Generation    uint64        `json:"newGeneration"`
	// Following: this site became a slave of the new master.
	Following bool `json:"following"`
	// Via is the master's replication address when a slave site asked
	// (Following is then false: the master demotes itself after answering).
	Via string `json:"via,omitempty"`
	// Followers says, for each slave site of the brokerId (this one after
	// it stepped down included), whether it followed the new master within
	// the admin call's bound, and why not (FollowersNote: what could not
	// be checked).
	Followers     []FollowerReport `json:"followers,omitempty"`
	FollowersNote string           `json:"followersNote,omitempty"`
}

// switchover hands mastership to the slave named to (its slave group, the
// group's last "-" field, or its slaveId) with nothing lost: this master
// refuses puts (503, retriable), waits until that slave holds its whole
// durable log, tells it to take over, and becomes a slave of the new
// master (Demote): with ZooKeeper it finds the new master there, without
// it at follow (the new master's replication address); with neither it
// refuses puts until gossip names the new master (runRejoin), or until
// restarted as a slave. If the slave does not catch up within ctx, puts
// are taken again here. handedOver, when set,
// gets the report as it stands just before the slave is told to take over
// (a slave site's request is answered then: see switchover_remote.go).
// slaveMatcher matches the slave a switchover names: its slave group, the
// group's last "-" field, or its slaveId.
func slaveMatcher(to string) func(group string, slaveID int) bool {
	return func(group string, slaveID int) bool {
		return group == to || strings.HasSuffix(group, "-"+to) || strconv.Itoa(slaveID) == to
	}
}

// checkSwitchoverTarget refuses a switchover whose target is not a
// connected slave of this master, naming the slaves it knows and their
// state: "-to gz" while gz is down, or a misspelt "-to gzz".
func checkSwitchoverTarget(to string, slaves []georeplicator.GroupLag, match func(group string, slaveID int) bool) error {
	var known []string
	found := false
	for _, l := range slaves {
		state := "connected"
		switch {
		case !l.Connected:
			state = "DOWN (not connected)"
		case l.Stuck:
			state = "connected, stuck"
		}
		if match(l.Group, l.SlaveID) {
			if l.Connected {
				return nil
			}
			found = true
		}
		known = append(known, fmt.Sprintf("%s (slaveId %d): %s", l.Group, l.SlaveID, state))
	}
	sort.Strings(known)
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, "; ")
	}
	if found {
		return wrongRole("switchover: the slave %q is not connected to this master, so it cannot take over with nothing lost; slaves this master knows: %s", to, list)
	}
	return &roleError{text: fmt.Sprintf("switchover: no slave of this master is named %q (slave group, its last '-' field, or slaveId); slaves it knows: %s", to, list), sentinel: ErrUnknownSlave}
}

func (b *Bundle) switchover(ctx context.Context, to, follow string, handedOver func(SwitchoverReport)) (SwitchoverReport, error) {
	rep := SwitchoverReport{}
	s := b.runningShipper()
	if s == nil {
		return rep, wrongRole("switchover: this site is not a master shipping its log")
	}
	id, err := b.identity()
	if err != nil {
		return rep, err
	}
	match := slaveMatcher(to)
	// Name the slaves this master knows, with their state, before anything
	// changes when none that is connected matches.
	if err := checkSwitchoverTarget(to, s.Lag(), match); err != nil {
		return rep, err
	}
	end, err := b.failover.role.Begin(siterole.HandingOver)
	if err != nil {
		return rep, fmt.Errorf("switchover: %w", err)
	}
	defer func() {
		end()
		b.wakeRejoin() // a master left without a master to follow finds one
	}()
	start := time.Now()
	// Writes off the put route (a transaction's commit) are refused; plain
	// puts are held and passed on to the new master (broker/hold.go). The
	// hold comes first: a put that sees the refusal finds the hold too,
	// instead of being answered 503 in between.
	hold := b.holdPuts("this master is handing over to " + to)
	b.Broker.RefuseWrites(switchoverHolder, broker.Refusal{Reason: "this master is handing over to " + to + "; retry", Retry: true})
	// allow takes puts here again: the handover did not happen.
	allow := func() {
		b.Broker.AllowWrites(switchoverHolder)
		if hold != nil {
			hold.End() // what it held is stored here
		}
	}
	if err := b.preparedXARefusal(); err != nil {
		allow()
		return rep, err
	}
	durableEnd := func() (int64, error) {
		if err := b.Store.Flush(); err != nil {
			return 0, err
		}
		_, d := b.Store.LogBounds()
		rep.DurableEnd = d
		return d, nil
	}
	defer b.failover.notices.expect("")
	name, err := s.HandoverThen(ctx, match, durableEnd, func(name string, _ int64) {
		b.failover.notices.expect(name)
		if hold != nil {
			hold.Progress() // the slave caught up: held puts wait on
		}
		if handedOver != nil {
			handedOver(SwitchoverReport{To: name, Site: b.slaveSite(name), BrokerID: b.Config().System.BrokerID,
				DurableEnd: rep.DurableEnd, WritesStopped: time.Since(start), Generation: id.Generation() + 1})
		}
	})
	if err != nil {
		allow()
		return rep, fmt.Errorf("switchover: %w (this master takes puts again)", err)
	}
	rep.To, rep.Site, rep.BrokerID = name, b.slaveSite(name), b.Config().System.BrokerID
	rep.Generation = id.Generation() + 1
	// This master steps down only once the new generation exists: the new
	// master raised it in ZooKeeper (it then finishes its promotion, or a
	// newer generation takes over: promote_finish.go) or gossips itself
	// master of it. A new master that failed to take over follows this
	// one again, and this one takes puts again, at its own generation.
	// With ZooKeeper off no raise can fail: the new master takes over once
	// it has the message, and leaves this master's link as it does.
	gen, seenAt, err := rep.Generation, name+" left this master's link to take over", error(nil)
	if b.Registry != nil {
		gen, seenAt, err = b.awaitNewGeneration(ctx, rep.Generation, handoverConfirmWait)
	} else if err = waitDisconnected(ctx, s, name); err != nil {
		err = fmt.Errorf("it did not leave this master's link: %w", err)
	}
	if err != nil {
		// The new master may have raised the generation in ensembles this
		// site does not read (one per site, the link and gossip to it cut):
		// with [replication] sites this master acknowledges again only once
		// a majority of the listed sites' ensembles confirm its generation.
		if sc := b.failover.role.shipper(); sc != nil && sc.guard != nil {
			sc.guard.lapse()
		}
		allow()
		b.log.Error("FAILOVER: the new master did not take over; this master takes puts again", "to", name, "generation", id.Generation(), "err", err)
		return rep, fmt.Errorf("switchover: handed over to %s, but %w; this master takes puts again at generation %d", name, err, id.Generation())
	}
	rep.Generation = gen
	s.ObserveGeneration(gen, seenAt)
	if hold != nil {
		// The new master took over holding this log up to the end handed
		// over: puts stored below it on their way when writes stopped are
		// acknowledged (broker.Hold.HandedOver).
		hold.HandedOver(rep.DurableEnd)
		hold.Forward(b.heldPutsTarget(gen))
		// Producers that have not seen the new master in ZooKeeper yet
		// still reach this broker for a while after it follows.
		defer hold.EndAfter(b.Config().Replication.HandoverHold)
	}
	rep.WritesStopped = time.Since(start)
	b.log.Warn("FAILOVER: handed mastership over", "to", name, "generation", gen, "seenAt", seenAt, "durableEnd", rep.DurableEnd, "writesStopped", rep.WritesStopped)
	if b.Registry == nil && follow == "" {
		allow() // the fence's refusal stays
		b.log.Warn("FAILOVER: no ZooKeeper and no address to follow: this broker refuses puts until gossip names " + name + "'s replication address, or it is restarted as a slave")
		return rep, nil
	}
	// The old master takes the slave id the new master leaves.
	slaveID, err := strconv.Atoi(name[strings.LastIndexByte(name, '/')+1:])
	if err != nil {
		allow()
		return rep, fmt.Errorf("switchover: handed over to %s but cannot follow it: %w", name, err)
	}
	// Keep shipping until the new master has the promote message: it
	// disconnects when it takes over. Stopping the shipper before could
	// drop the message on its way.
	if err := waitDisconnected(ctx, s, name); err != nil {
		allow()
		return rep, fmt.Errorf("switchover: handed over to %s: %w", name, err)
	}
	// With gossip off and one ensemble per site, this site's ensemble may
	// never name the new master: follow it where its notice said.
	linkOnly := false
	if n := b.failover.notices.notice(); n.gen >= rep.Generation && n.addr != "" && b.Registry != nil {
		if g, err := b.Registry.Generation(ctx, b.Config().System.BrokerID); err == nil && g < n.gen {
			linkOnly = true
			if follow == "" {
				follow = n.addr
			}
		}
	}
	if b.Registry != nil && !linkOnly {
		// The new master replaces this master's topic entries in one step
		// each; removing them first would list the topics without
		// partitions until it writes its own.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := b.Registry.AwaitTopicsTaken(wctx); err != nil {
			b.log.Warn("FAILOVER: the new master has not replaced this master's topic entries; removing them anyway", "to", name, "err", err)
		}
		// The same in the other sites' ensembles, where this master's
		// mirror stays as it is until then (siteViews.paused).
		if tc := compOf[*topologyComponent](b); tc != nil {
			if views := tc.siteViews(); views != nil {
				if err := views.awaitTopicsTaken(wctx); err != nil {
					b.log.Warn("FAILOVER: the new master has not replaced this master's topic entries in another site's ZooKeeper; removing them anyway", "to", name, "err", err)
				}
			}
		}
		cancel()
	}
	if err := b.demote(ctx, Demotion{SlaveID: slaveID, MasterAddress: follow, NewMaster: name, Generation: rep.Generation}); err != nil {
		allow()
		return rep, fmt.Errorf("switchover: handed over to %s: %w", name, err)
	}
	b.Broker.AllowWrites(switchoverHolder)
	rep.Following = true
	return rep, nil
}

// holdOptions are the bounds of a hold of puts ([replication]
// handoverHoldMs, handoverHoldBytes, handoverHoldMaxMs); false with
// handoverHoldMs=0 (puts are refused, 503, not held). MaxHold extends
// nothing in the ack guard's Local hold: it never forwards, and nothing
// calls its Progress.
func (b *Bundle) holdOptions(reason string) (broker.HoldOptions, bool) {
	r := b.Config().Replication
	if r.HandoverHold <= 0 {
		return broker.HoldOptions{}, false
	}
	return broker.HoldOptions{MaxWait: r.HandoverHold, MaxBytes: r.HandoverHoldBytes, MaxHold: r.HandoverHoldMax, Reason: reason}, true
}

// holdPuts makes the broker hold plain puts while this master hands over
// (holdOptions); nil when handoverHoldMs=0 (they are refused, 503) or a
// hold is in effect. A hold of puts awaiting this master's confirmation
// (ackguard.go) is taken over: its puts are passed on to the new master,
// and the answers it kept are given once the handover's outcome is known
// (broker.HoldWrites), instead of being refused while writes are stopped.
// Without a hold of its own it ends: its puts are stored here or refused.
func (b *Bundle) holdPuts(reason string) *broker.Hold {
	o, ok := b.holdOptions(reason)
	if !ok {
		b.endConfirmHold()
		return nil
	}
	if dial, err := b.gatewayLinkDial(); err == nil {
		o.Dial = dial // slave sites' outbox entries keep their ids at the new master
	} else {
		b.log.Warn("FAILOVER: outbox entries of slave sites reaching this master while it hands over are refused, not passed on", "err", err)
	}
	h, err := b.Broker.HoldWrites(o)
	if err != nil {
		b.endConfirmHold()
		b.log.Warn("FAILOVER: puts are refused while this master hands over, not held", "err", err)
		return nil
	}
	return h
}

// heldPutsZKWait bounds each read of the master node in ZooKeeper when
// gossip does not name the new master yet: a ZooKeeper this site does not
// reach must not keep a held put from its new master for its whole bound.
const heldPutsZKWait = 500 * time.Millisecond

// heldPutsTarget is where the puts held during a switchover go: the MetaQ
// address of the master of generation gen or newer as gossip names it (no
// ZooKeeper needed: the old master may have lost its ensemble, or run
// without one), else as the new master's notice over the replication link
// named it (opTakenOver: known before the new master registers in
// ZooKeeper, which on a loaded machine took longer than the hold), else as
// this brokerId's master node in ZooKeeper names it (newMasterAddr).
// Gossip comes first: it would name a master newer than the notice's.
//
// The replication link to the new master is not used: the new master
// leaves it when it takes over (it disconnects from this master's shipper),
// and the link this site then opens to it as a slave carries the log from
// master to slave only. Gossip names the new master's MetaQ address (the
// one its producers use), which this broker reaches as the new master's
// gateway links and producers do.
func (b *Bundle) heldPutsTarget(gen uint64) func(context.Context) (string, error) {
	// The notice is cleared when the switchover returns, and the hold
	// outlives it (EndAfter): the address it named is kept.
	var noticed atomic.Pointer[string]
	return func(ctx context.Context) (string, error) {
		if addr, ok := b.gossipMasterAddr(gen); ok {
			return addr, nil
		}
		if n := b.failover.notices.notice(); n.gen >= gen && n.metaq != "" {
			noticed.Store(&n.metaq)
		}
		if addr := noticed.Load(); addr != nil {
			return *addr, nil
		}
		if b.Registry == nil {
			return "", fmt.Errorf("no ZooKeeper, and gossip names no master of generation %d yet", gen)
		}
		zctx, cancel := context.WithTimeout(ctx, heldPutsZKWait)
		defer cancel()
		addr, err := b.newMasterAddr(zctx)
		if err != nil {
			return "", fmt.Errorf("gossip names no master of generation %d yet, and ZooKeeper: %w", gen, err)
		}
		return addr, nil
	}
}

// gossipMasterAddr is the MetaQ address (host:port) of the master of this
// brokerId of generation gen or newer that gossip knows, when it is not
// this broker.
func (b *Bundle) gossipMasterAddr(gen uint64) (string, bool) {
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return "", false
	}
	m, ok := tc.Topology().Master(b.Config().System.BrokerID)
	if !ok || m.Meta.Generation < gen || m.Meta.ServeURL == "" || m.Meta.ServeURL == b.Broker.URL() {
		return "", false
	}
	return metaqHostPort(m.Meta.ServeURL), true
}

// metaqHostPort is the host:port of a meta://host:port[?...] url.
func metaqHostPort(url string) string {
	addr := strings.TrimPrefix(url, "meta://")
	if i := strings.IndexByte(addr, '?'); i >= 0 {
		addr = addr[:i]
	}
	return addr
}

// newMasterAddr is the MetaQ address (host:port) of the master this
// brokerId's node in ZooKeeper names, once it is not this broker: where
// the puts held during a switchover go.
func (b *Bundle) newMasterAddr(ctx context.Context) (string, error) {
	if b.Registry == nil {
		return "", errors.New("no ZooKeeper: the new master's MetaQ address is not known")
	}
	data, _, err := b.Registry.Get(ctx, b.Registry.Paths().Broker(b.Config().System.BrokerID, -1))
	if err != nil {
		return "", fmt.Errorf("read the master node: %w", err)
	}
	url := strings.TrimSpace(string(data))
	if url == "" || url == b.Broker.URL() {
		return "", errors.New("the new master has not registered yet")
	}
	return metaqHostPort(url), nil
}

// Demotion says whom a former master follows.
type Demotion struct {
	SlaveID int // this site's slaveId from now on
	// MasterAddress is the new master's replication address; "" finds it
	// in ZooKeeper (ids/<brokerId>/replication).
	MasterAddress string
	NewMaster     string // named in the refusal puts get here
	Group         string // slave group; default meta-slave-group-<site>
	// Generation is the new master's, when known (recorded with the role).
	Generation uint64
}

// Demote makes this master a slave of its brokerId's new master at run
// time: puts are refused (403, naming the new master), the shipper stops,
// the registration in ZooKeeper becomes the slave's, and a receiver
// follows the new master. Records held beyond the new master's promotion
// ends are cut and saved aside by the receiver (failback) before it
// follows.
func (b *Bundle) Demote(ctx context.Context, d Demotion) error {
	if b.closing.Load() {
		return errors.New("demote: the bundle is stopping")
	}
	end, err := b.failover.role.Begin(siterole.Demoting)
	if err != nil {
		return fmt.Errorf("demote: %w", err)
	}
	defer end()
	return b.demote(ctx, d)
}

// demote is Demote within a transition already begun (Demoting, or a
// switchover's HandingOver).
func (b *Bundle) demote(ctx context.Context, d Demotion) error {
	if d.MasterAddress == "" && b.Registry == nil {
		return errors.New("demote: ZooKeeper is off: the new master's replication address is required")
	}
	if d.Group == "" {
		d.Group = "meta-slave-group-" + b.Config().Site.Name
	}
	if d.NewMaster == "" {
		d.NewMaster = d.MasterAddress
	}
	f := &b.failover
	// A promotion that failed after it started shipping (it could not
	// take the master node or register as master in ZooKeeper) leaves the
	// role a slave's but its shipper running and no receiver: that site is
	// demoted like a master, or it would follow no one once a newer
	// generation takes over. So is a site whose demotion failed half way
	// (it stopped the shipper, then could not register as a slave or start
	// its receiver): it runs neither, whatever its role says, and the retry
	// does the steps left (registration as slave, receiver).
	halfDemoted := f.role.configuredStopped() && f.role.shipper() == nil && f.role.receiver() == nil
	if (f.role.Current().Role == siterole.Slave && b.promotedShipper() == nil && !halfDemoted) || b.closing.Load() {
		return errors.New("demote: this site is already a slave, or stopping")
	}
	if f.role.shipper() == nil && f.role.receiver() != nil {
		return errors.New("demote: this site is already a slave")
	}
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: fmt.Sprintf(
		"this broker is no longer master of broker %d; it follows the new master %s: send puts there",
		b.Config().System.BrokerID, d.NewMaster)})
	if _, err := f.role.stopShipper(); err != nil {
		b.log.Warn("FAILOVER: stopping the shipper", "err", err)
	}
	// The shipper's fence no longer applies: the replica refusal stands.
	b.Broker.AllowWrites(failoverHolder)
	b.Broker.SetPromotionEnds(nil)
	if err := b.Store.Flush(); err != nil {
		return fmt.Errorf("demote: flush: %w", err)
	}
	// From here on a restart with the master's configuration comes back
	// as this slave (applyPersistedRole).
	id, err := b.identity()
	if err != nil {
		return fmt.Errorf("demote: %w", err)
	}
	if err := id.SetRole(&georeplicator.Role{Name: georeplicator.RoleSlave, Generation: max(d.Generation, id.Generation()),
		SlaveID: d.SlaveID, SlaveGroup: d.Group, MasterAddress: d.MasterAddress}); err != nil {
		return fmt.Errorf("demote: record the role: %w", err)
	}
	if b.Registry != nil {
		if err := b.registerAsSlave(ctx, d.SlaveID); err != nil {
			return fmt.Errorf("demote: register as slave %d in ZooKeeper: %w", d.SlaveID, err)
		}
	}
	// The slave configuration is in effect before the receiver starts; the
	// components that read it at run time (status, dashboard) see a slave
	// from here on.
	if err := f.role.startReceiver(ctx, b, b.withSiteLink(config.Slave{
		File:          "(demoted at run time)",
		SlaveID:       d.SlaveID,
		SlaveGroup:    d.Group,
		SlaveMaxDelay: 500 * time.Millisecond,
		MasterAddress: d.MasterAddress,
	})); err != nil {
		return fmt.Errorf("demote: follow the new master: %w", err)
	}
	f.role.Set(siterole.State{Role: siterole.Slave, Generation: max(d.Generation, id.Generation()), SlaveID: d.SlaveID,
		SlaveGroup: d.Group, Master: d.NewMaster, Why: "demoted: follows the master of generation " + strconv.FormatUint(d.Generation, 10)})
	b.refreshGossip()
	b.log.Warn("FAILOVER: this site is now a slave", "master", d.NewMaster, "slaveId", d.SlaveID, "group", d.Group)
	return nil
}

// slaveRegisterRetry is how long a demotion waits between attempts to
// register as a slave while ZooKeeper is out of reach (unless the session
// comes back first).
const slaveRegisterRetry = 250 * time.Millisecond

// slaveRegisterPatience bounds those attempts: the rejoin loop calls a
// demotion with a context that never ends, and its next attempt starts
// afresh (reading the target again) rather than one waiting for ever. A
// var so that a test can shorten it.
var slaveRegisterPatience = 30 * time.Second

// registerAsSlave turns this site's registration into slave slaveID's. A
// master that hands over while its ZooKeeper is out of reach (connection
// cut, session running out) tries again in place until ZooKeeper answers,
// ctx ends or slaveRegisterPatience has passed, instead of failing the
// demotion on the first failed connect. Every answer that is a refusal
// (the node held by another live session, a fence) is returned at once:
// the caller, or the rejoin loop, decides.
func (b *Bundle) registerAsSlave(ctx context.Context, slaveID int) error {
	start := time.Now()
	giveUp := time.NewTimer(slaveRegisterPatience)
	defer giveUp.Stop()
	for attempt := 1; ; attempt++ {
		regained := b.Registry.SessionRegained()
		err := b.Registry.BecomeSlave(ctx, slaveID)
		if err == nil || !registry.ConnectionLost(err) || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return err
		}
		if attempt == 1 || attempt%20 == 0 {
			b.log.Warn("FAILOVER: ZooKeeper is out of reach while registering as slave; trying again", "slaveId", slaveID, "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %d attempts; %w)", err, attempt, ctx.Err())
		case <-giveUp.C:
			return fmt.Errorf("gave up waiting for ZooKeeper to register as slave %d: out of reach for %v, %d attempts: %w",
				slaveID, time.Since(start).Round(time.Millisecond), attempt, err)
		case <-regained:
		case <-time.After(slaveRegisterRetry):
		}
	}
}

// receiver is the running async-slave receiver: the one a demotion
// started, else the configured one; nil on a master (roleOwner.receiver).
func (b *Bundle) receiver() *receiverComponent { return b.failover.role.receiver() }

// demotedReceiver is the receiver a demotion started, nil without one.
func (b *Bundle) demotedReceiver() *receiverComponent {
	_, rc, _ := b.failover.role.runtime()
	return rc
}

// serveSwitchover is POST /switchover?to=<slave> on the admin endpoint.
func (a *Admin) serveSwitchover(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if to == "" {
		http.Error(w, "to is required", http.StatusBadRequest)
		return
	}
	bound, err := followWait(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), switchoverCallTimeout)
	defer cancel()
	rep, err := a.b.Switchover(ctx, to, r.URL.Query().Get("follow"))
	if err != nil {
		http.Error(w, err.Error(), roleChangeStatus(err))
		return
	}
	rep.Followers, rep.FollowersNote = a.b.awaitFollowers(r.Context(), rep.Generation, bound)
	writeJSON(w, http.StatusOK, rep)
}

// mastership is what gossip says this bundle is: static is the role it
// started with; a promotion or a demotion at run time overrides it.
func (b *Bundle) mastership(static topology.Mastership) topology.Mastership {
	m := static
	pos := b.appliedPos()
	id := b.failover.openedIdentity()
	promoted, demoted, demotedID := b.failover.role.runtime()
	if id != nil { // opened by replication; a bundle without it has none
		m.Generation = id.Generation()
	}
	switch {
	case promoted != nil:
		m.Role, m.SlaveID, m.ReplAddr = topology.RoleMaster, -1, promoted.Addr()
	case demoted != nil:
		m.Role, m.SlaveID, m.ReplAddr = topology.RoleSlave, demotedID, ""
	}
	if m.Role == topology.RoleSlave {
		m.LogPos = max(pos, 0)
		if id != nil {
			// The generation a slave follows: a master that stepped down
			// for a newer one records it in its role before any master of
			// it is reached (siterole.LeftUnfinished reads it in gossip).
			m.Generation = max(m.Generation, followedGeneration(id))
		}
		m.Generation = max(m.Generation, b.supersededBy)
	}
	return m
}

// followedGeneration is the generation id's recorded slave role follows
// (0 without one). It is newer than id.Generation() when this site stepped
// down for a generation and has not reached a master of it yet: one given
// back by the promotion that raised it leaves no other trace.
func followedGeneration(id *georeplicator.IdentityStore) uint64 {
	if r := id.Role(); r != nil && r.Name == georeplicator.RoleSlave {
		return r.Generation
	}
	return 0
}

// appliedPos is the log position a slave applied, -1 on a master or
// while no stream receiver runs, except during a promotion that stopped
// its receiver: then the position it had applied (failoverState.stopped).
func (b *Bundle) appliedPos() int64 {
	if b.promotedShipper() != nil {
		return -1
	}
	if rc := b.receiver(); rc != nil {
		if r := rc.Receiver(); r != nil {
			return r.Status().AppliedPos
		}
	}
	if st := b.failover.stoppedAt(); st.held {
		return st.pos
	}
	return -1
}

// stoppedPos is failoverState.stopped.
type stoppedPos struct {
	pos  int64
	held bool
}

func (f *failoverState) setStopped(p stoppedPos) {
	f.mu.Lock()
	f.stopped = p
	f.mu.Unlock()
}

func (f *failoverState) stoppedAt() stoppedPos {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}

// runAutoFailover promotes this slave site when the master has been lost
// (masterLost) for after without a break and this site is the candidate.
// It asks the role at every tick: while this site is master it waits (a
// master demoted later takes part as any slave). It returns when ctx ends.
func (b *Bundle) runAutoFailover(ctx context.Context, t *topology.Topology, after, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	var since time.Time
	waiting := waitLog{log: b.log, every: time.Minute} // why the last tick did not promote
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if !b.failover.role.isSlave() || b.failover.role.Busy() != siterole.None {
			since = time.Time{}
			waiting.reset()
			continue
		}
		lost, why := b.masterLost(ctx, t)
		if !lost {
			if !since.IsZero() {
				b.log.Info("FAILOVER: the master is reachable again; no automatic failover", "why", why)
			}
			since = time.Time{}
			waiting.reset()
			continue
		}
		if since.IsZero() {
			since = time.Now()
			b.log.Warn("FAILOVER: the master looks lost; promoting automatically if it stays so", "after", after, "why", why)
			continue
		}
		if time.Since(since) < after {
			continue
		}
		if cand, me := b.failoverCandidate(t); !me {
			waiting.note(time.Now(), slog.LevelInfo, "FAILOVER: another slave site is the candidate for automatic failover", "candidate "+cand)
			continue
		}
		// A sibling that still follows the master (its position is not
		// final) or holds more of its log: Promote would refuse; wait for
		// gossip to settle instead of trying every tick.
		if why := b.siblingAhead(b.appliedPos()); why != "" {
			waiting.note(time.Now(), slog.LevelInfo, "FAILOVER: not promoting automatically yet", why)
			continue
		}
		// A sibling gossip declared down that had applied more: promoting
		// this site would drop what it holds (acknowledged synchronous
		// puts among them); wait for it to come back, or an operator.
		if why := b.downSiblingAhead(t); why != "" {
			waiting.note(time.Now(), slog.LevelWarn, "FAILOVER: not promoting automatically", why)
			continue
		}
		waiting.reset()
		rep, err := b.PromoteWith(ctx, PromoteOptions{Auto: true})
		if err != nil {
			b.log.Error("FAILOVER: automatic promotion failed", "err", err)
			since = time.Time{}
			continue
		}
		b.log.Warn("FAILOVER: promoted automatically", "generation", rep.Generation, "behindBytes", rep.BehindBytes, "lostFor", time.Since(since))
		since = time.Time{}
	}
}

// masterLost reports whether a majority of the sites of this brokerId and
// this site's ZooKeeper agree that the master is unreachable, and why (or
// why not): siterole.MasterLost on what this site observes. A master node
// still held by a dead master's session (siterole.FenceDeadMaster, the rule
// promote without -force follows) counts as ZooKeeper agreeing: the
// promotion takes it at the raised generation.
func (b *Bundle) masterLost(ctx context.Context, t *topology.Topology) (bool, string) {
	rc := b.receiver()
	if rc == nil || rc.Connected() {
		return false, "this site reaches its master"
	}
	// A demoted former master that waits for its new master's replication
	// address runs no stream receiver; it counts as one that never heard
	// from a master since it began waiting (linkStatus).
	st, ok := rc.linkStatus()
	if !ok {
		return false, "this site runs no stream receiver: it does not know how far it got in the master's log"
	}
	brokerID := b.Config().System.BrokerID
	f := siterole.LossFacts{Site: b.Config().Site.Name, FenceSites: b.Config().Replication.FenceSites, ListedSites: len(b.Config().Replication.Sites),
		Peers: gossipPeers(t, brokerID), DeadMaster: b.deadMasterFacts(rc, st)}
	if id, err := b.identity(); err == nil {
		f.KnownGeneration = id.Generation()
	}
	if b.Registry != nil {
		zctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		f.ZooKeeper.Enabled = true
		f.ZooKeeper.Path = b.Registry.Paths().Broker(brokerID, -1)
		ok, st, err := b.Registry.Exists(zctx, f.ZooKeeper.Path)
		if err != nil {
			f.ZooKeeper.Err = err.Error()
		}
		f.ZooKeeper.MasterRegistered = ok && st.EphemeralOwner != b.Registry.SessionID()
	}
	return siterole.MasterLost(f)
}

// slaveSite is the site of this brokerId's slave named name (group/slaveId)
// as gossip knows it, "" when it does not.
func (b *Bundle) slaveSite(name string) string {
	slaveID, err := strconv.Atoi(name[strings.LastIndexByte(name, '/')+1:])
	tc := compOf[*topologyComponent](b)
	if err != nil || tc == nil || tc.Topology() == nil {
		return ""
	}
	for _, p := range gossipPeers(tc.Topology(), b.Config().System.BrokerID) {
		if !p.Self && p.Role == siterole.Slave && p.SlaveID == slaveID {
			return p.Site
		}
	}
	return ""
}

// gossipPeers is what gossip says about the bundles of brokerID, this
// one's included (Self).
func gossipPeers(t *topology.Topology, brokerID int) []siterole.Peer {
	var out []siterole.Peer
	now := time.Now()
	for _, m := range t.Members() {
		if m.Meta.BrokerID != brokerID {
			continue
		}
		p := siterole.Peer{Site: m.Meta.Site, Self: m.Name == t.Name(), Role: siterole.Master, SlaveID: m.Meta.SlaveID, Alive: m.State == topology.StateAlive,
			Suspect: m.State == topology.StateSuspect, Generation: m.Meta.Generation, Follows: m.Meta.Health.ReplicationOK, LogPos: m.Meta.LogPos}
		if m.Meta.Role == topology.RoleSlave {
			p.Role = siterole.Slave
		}
		if m.State != topology.StateAlive && !m.Since.IsZero() {
			p.DownFor = now.Sub(m.Since)
		}
		out = append(out, p)
	}
	return out
}

// failoverCandidate is the slave site automatic failover promotes
// (siterole.Candidate); me is true when it is this site.
func (b *Bundle) failoverCandidate(t *topology.Topology) (string, bool) {
	mySite := b.Config().Site.Name
	best := siterole.Candidate(mySite, b.appliedPos(), gossipPeers(t, b.Config().System.BrokerID))
	return best, best == mySite
}

// downSiblingAhead is siterole.DownSiblingAhead for this site: "" unless a
// slave site gossip declared down was last seen ahead of it.
func (b *Bundle) downSiblingAhead(t *topology.Topology) string {
	var gen uint64
	if id, err := b.identity(); err == nil {
		gen = id.Generation()
	}
	return siterole.DownSiblingAhead(b.Config().Site.Name, b.appliedPos(), gen, gossipPeers(t, b.Config().System.BrokerID))
}

// refreshGossip gossips a changed mastership now rather than at the next
// refresh.
func (b *Bundle) refreshGossip() {
	if tc := compOf[*topologyComponent](b); tc != nil {
		if t := tc.Topology(); t != nil {
			t.Refresh()
		}
	}
}

// runningShipper is the shipper of a master: the one a promotion started,
// else the configured one; nil on a slave or after a demotion
// (roleOwner.shipper).
func (b *Bundle) runningShipper() *georeplicator.Shipper {
	sc := b.failover.role.shipper()
	if sc == nil {
		return nil
	}
	return sc.Shipper()
}

// watchGossipGenerations tells the running shipper about a master of a
// newer generation that gossip brings (another site was promoted, also
// with ZooKeeper off or unreachable): this master then steps down and
// refuses puts. It returns when ctx ends.
func (b *Bundle) watchGossipGenerations(ctx context.Context, t *topology.Topology, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		m, ok := t.Master(b.Config().System.BrokerID)
		if !ok || m.Meta.Generation == 0 {
			continue
		}
		if s := b.runningShipper(); s != nil {
			s.ObserveGeneration(m.Meta.Generation, "gossip from "+m.Meta.Site)
		}
	}
}

// gossipResolver finds the master to follow with ZooKeeper off: the master
// of the highest generation gossip knows when a promotion made one (and it
// is not older than what this site already followed), else static (the
// masterAddress of async_slave.properties).
func (b *Bundle) gossipResolver(static string) georeplicator.Resolver {
	brokerID := b.Config().System.BrokerID
	return georeplicator.ResolverFunc(func(ctx context.Context) (string, error) {
		tc := compOf[*topologyComponent](b)
		if tc == nil || tc.Topology() == nil {
			return static, nil
		}
		m, ok := tc.Topology().Master(brokerID)
		if !ok || m.Meta.Generation == 0 || m.Meta.ReplAddr == "" {
			return static, nil
		}
		if id, err := b.identity(); err == nil && m.Meta.Generation < id.Generation() {
			return static, nil
		}
		return m.Meta.ReplAddr, nil
	})
}

// newestMasterResolver finds the master to follow for a slave whose
// properties name a masterAddress (static): the master of the newest
// generation this site can learn, from gossip (gossipResolver) or from
// ZooKeeper (the generation node and the replication address its master
// publishes, ids/<id>/replication), whichever knows the newer one; static
// only while neither knows a promotion. A slave site restarted by its
// unit after a promotion (a former promoted master among them) follows
// the new master, not the address its file was written with. Reads that
// fail count as nothing learnt.
func (b *Bundle) newestMasterResolver(static string) georeplicator.Resolver {
	gossip := b.gossipResolver(static)
	if b.Registry == nil {
		return gossip
	}
	brokerID := b.Config().System.BrokerID
	zkAddr := zkMasterResolver(b.Registry, brokerID)
	return georeplicator.ResolverFunc(func(ctx context.Context) (string, error) {
		var gossipGen uint64
		if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
			if m, ok := tc.Topology().Master(brokerID); ok && m.Meta.ReplAddr != "" {
				gossipGen = m.Meta.Generation
			}
		}
		zctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		zkGen, err := b.Registry.Generation(zctx, brokerID)
		if err == nil && zkGen > 0 && zkGen > gossipGen {
			if id, err := b.identity(); err == nil && zkGen < id.Generation() {
				return gossip.MasterAddr(ctx)
			}
			if addr, err := zkAddr.MasterAddr(zctx); err == nil {
				return addr, nil
			}
		}
		return gossip.MasterAddr(ctx)
	})
}

// waitDisconnected waits until the slave named group/slaveId is no longer
// connected to s.
func waitDisconnected(ctx context.Context, s *georeplicator.Shipper, name string) error {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		connected := false
		for _, g := range s.Lag() {
			if g.Connected && fmt.Sprintf("%s/%d", g.Group, g.SlaveID) == name {
				connected = true
			}
		}
		if !connected {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not take over: %w", name, ctx.Err())
		case <-tk.C:
		}
	}
}
