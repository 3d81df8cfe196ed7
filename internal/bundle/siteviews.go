package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"metaq/broker/registry"
	"metaq/topology"
)

// siteViews gives the topology's view keeper a ZooKeeper session for every
// site whose view this bundle may have to write. With one ensemble per site
// (deploy/'s layout), hf's view lives in hf's ensemble: while hf's bundles are
// down it must be kept by a bundle of another site, so every bundle opens a
// session of its own to each ensemble other sites gossip, and gossips which
// ensembles it reaches (topology.SetViewReach) so that exactly one live
// bundle that can write a view is its keeper.
//
// Sites that share this bundle's ensemble, and sites that gossip none, use
// the bundle's own registry.
type siteViews struct {
	t    *topology.Topology
	own  *registry.Registry
	site string
	base registry.Options // session settings for the other ensembles
	log  *slog.Logger

	mu     sync.Mutex
	remote map[string]*remoteEnsemble // by site
	views  map[string]*siteViewEntry  // by site: the SiteView in use
	wg     sync.WaitGroup
}

type remoteEnsemble struct {
	ens        topology.Ensemble
	reg        *registry.Registry // nil until connected
	connecting bool
	failures   int
	retryAt    time.Time
	closed     bool
}

type siteViewEntry struct {
	reg *registry.Registry
	sv  *registry.SiteView
}

func newSiteViews(t *topology.Topology, own *registry.Registry, site string, base registry.Options, log *slog.Logger) *siteViews {
	return &siteViews{t: t, own: own, site: site, base: base, log: log,
		remote: map[string]*remoteEnsemble{}, views: map[string]*siteViewEntry{}}
}

// sameEnsemble reports whether e is the ensemble and root of the bundle's
// own registry.
func (s *siteViews) sameEnsemble(e topology.Ensemble) bool {
	return e.Connect == s.own.Connect() && e.Root == s.own.Paths().Root
}

// run reconciles the sessions with the gossiped ensembles every interval
// until ctx ends, then closes the sessions it opened.
func (s *siteViews) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.reconcile(ctx)
		select {
		case <-ctx.Done():
			s.close()
			return
		case <-tick.C:
		}
	}
}

func (s *siteViews) reconcile(ctx context.Context) {
	ens := s.t.Ensembles()
	var reach []string
	ownOK := s.own.Connected()
	s.mu.Lock()
	defer s.mu.Unlock()
	for site := range s.t.Sites() {
		e, known := ens[site]
		if site == s.site || !known || s.sameEnsemble(e) {
			if ownOK {
				reach = append(reach, site)
			}
			continue
		}
		r := s.remote[site]
		if r != nil && r.ens != e {
			// The site moved to another ensemble: drop the old session.
			s.closeRemoteLocked(site, r)
			r = nil
		}
		if r == nil {
			r = &remoteEnsemble{ens: e}
			s.remote[site] = r
		}
		if r.reg != nil && r.reg.Connected() {
			reach = append(reach, site)
			continue
		}
		if r.reg == nil && !r.connecting && !time.Now().Before(r.retryAt) {
			r.connecting = true
			s.wg.Add(1)
			go s.connect(ctx, site, r)
		}
	}
	if ownOK && len(reach) == 0 {
		reach = append(reach, s.site)
	}
	s.t.SetViewReach(reach)
}

// connect opens a session to a remote site's ensemble. It registers nothing:
// the session only writes that site's view.
func (s *siteViews) connect(ctx context.Context, site string, r *remoteEnsemble) {
	defer s.wg.Done()
	o := s.base
	o.Connect, o.Root = r.ens.Connect, r.ens.Root
	o.Slave, o.SlaveID, o.Port, o.ConfigChecksum = false, 0, 0, 0
	reg, err := registry.New(ctx, o)
	s.mu.Lock()
	defer s.mu.Unlock()
	r.connecting = false
	if err != nil {
		r.failures++
		r.retryAt = time.Now().Add(min(time.Duration(r.failures)*time.Second, 30*time.Second))
		if r.failures == 1 || r.failures%10 == 0 {
			s.log.Warn("TOPOLOGY: cannot reach another site's ZooKeeper to keep its view for Java consumers",
				"view", site, "zk", r.ens.Connect, "attempts", r.failures, "err", err)
		}
		return
	}
	if r.closed {
		reg.Close()
		return
	}
	r.reg, r.failures = reg, 0
	s.log.Info("TOPOLOGY: connected to another site's ZooKeeper for its view", "view", site, "zk", r.ens.Connect, "root", r.ens.Root)
}

func (s *siteViews) closeRemoteLocked(site string, r *remoteEnsemble) {
	r.closed = true
	if r.reg != nil {
		r.reg.Close()
	}
	delete(s.remote, site)
	delete(s.views, site)
}

func (s *siteViews) close() {
	s.mu.Lock()
	for site, r := range s.remote {
		s.closeRemoteLocked(site, r)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// registryFor returns the session to site's own ensemble and its root when
// it is not this bundle's ensemble (remote), else this bundle's registry.
func (s *siteViews) registryFor(site string) (*registry.Registry, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.remote[site]; r != nil && r.reg != nil && r.reg.Connected() {
		return r.reg, r.ens.Root, true
	}
	return s.own, s.own.Paths().Root, false
}

// writer returns the view writer RunViews uses for site. It looks up the
// session at every Apply, so a keeper picks up a session opened later.
func (s *siteViews) writer(site string) (topology.ViewWriter, error) {
	return topology.ViewWriterFunc(func(ctx context.Context, targets map[int]string) error {
		sv, err := s.siteView(site)
		if err != nil {
			return err
		}
		_, err = sv.Apply(ctx, targets)
		return err
	}), nil
}

func (s *siteViews) siteView(site string) (*registry.SiteView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, root := s.own, s.own.Paths().Root
	var sources []*registry.Registry
	if r := s.remote[site]; r != nil {
		if r.reg == nil {
			return nil, fmt.Errorf("no session to site %s's ZooKeeper %s yet", site, r.ens.Connect)
		}
		// The other site's registrations may have expired with its
		// bundles: read the master's entry and the topics here too.
		reg, root, sources = r.reg, r.ens.Root, []*registry.Registry{s.own}
	}
	if e := s.views[site]; e != nil && e.reg == reg {
		return e.sv, nil
	}
	sv, err := registry.NewSiteView(reg, registry.SiteViewOptions{ViewRoot: viewRootFor(root, site), Sources: sources, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.views[site] = &siteViewEntry{reg: reg, sv: sv}
	return sv, nil
}
