package bundle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"metaq/broker/registry"
	"metaq/internal/clock"
	"metaq/internal/siterole"
)

// With one ZooKeeper ensemble per site (deploy/'s layout), a compare-and-set
// on the generation in one ensemble does not keep two sites from taking the
// same number: each raises it in its own. A promotion that is not forced
// therefore raises the generation from the one its site followed in every
// ensemble of the deployment it reaches (its own first and, once it won
// there, through siteViews' sessions, the other sites'), and owns the new
// generation only when it won in a majority of all the deployment's
// ensembles (siterole.RaiseWon): each ensemble's compare-and-set has one
// winner, so two sites cannot both own it. A promotion that lost sets back what it wrote where it won
// (registry.UndoRaise, only where nothing moved since) and follows; the
// winner writes its generation and raiser into the reachable ensembles it
// lost (registry.RaiseGenerationToBy), and its mirror carries the number
// into the others later. With a single shared ensemble nothing changes.

// [replication] sites lists every site of the deployment. A raise that
// cannot win in every listed site's ensemble (some are cut off from it)
// cannot tell that a site on the other side raises the same number in
// the ensembles it does not reach; it therefore takes its number from its
// own site's class (siterole.ClassGeneration, ClassAllows), which no other
// site's class shares. Without the list a raise takes the next number, as
// before, and two forced raises on either side of a partition can take
// the same one (the finisher's SharedGeneration then gives one up).

// raiseEnsemble is one ensemble a promotion raises the generation in.
type raiseEnsemble struct {
	site string // the site whose ensemble it is (this site for its own)
	reg  *registry.Registry
}

// raiseEnsembles returns the number of distinct ensembles of the
// deployment this bundle knows (its own, those gossip names and those its
// runs recorded) and those it holds a session to, its own first.
func (b *Bundle) raiseEnsembles() (int, []raiseEnsemble) {
	own := raiseEnsemble{site: b.Config().Site.Name, reg: b.Registry}
	tc := compOf[*topologyComponent](b)
	if tc == nil {
		return 1, []raiseEnsemble{own}
	}
	v := tc.siteViews()
	if v == nil {
		return 1, []raiseEnsemble{own}
	}
	known := map[string]bool{ensembleKey(b.Registry.Connect(), b.Registry.Paths().Root): true}
	for _, k := range b.siteEnsembleKeys() {
		known[k] = true
	}
	out := []raiseEnsemble{own}
	seen := map[string]bool{ensembleKey(b.Registry.Connect(), b.Registry.Paths().Root): true}
	v.mu.Lock()
	for site, r := range v.remote {
		k := ensembleKey(r.ens.Connect, r.ens.Root)
		if r.reg == nil || !r.reg.Connected() || seen[k] {
			continue
		}
		seen[k] = true
		known[k] = true
		out = append(out, raiseEnsemble{site: site, reg: r.reg})
	}
	v.mu.Unlock()
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].site < out[1+j].site })
	return len(known), out
}

// ensembleKey names one ensemble (its connect string and root).
func ensembleKey(connect, root string) string { return connect + "\x00" + root }

// siteEnsembleKeys is the ensemble of each other site this bundle knows
// of, by site: those gossip names and those its runs recorded (gossip
// wins for a site both name).
func (b *Bundle) siteEnsembleKeys() map[string]string {
	out := map[string]string{}
	tc := compOf[*topologyComponent](b)
	if tc == nil {
		return out
	}
	v := tc.siteViews()
	if v == nil {
		return out
	}
	if v.ensFile != "" {
		list, _ := readEnsembles(v.ensFile)
		for _, e := range list {
			out[e.Site] = ensembleKey(e.Connect, e.Root)
		}
	}
	for site, e := range v.t.Ensembles() {
		out[site] = ensembleKey(e.Connect, e.Root)
	}
	return out
}

