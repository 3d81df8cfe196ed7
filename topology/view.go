package topology

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"metaq/broker/client"
)

// ViewTargets decides, for the site view of site, which url each broker id's
// master entry points at: that site's replica while it is alive, healthy,
// reported ok by its master and at most maxLag behind (0 = the LaggingAfter
// threshold), else the real master; while the master is down, the nearest
// alive replica. A replica whose link to the master broke while the master's
// last report still has it ok counts as healthy (masterWentSilent): the
// master may be dead before gossip says so. Broker ids gossip knows nothing alive for are left out (the
// view writer then keeps ZooKeeper's own master). URLs are meta://host:port.
func (t *Topology) ViewTargets(site string, maxLag time.Duration) map[int]string {
	if maxLag <= 0 {
		maxLag = t.opts.LaggingAfter
	}
	return viewTargets(t.Members(), site, maxLag)
}

func viewTargets(members []Member, site string, maxLag time.Duration) map[int]string {
	// Only broker ids whose master is a pool member: for a master outside
	// the pool (a Java broker) gossip cannot know its slaves' lag, and the
	// view keeps ZooKeeper's own master.
	ids := map[int]bool{}
	for _, m := range members {
		if m.Meta.Role == RoleMaster {
			ids[m.Meta.BrokerID] = true
		}
	}
	out := map[int]string{}
	for id := range ids {
		reps := replicasOf(members, id)
		for i, r := range reps {
			if masterWentSilent(r) {
				reps[i].Healthy = true
			}
		}
		// "Caught up" for an unmodified consumer means the master reports the
		// slave ok, not merely within a lag budget.
		var ok []Replica
		for _, r := range reps {
			if r.Master || r.Lag.State == LagOK {
				ok = append(ok, r)
			}
		}
		d, found := Choose(RouteInput{Site: site, Preference: client.LocalFirst, MaxLag: maxLag, Replicas: ok})
		if !found {
			// Only lagging or stuck copies are alive: take the best of them.
			d, found = Choose(RouteInput{Site: site, Preference: client.LocalFirst, MaxLag: maxLag, Replicas: reps})
		}
		if found {
			out[id] = "meta://" + d.Addr
		}
	}
	return out
}

// masterWentSilent reports whether slave r's own word and its master's
// disagree in the way a dead master leaves them: r (alive, storage fine)
// says its replication link is down while the master's last gossiped report
// still has r connected and ok. A master that is alive reports a slave whose
// link broke as down (LagDown) within a gossip round; a killed one's report
// stays frozen until gossip declares it suspect, seconds later. For a view
// such a replica still counts as healthy: moving the view's entry to the
// master then named a dead address to the producers on the view (MetaQ
// 1.4.6's producer waits 10 s on its ZooKeeper event thread for each dead
// address it reads), while the site's bundle keeps taking their puts and
// forwards them to whichever master is current. Consumers keep reading the
// replica until the master confirms the break.
func masterWentSilent(r Replica) bool {
	return !r.Master && r.Alive && r.LinkDown && r.LagKnown && r.Lag.State == LagOK
}

// IsViewKeeper reports whether this bundle should write site's view now
// (see viewKeeper). Every bundle computes the same answer from converged
// gossip, so one writes at a time.
func (t *Topology) IsViewKeeper(site string) bool {
	return viewKeeper(t.Members(), site) == t.opts.Name
}

// ViewKeeper returns the name of the member that keeps site's view, "" when
// no member that is up can.
func (t *Topology) ViewKeeper(site string) string { return viewKeeper(t.Members(), site) }

