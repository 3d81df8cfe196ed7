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
	"metaq/internal/siterole"
)

// With one ZooKeeper ensemble per site (deploy/'s layout), a compare-and-set
// on the generation in one ensemble does not keep two sites from taking the
// same number: each raises it in its own. A promotion that is not forced
// therefore raises the generation from the one its site followed in every
// ensemble of the deployment it reaches (its own and, through siteViews'
// sessions, the other sites'), and owns the new generation only when it won
// in a majority of all the deployment's ensembles (siterole.RaiseWon): each
// ensemble's compare-and-set has one winner, so two sites cannot both own
// it. A promotion that lost sets back what it wrote where it won
// (registry.UndoRaise, only where nothing moved since) and follows; the
// winner writes its generation and raiser into the reachable ensembles it
// lost (registry.RaiseGenerationToBy), and its mirror carries the number
// into the others later. With a single shared ensemble nothing changes.

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
	key := func(connect, root string) string { return connect + "\x00" + root }
	known := map[string]bool{key(b.Registry.Connect(), b.Registry.Paths().Root): true}
	for _, e := range v.t.Ensembles() {
		known[key(e.Connect, e.Root)] = true
	}
	if v.ensFile != "" {
		list, _ := readEnsembles(v.ensFile)
		for _, e := range list {
			known[key(e.Connect, e.Root)] = true
		}
	}
	out := []raiseEnsemble{own}
	seen := map[string]bool{key(b.Registry.Connect(), b.Registry.Paths().Root): true}
	v.mu.Lock()
	for site, r := range v.remote {
		k := key(r.ens.Connect, r.ens.Root)
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

// quorumRaise raises the brokerId's generation from known to known+1 in
// every ensemble in ens (total known to the deployment) with one token and
// keeps it only when it won in a majority; see the comment at the top.
func (b *Bundle) quorumRaise(ctx context.Context, total int, ens []raiseEnsemble, known uint64) (uint64, error) {
	id := b.Config().System.BrokerID
	token, err := registry.NewRaiseToken()
	if err != nil {
		return 0, err
	}
	gen := known + 1
	by := registry.Raiser{Generation: gen, Site: b.Config().Site.Name, Token: token}
	res := make([]raiseResult, len(ens))
	var wg sync.WaitGroup
	for i, e := range ens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := raiseResult{raiseEnsemble: e}
			if g, by, err := e.reg.GenerationRaiser(ctx, id); err == nil && g == known {
				r.prev = by
			} else if err == nil {
				r.prev = registry.Raiser{Generation: g}
			}
			_, r.err = e.reg.RaiseGenerationFromAs(ctx, id, known, by)
			r.won = r.err == nil
			if !r.won {
				r.held, r.heldBy, _ = e.reg.GenerationRaiser(ctx, id)
			}
			res[i] = r
		}()
	}
	wg.Wait()
	tally := siterole.RaiseTally{Ensembles: total, Reached: len(ens)}
	for _, r := range res {
		if r.won {
			tally.Won++
		}
	}
	ok, _, why := siterole.RaiseWon(tally)
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
		return gen, nil
	}
	// Lost: give back every ensemble this raise may have written (a raise
	// whose outcome is unknown too; UndoRaise changes nothing where the
	// token is not there).
	var lost []string
	var winners []string
	for _, r := range res {
		if r.won || errors.As(r.err, new(*registry.RaiseUnknownError)) {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), raiseTimeout)
			undone, err := r.reg.UndoRaise(uctx, id, gen, token, r.prev)
			cancel()
			if err != nil || (r.won && !undone) {
				b.log.Warn("FAILOVER: lost the generation's majority; could not set back its raise in an ensemble where it won",
					"site", r.site, "generation", gen, "undone", undone, "err", err)
			}
			continue
		}
		w := "?"
		if r.heldBy.Site != "" && r.heldBy.Generation == r.held {
			w = r.heldBy.Site
			if !strings.Contains(strings.Join(winners, ","), w) {
				winners = append(winners, w)
			}
		}
		lost = append(lost, fmt.Sprintf("%s's ensemble (generation %d raised by %s: %v)", r.site, r.held, w, r.err))
	}
	msg := fmt.Sprintf("%s: lost in %s", why, strings.Join(lost, "; "))
	if len(winners) > 0 {
		msg = fmt.Sprintf("site %s raised generation %d first; %s", strings.Join(winners, ", "), gen, msg)
	}
	return 0, fmt.Errorf("%w: %s", registry.ErrGenerationMoved, msg)
}

// forcedRaise raises the brokerId's generation for a forced promotion
// (promote -force, or a switchover's new master, which the old master
// handed over to explicitly): to one above every generation this site
// knows or sees (its identity, every ensemble it reaches, gossip), by a
// compare-and-set with one raiser in every ensemble it reaches, tried in
// one order (by site) so that of two forced raises of one number that
// reach a common ensemble only one goes on past it. It owns the number
// when it won in its own ensemble and lost in none it reached
// (siterole.ForcedRaiseVerdict); otherwise it gives back its wins
// (registry.UndoRaise) and raises again above what it saw, until ctx
// ends. Ensembles it does not reach get the number from its mirror.
func (b *Bundle) forcedRaise(ctx context.Context, ens []raiseEnsemble, known uint64) (uint64, error) {
	id := b.Config().System.BrokerID
	self := b.Config().Site.Name
	order := slices.Clone(ens)
	sort.SliceStable(order, func(i, j int) bool { return order[i].site < order[j].site })
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
		gen := siterole.NextForcedGeneration(known, seen...)
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
			if g, p, err := e.reg.GenerationRaiser(ctx, id); err == nil && g == gen-1 {
				r.prev = p
			} else if err == nil {
				r.prev = registry.Raiser{Generation: g}
			}
			_, r.err = e.reg.RaiseGenerationFromAs(ctx, id, gen-1, by)
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
		}
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
		}
		last := tried[len(tried)-1]
		lastTaken = fmt.Sprintf("%s's ensemble holds generation %d raised by %q", last.site, last.held, last.heldBy.Site)
		b.log.Info("FAILOVER: a forced raise found its generation taken; raising above it", "generation", gen, "attempt", attempt, "taken", lastTaken)
		// A short random pause: two forced raises that keep meeting drift apart.
		if err := sleepCtx(ctx, time.Duration(10+rand.IntN(90))*time.Millisecond); err != nil {
			return 0, fmt.Errorf("a forced raise of the generation lost to other raises %d times (last: %s): %w", attempt, lastTaken, err)
		}
	}
}