// reachesListedSites reports whether ens (the ensembles a raise tries:
// this site's own and those it holds a session to) include every
// [replication] sites site's ensemble, and names the sites whose ensemble
// they do not include (or that no gossip or record names). True when no
// list is configured.
func (b *Bundle) reachesListedSites(ens []raiseEnsemble) (bool, []string) {
	sites := b.Config().Replication.Sites
	if len(sites) == 0 {
		return true, nil
	}
	have := map[string]bool{}
	for _, e := range ens {
		have[ensembleKey(e.reg.Connect(), e.reg.Paths().Root)] = true
	}
	keys := b.siteEnsembleKeys()
	self := b.Config().Site.Name
	var missing []string
	for _, site := range sites {
		if site == self {
			continue
		}
		if k, ok := keys[site]; !ok || !have[k] {
			missing = append(missing, site)
		}
	}
	return len(missing) == 0, missing
}

// raiseTarget is the generation a raise tries whose natural number is
// next: next itself when it reaches every listed site's ensemble (covered)
// and class is false, else the next number of this site's class (next
// when no [replication] sites list is configured).
func (b *Bundle) raiseTarget(next uint64, covered, class bool) uint64 {
	if covered && !class {
		return next
	}
	g, _ := siterole.ClassGeneration(next, b.Config().Site.Name, b.Config().Replication.Sites)
	return g
}

// classFacts is what siterole.ClassAllows knows of a raise to gen.
func (b *Bundle) classFacts(gen uint64, complete bool) siterole.ClassFacts {
	return siterole.ClassFacts{Site: b.Config().Site.Name, Sites: b.Config().Replication.Sites, Generation: gen, Complete: complete}
}

// raiseResult is one ensemble's answer to a promotion's raise.
type raiseResult struct {
	raiseEnsemble
	prev registry.Raiser // the raiser before the raise (for an undo)
	won  bool
	// held is the generation and raiser found where the raise lost.
	held   uint64
	heldBy registry.Raiser
	err    error
}

// quorumRaise raises the brokerId's generation from known in every
// ensemble in ens (total known to the deployment) with one token and keeps
// it only when it won in a majority; see the comment at the top. It tries
// known+1 when it reaches every [replication] sites site's ensemble, else
// the next number of its site's class; a raise that won a majority at
// known+1 but not every listed site's ensemble (a write failed) gives it
// back and tries its class's number once.
//
// above (at least known) is the generation the raise goes above (a reclaim
// of a number given back must not take it again): known+1 is then above+1.
func (b *Bundle) quorumRaise(ctx context.Context, total int, ens []raiseEnsemble, known, above uint64) (uint64, error) {
	covered, missing := b.reachesListedSites(ens)
	above = max(above, known)
	gen := b.raiseTarget(above+1, covered, false)
	if gen != above+1 {
		b.log.Info("FAILOVER: this raise cannot write every site's ZooKeeper ensemble; it takes the next generation of this site's class",
			"generation", gen, "from", known, "notReached", strings.Join(missing, ","))
	}
	gen, reclass, err := b.quorumAttempt(ctx, total, ens, known, gen, covered)
	if reclass {
		gen, _, err = b.quorumAttempt(ctx, total, ens, known, b.raiseTarget(above+1, covered, true), covered)
	}
	return gen, err
}