// viewKeeper picks the one writer of site's view among the members not
// declared down (alive or suspect). Members that gossip which ensembles
// they hold a session to (Meta.Views) are candidates for exactly those
// sites: the site's own members first, then every other member, each group
// by name, so the view is kept by its own site while any of its bundles is
// up and reaches its ensemble, and by the first other site that reaches it
// once they are down. When no member gossips Views (bundles without
// ZooKeeper, older versions) the rule is the site's first member, else the
// pool's first.
//
// A suspect member still counts: suspicion is one bundle's failed probes,
// which the member usually refutes, and the member itself sees itself
// alive. Left out, a loaded machine had bj take hf's view while hf's
// bundle, alive, kept it too: both wrote it in turn, and hf's producers
// bypassed hf's gateway for a second.
func viewKeeper(members []Member, site string) string {
	var inSite, all, canIn, canOut []string
	for _, m := range members {
		if m.State == StateDown {
			continue
		}
		all = append(all, m.Name)
		if m.Meta.Site == site {
			inSite = append(inSite, m.Name)
		}
		if slices.Contains(m.Meta.Views, site) {
			if m.Meta.Site == site {
				canIn = append(canIn, m.Name)
			} else {
				canOut = append(canOut, m.Name)
			}
		}
	}
	for _, pick := range [][]string{canIn, canOut} {
		if len(pick) > 0 {
			return slices.Min(pick)
		}
	}
	for _, m := range members {
		if m.State != StateDown && len(m.Meta.Views) > 0 {
			// Members that say which ensembles they reach, but none reaches
			// this one: nobody can write it.
			return ""
		}
	}
	for _, pick := range [][]string{inSite, all} {
		if len(pick) > 0 {
			return slices.Min(pick)
		}
	}
	return ""
}

// Ensemble is a site's ZooKeeper ensemble as its bundles gossip it.
type Ensemble struct {
	Connect string
	Root    string
}

// Ensembles returns the ZooKeeper ensemble of every site a bundle has
// gossiped one for, down members included: a site's view must still be kept
// after all its bundles died. An alive member's word wins over a down one's.
func (t *Topology) Ensembles() map[string]Ensemble {
	out := map[string]Ensemble{}
	alive := map[string]bool{}
	for _, m := range t.Members() {
		if m.Meta.ZKConnect == "" || (alive[m.Meta.Site] && m.State != StateAlive) {
			continue
		}
		out[m.Meta.Site] = Ensemble{Connect: m.Meta.ZKConnect, Root: m.Meta.ZKRoot}
		alive[m.Meta.Site] = alive[m.Meta.Site] || m.State == StateAlive
	}
	return out
}

// SetViewReach sets the sites whose ZooKeeper ensembles this bundle holds a
// session to (its own site's included), gossiped so that viewKeeper only
// picks a writer that can write. It refreshes the metadata when the set
// changed.
func (t *Topology) SetViewReach(sites []string) {
	v := slices.Clone(sites)
	slices.Sort(v)
	v = slices.Compact(v)
	if old := t.views.Load(); old != nil && slices.Equal(*old, v) {
		return
	}
	t.views.Store(&v)
	t.Refresh()
}

// ViewWriter applies view targets to ZooKeeper. registry.SiteView adapted
// in cmd satisfies it (its Apply also returns the changed ids).
type ViewWriter interface {
	Apply(ctx context.Context, targets map[int]string) error
}

// ViewWriterFunc adapts a function to ViewWriter.
type ViewWriterFunc func(ctx context.Context, targets map[int]string) error

// Apply calls f.
func (f ViewWriterFunc) Apply(ctx context.Context, targets map[int]string) error {
	return f(ctx, targets)
}

// ViewOptions configure RunView.
type ViewOptions struct {
	// Site is the site whose view is kept.
	Site string
	// MaxLag is the largest seconds-behind at which a replica still counts as
	// caught up; 0 means Options.LaggingAfter.
	MaxLag time.Duration
	// Resync re-applies the view this often even without gossip changes, so
	// that changes in the real root (new topics, a master's new address) are
	// copied. Default 2s.
	Resync time.Duration
	// Always makes this bundle write whether or not it is the keeper (one
	// writer per view in tests and single-bundle sites).
	Always bool
}

// RunView keeps site's view current until ctx ends: on every gossip event
// and every Resync it recomputes ViewTargets and, when this bundle is the
// keeper (or o.Always), calls w.Apply. Errors are logged and retried at the
// next tick. It returns ctx's error, or ErrClosed when the topology closes.
func (t *Topology) RunView(ctx context.Context, w ViewWriter, o ViewOptions) error {
	return t.runViews(ctx, func(string) (ViewWriter, error) { return w, nil }, func() []string { return []string{o.Site} }, o)
}

// RunViews keeps the view of every site in the pool, plus extraSites (sites
// with consumers but no bundle), writing each only while this bundle is its
// keeper, so that a site's view stays current when all of that site's
// bundles are down. newWriter is called once per site, the first time this
// bundle keeps it. Every bundle should run it; o.Site and o.Always are
// ignored.
func (t *Topology) RunViews(ctx context.Context, newWriter func(site string) (ViewWriter, error), extraSites []string, o ViewOptions) error {
	o.Always = false
	sites := func() []string {
		seen := map[string]bool{}
		var out []string
		for s := range t.Sites() {
			seen[s] = true
			out = append(out, s)
		}
		for _, s := range extraSites {
			if !seen[s] {
				out = append(out, s)
			}
		}
		sort.Strings(out)
		return out
	}
	return t.runViews(ctx, newWriter, sites, o)
}