// quorumAttempt is one quorumRaise from known to gen. reclass: it won a
// majority but the class rule refused gen (and the raise was given back).
func (b *Bundle) quorumAttempt(ctx context.Context, total int, ens []raiseEnsemble, known, gen uint64, covered bool) (_ uint64, reclass bool, _ error) {
	id := b.Config().System.BrokerID
	token, err := registry.NewRaiseToken()
	if err != nil {
		return 0, false, err
	}
	by := registry.Raiser{Generation: gen, Site: b.Config().Site.Name, Token: token}
	raise := func(e raiseEnsemble) raiseResult {
		r := raiseResult{raiseEnsemble: e}
		r.prev, r.err = e.reg.RaiseGenerationFromToAs(ctx, id, known, gen, by)
		r.won = r.err == nil
		if !r.won {
			r.held, r.heldBy, _ = e.reg.GenerationRaiser(ctx, id)
		}
		return r
	}
	// This site's own ensemble first, the others (at once) only when the
	// raise won there: a raise that cannot write its own ensemble cannot
	// register its master, and a number it wrote in another site's
	// ensemble makes that site's master step down before the give-back
	// (soak seed 942159: gz's own ensemble could not be read, its raise won
	// in bj's, and bj, the master, stepped down for a number given back).
	ens = ownFirst(ens, b.Registry)
	res := []raiseResult{raise(ens[0])}
	if res[0].won {
		res = append(res, make([]raiseResult, len(ens)-1)...)
		var wg sync.WaitGroup
		for i, e := range ens[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[1+i] = raise(e)
			}()
		}
		wg.Wait()
	}
	tally := siterole.RaiseTally{Ensembles: total, Reached: len(ens)}
	for _, r := range res {
		if r.won {
			tally.Won++
		}
	}
	tally.Class = b.classFacts(gen, covered && tally.Won == len(res))
	ok, need, why := siterole.RaiseWon(tally)
	if ok {
		// The generation is this site's: write it, and this raise as its
		// raiser, where another raise of the same number lost.
		for _, r := range res {
			if r.won {
				continue
			}
			g, held, err := r.reg.RaiseGenerationToBy(ctx, id, gen, by, true)
			if err != nil || g != gen {
				b.log.Warn("FAILOVER: won the generation in a majority of the ZooKeeper ensembles; could not write it into one it lost (its mirror retries)",
					"site", r.site, "generation", gen, "held", g, "heldBy", held.Site, "err", err)
			}
		}
		b.log.Info("FAILOVER: raised the generation", "generation", gen, "result", why)
		return gen, false, nil
	}
	// Lost: give back every ensemble this raise may have written (a raise
	// whose outcome is unknown too; UndoRaise changes nothing where the
	// token is not there).
	for _, r := range res {
		if r.won || errors.As(r.err, new(*registry.RaiseUnknownError)) {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), raiseTimeout)
			undone, err := r.reg.UndoRaise(uctx, id, gen, token, r.prev)
			cancel()
			if err != nil || (r.won && !undone) {
				b.log.Warn("FAILOVER: lost the generation's majority; could not set back its raise in an ensemble where it won",
					"site", r.site, "generation", gen, "undone", undone, "err", err)
			}
		}
	}
	if tally.Won >= need {
		b.log.Warn("FAILOVER: gave back a raise of the generation that won a majority outside this site's class; raising at its class's number", "generation", gen, "why", why)
		return 0, true, fmt.Errorf("%w: %s", registry.ErrGenerationMoved, why)
	}
	return 0, false, fmt.Errorf("%w: %s", registry.ErrGenerationMoved, describeLostRaise(gen, why, res, len(ens)-len(res)))
}

// ownFirst is ens with reg's ensemble (this site's own) first.
func ownFirst(ens []raiseEnsemble, reg *registry.Registry) []raiseEnsemble {
	out := slices.Clone(ens)
	sort.SliceStable(out, func(i, j int) bool { return out[i].reg == reg && out[j].reg != reg })
	return out
}

// describeLostRaise tells why a quorum raise to gen lost (why is
// siterole.RaiseWon's): where it was not written and what each of those
// ensembles held, and which sites hold gen or a newer number where the
// compare-and-set lost. A site is named as having raised first only
// there: an ensemble that could not be read or written holds whatever it
// held before, which no raise of gen took (the soak once read "site bj
// raised generation 7 first" where bj's 5 was all gz's unreadable
// ensemble held). untried: ensembles not tried after this site's own lost.
func describeLostRaise(gen uint64, why string, res []raiseResult, untried int) string {
	var lost, winners []string
	for _, r := range res {
		if r.won || errors.As(r.err, new(*registry.RaiseUnknownError)) {
			continue
		}
		w := "?"
		if r.heldBy.Site != "" && r.heldBy.Generation == r.held {
			w = r.heldBy.Site
		}
		if !errors.Is(r.err, registry.ErrGenerationMoved) {
			lost = append(lost, fmt.Sprintf("%s's ensemble (not written: %v; it holds generation %d raised by %s)", r.site, r.err, r.held, w))
			continue
		}
		if w != "?" && r.held >= gen && !slices.Contains(winners, w) {
			winners = append(winners, w)
		}
		lost = append(lost, fmt.Sprintf("%s's ensemble (generation %d raised by %s: %v)", r.site, r.held, w, r.err))
	}
	msg := fmt.Sprintf("%s: lost in %s", why, strings.Join(lost, "; "))
	if untried > 0 {
		msg += fmt.Sprintf("; %d other ensembles not tried (a raise writes no other site's ensemble unless it won in its own)", untried)
	}
	if len(winners) > 0 {
		msg = fmt.Sprintf("site %s raised generation %d or a newer one first; %s", strings.Join(winners, ", "), gen, msg)
	}
	return msg
}