func (t *Topology) runViews(ctx context.Context, newWriter func(string) (ViewWriter, error), sites func() []string, o ViewOptions) error {
	if o.Resync <= 0 {
		o.Resync = 2 * time.Second
	}
	events, cancel := t.Subscribe(256)
	defer cancel()
	tick := t.opts.Clock.NewTicker(o.Resync)
	defer tick.Stop()
	writers := map[string]ViewWriter{}
	last := map[string]map[int]string{}
	keeping := map[string]bool{}
	for {
		for _, site := range sites() {
			keeper := o.Always || t.IsViewKeeper(site)
			if keeper != keeping[site] {
				keeping[site] = keeper
				if !o.Always {
					t.log.Info("TOPOLOGY: site view keeper", "view", site, "keeping", keeper)
				}
			}
			if !keeper {
				delete(last, site)
				continue
			}
			w := writers[site]
			if w == nil {
				var err error
				if w, err = newWriter(site); err != nil {
					t.log.Warn("TOPOLOGY: site view writer", "view", site, "err", err)
					continue
				}
				writers[site] = w
			}
			targets := t.ViewTargets(site, o.MaxLag)
			if err := w.Apply(ctx, targets); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				t.log.Warn("TOPOLOGY: site view update failed", "view", site, "err", err)
			} else if !maps.Equal(last[site], targets) {
				t.log.Info("TOPOLOGY: site view targets", "view", site, "targets", targets)
				last[site] = targets
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.quit:
			return ErrClosed
		case <-events:
		drain:
			// Merge a burst of events into one pass.
			for {
				select {
				case <-events:
				default:
					break drain
				}
			}
		case <-tick.C():
		}
	}
}

// ServeURLDown reports whether gossip declared the bundle serving url
// (meta://host:port, or host:port; host names compare in any case) down: a member that served it is down
// and no member serving it is alive or suspect. A suspect master that a
// master of a newer generation of its brokerId (not down) superseded counts
// as down: a killed master is replaced (promote) before gossip's suspicion
// of it runs out, seconds at load, and producers on a view kept retrying
// its refused address until then. A url no member serves (a broker outside
// the pool, or one this bundle never heard of) is not reported down: this
// bundle does not know.
func (t *Topology) ServeURLDown(url string) bool { return serveURLDown(t.Members(), url) }

func serveURLDown(members []Member, url string) bool {
	served, alive, suspect := serveURLState(members, url)
	return served && !alive && !suspect
}

// ServeURLNotAlive reports whether gossip does not hold the bundle serving
// url alive now: a member serves it and none serving it is alive (each is
// suspect or declared down). A url
// no member serves is not reported. A site view wakes its producers only
// while no entry names such a url (registry.SiteViewOptions.NotAlive).
func (t *Topology) ServeURLNotAlive(url string) bool { return serveURLNotAlive(t.Members(), url) }

func serveURLNotAlive(members []Member, url string) bool {
	served, alive, _ := serveURLState(members, url)
	return served && !alive
}

// serveURLState reports whether a member serves url, whether one serving it
// is alive, and whether one is suspect and not a master a newer generation
// (not down) superseded.
func serveURLState(members []Member, url string) (served, alive, suspect bool) {
	addr := strings.TrimPrefix(url, "meta://")
	newest := map[int]uint64{} // by brokerId: the newest generation of a master not down
	for _, m := range members {
		if m.Meta.Role == RoleMaster && m.State != StateDown {
			newest[m.Meta.BrokerID] = max(newest[m.Meta.BrokerID], m.Meta.Generation)
		}
	}
	for _, m := range members {
		// Folded: a site view may name a host in another case (registry.SiteView).
		if addr == "" || !strings.EqualFold(strings.TrimPrefix(m.Meta.ServeURL, "meta://"), addr) {
			continue
		}
		served = true
		superseded := m.Meta.Role == RoleMaster && m.Meta.Generation < newest[m.Meta.BrokerID]
		alive = alive || m.State == StateAlive
		suspect = suspect || (m.State == StateSuspect && !superseded)
	}
	return served, alive, suspect
}