// forcedRaise raises the brokerId's generation for a forced promotion
// (promote -force, or a switchover's new master, which the old master
// handed over to explicitly): to one above every generation this site
// knows or sees (its identity, every ensemble it reaches, gossip), by a
// compare-and-set with one raiser in every ensemble it reaches: its own
// site's ensemble first (a raise that fails there writes no other, so no
// master steps down for it), then the others in one order (by site), so
// that of two forced raises of one number that reach a common ensemble
// only one goes on past it. It owns the number
// when it won in its own ensemble and lost in none it reached
// (siterole.ForcedRaiseVerdict); otherwise it gives back its wins
// (registry.UndoRaise) and raises again above what it saw, until ctx
// ends. Ensembles it does not reach get the number from its mirror. When
// it cannot reach every [replication] sites site's ensemble it takes the
// next number of its own site's class instead of the next one (see the
// comment at the top), so that a forced raise on the other side of a
// partition never takes the same.
func (b *Bundle) forcedRaise(ctx context.Context, ens []raiseEnsemble, known uint64) (uint64, error) {
	id := b.Config().System.BrokerID
	self := b.Config().Site.Name
	// This site's own ensemble first, then the others by site: a raise
	// that cannot write its own ensemble writes nowhere (a number left in
	// another site's ensemble makes its master step down for a promotion
	// that failed, and a give-back comes too late for that).
	order := slices.Clone(ens)
	sort.SliceStable(order, func(i, j int) bool {
		if oi, oj := order[i].reg == b.Registry, order[j].reg == b.Registry; oi != oj {
			return oi
		}
		return order[i].site < order[j].site
	})
	covered, missing := b.reachesListedSites(order)
	// class: a write failed where the raise needed every listed site's
	// ensemble: from then on it raises in its own class.
	class := false
	var lastTaken string
	for attempt := 1; ; attempt++ {
		var seen []uint64
		if g, _ := b.observedGeneration(ctx); g > 0 {
			seen = append(seen, g)
		}
		for _, e := range order {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			g, err := e.reg.Generation(rctx, id)
			cancel()
			switch {
			case err == nil:
				seen = append(seen, g)
			case e.reg == b.Registry:
				// Nothing can be registered without it: write nowhere
				// (a raise in another ensemble would make its master step
				// down for nothing).
				return 0, fmt.Errorf("this site's own ZooKeeper ensemble cannot be read: %w", err)
			}
		}
		next := siterole.NextForcedGeneration(known, seen...)
		gen := b.raiseTarget(next, covered, class)
		if gen != next {
			b.log.Info("FAILOVER: this forced raise cannot write every site's ZooKeeper ensemble; it takes the next generation of this site's class",
				"generation", gen, "next", next, "notReached", strings.Join(missing, ","), "class", class)
		}
		token, err := registry.NewRaiseToken()
		if err != nil {
			return 0, err
		}
		by := registry.Raiser{Generation: gen, Site: self, Token: token}
		var fr siterole.ForcedRaise
		var tried []raiseResult
		var ownErr error
		for _, e := range order {
			r := raiseResult{raiseEnsemble: e}
			r.prev, r.err = e.reg.RaiseGenerationFromToAs(ctx, id, gen-1, gen, by)
			out := siterole.RaisedHere
			switch {
			case r.err == nil:
				r.won = true
			case errors.Is(r.err, registry.ErrGenerationMoved):
				out = siterole.TakenHere
				r.held, r.heldBy, _ = e.reg.GenerationRaiser(ctx, id)
			case errors.As(r.err, new(*registry.RaiseUnknownError)):
				out = siterole.UnknownHere
			default:
				out = siterole.NotReached
			}
			if e.reg == b.Registry {
				fr.Own, ownErr = out, r.err
			} else {
				fr.Others = append(fr.Others, out)
			}
			tried = append(tried, r)
			if out == siterole.TakenHere {
				break // the number is taken: the ensembles after this one are not touched
			}
			if e.reg == b.Registry && out != siterole.RaisedHere {
				break // not raised in this site's own ensemble: nowhere else either
			}
		}
		won := 0
		for _, r := range tried {
			if r.won {
				won++
			}
		}
		fr.Class = b.classFacts(gen, covered && won == len(order))
		verdict, why := siterole.ForcedRaiseVerdict(fr)
		if verdict == siterole.ForcedOwns {
			var missed []string
			for _, r := range tried {
				if !r.won {
					missed = append(missed, fmt.Sprintf("%s's ensemble (%v)", r.site, r.err))
				}
			}
			if len(missed) > 0 {
				b.log.Warn("FAILOVER: a forced raise of the generation could not write some ZooKeeper ensembles; this master's mirror carries the generation there",
					"generation", gen, "notReached", strings.Join(missed, "; "))
				if len(b.Config().Replication.Sites) == 0 {
					b.log.Warn("FAILOVER: with no [replication] sites list, a forced promotion on the other side of a partition may take this same generation; list the deployment's sites there")
				}
			}
			b.log.Info("FAILOVER: raised the generation (forced)", "generation", gen, "attempts", attempt, "result", why)
			return gen, nil
		}
		// Give back what this raise may have written (its own ensemble's
		// unknown outcome is left for RaiseOutcome to tell).
		for _, r := range tried {
			unknown := errors.As(r.err, new(*registry.RaiseUnknownError))
			if !r.won && !unknown || (unknown && verdict == siterole.ForcedUnknown && r.reg == b.Registry) {
				continue
			}
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), raiseTimeout)
			undone, err := r.reg.UndoRaise(uctx, id, gen, token, r.prev)
			cancel()
			if err != nil || (r.won && !undone) {
				b.log.Warn("FAILOVER: could not set back a forced raise of the generation that did not own it",
					"site", r.site, "generation", gen, "undone", undone, "err", err)
			}
		}
		switch verdict {
		case siterole.ForcedFail:
			return 0, fmt.Errorf("%s: %w", why, ownErr)
		case siterole.ForcedUnknown:
			return 0, ownErr
		case siterole.ForcedReclass:
			b.log.Warn("FAILOVER: gave back a forced raise of the generation outside this site's class; raising at its class's number", "generation", gen, "why", why)
			class = true
			continue
		}
		last := tried[len(tried)-1]
		lastTaken = fmt.Sprintf("%s's ensemble holds generation %d raised by %q", last.site, last.held, last.heldBy.Site)
		b.log.Info("FAILOVER: a forced raise found its generation taken; raising above it", "generation", gen, "attempt", attempt, "taken", lastTaken)
		// A short random pause: two forced raises that keep meeting drift apart.
		if err := clock.Sleep(ctx, time.Duration(10+rand.IntN(90))*time.Millisecond); err != nil {
			return 0, fmt.Errorf("a forced raise of the generation lost to other raises %d times (last: %s): %w", attempt, lastTaken, err)
		}
	}
}
