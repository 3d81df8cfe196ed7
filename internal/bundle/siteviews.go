package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
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
// The same sessions carry this bundle's master registration into the other
// sites' ensembles (registry.Registry.Mirror): while it is its brokerId's
// master, producers, consumers and slaves that use any site's ensemble find
// it there, and after a switchover or a promotion they find the new master,
// which mirrors itself as the old one stops.
//
// Sites that share this bundle's ensemble, and sites that gossip none, use
// the bundle's own registry.
type siteViews struct {
	t    *topology.Topology
	own  *registry.Registry
	site string
	base registry.Options // session settings for the other ensembles
	log  *slog.Logger
	// master is this bundle's registration to mirror into the other
	// ensembles; nil mirrors nothing. It is not a registered master's when
	// the bundle is not master (then Mirror removes what it wrote).
	master func() registry.MasterMirror
	// generation is this bundle's generation while it is master by its
	// role, else 0. It takes no registry lock: a new master still waiting
	// for its own ensemble's master node raises the generation in the
	// other ensembles meanwhile, so that an old master that still holds
	// nodes and reads its own ensemble steps down and lets go.
	generation func() uint64
	// ensFile, when set, records the other sites' ensembles gossip names
	// (ensembles.go), for a check of the generation at the next start.
	ensFile  string
	recorded map[string]topology.Ensemble // what ensFile last got; reconcile only
	ownState ownState                     // the own session as last seen; reconcile only
	// paused, when it returns true, leaves the mirrors as they are: a
	// master handing over neither rewrites nor removes them while the new
	// master replaces them (awaitTopicsTaken), so that no ensemble lists a
	// topic without partitions in between.
	paused func() bool
	// leaveSlave, when set, is the slaveId the master that handed over to
	// this one takes, when site is that master's site
	// (registry.MasterMirror.LeaveSlave); ok false otherwise.
	leaveSlave func(site string) (slaveID int, ok bool)

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
	// mirroring: a Mirror call runs; mirrored: the last one wrote a
	// master (for logging changes); mirrorFailures counts failures in a row.
	mirroring      bool
	mirrored       bool
	mirrorFailures int
	mirrorErr      string // the last Mirror's error, "" after a success
	raisedGen      uint64 // the generation last raised there ahead of Mirror
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

// run reconciles the sessions with the gossiped ensembles every interval,
// and at once when kicked (this bundle's role changed: a new master waits
// for the old one's mirrored master node to go), until ctx ends, then
// closes the sessions it opened.
func (s *siteViews) run(ctx context.Context, interval time.Duration, kick <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.reconcile(ctx)
		select {
		case <-ctx.Done():
			s.close()
			return
		case <-tick.C:
		case <-kick:
		}
	}
}

func (s *siteViews) reconcile(ctx context.Context) {
	ens := s.t.Ensembles()
	s.record(ens)
	var reach []string
	ownOK := s.ownSessionClaim()
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
			if s.master != nil && !r.mirroring && (s.paused == nil || !s.paused()) {
				r.mirroring = true
				s.wg.Add(1)
				go s.mirror(ctx, site, r, r.reg)
			}
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

// ownSessionClaim reports whether this bundle still claims the views its
// own ensemble holds: while its session there may be alive, through a
// disconnection too. A brief disconnection under load otherwise handed its
// site's view to another site's bundle, which then wrote it, and the
// site's producers could bypass its gateway meanwhile; the session, and
// the nodes it holds, outlive a disconnection up to the session timeout.
// It logs when the claim is kept through a disconnection and when it is
// given up. Called by reconcile only.
func (s *siteViews) ownSessionClaim() bool {
	state := ownConnected
	switch {
	case s.own.Connected():
	case s.own.SessionMayBeAlive():
		state = ownDisconnected
	default:
		state = ownLost
	}
	if state != s.ownState {
		switch state {
		case ownDisconnected:
			s.log.Warn("TOPOLOGY: disconnected from this site's ZooKeeper; still keeping the site views while the session may live",
				"zk", s.own.Connect(), "sessionTimeout", s.base.SessionTimeout)
		case ownLost:
			s.log.Warn("TOPOLOGY: this site's ZooKeeper session is lost; another site's bundle may keep the site views until it is back",
				"zk", s.own.Connect())
		default:
			if s.ownState != ownConnected {
				s.log.Info("TOPOLOGY: connected to this site's ZooKeeper again", "zk", s.own.Connect())
			}
		}
		s.ownState = state
	}
	return state != ownLost
}

// ownState is what reconcile last saw of the session to this bundle's own
// ensemble.
type ownState int

const (
	ownConnected    ownState = iota // holds the session (or never had one)
	ownDisconnected                 // disconnected; the session may live
	ownLost                         // expired, past the session timeout, or closed
)

// record keeps ensFile to the other sites' ensembles in ens (those of
// this bundle's own ensemble left out), writing only when they change.
func (s *siteViews) record(ens map[string]topology.Ensemble) {
	if s.ensFile == "" {
		return
	}
	others := map[string]topology.Ensemble{}
	for site, e := range ens {
		if site != s.site && !s.sameEnsemble(e) {
			others[site] = e
		}
	}
	if len(others) == 0 || maps.Equal(others, s.recorded) {
		return
	}
	if err := recordEnsembles(s.ensFile, others); err != nil {
		s.log.Warn("TOPOLOGY: cannot record the other sites' ensembles", "err", err)
		return
	}
	s.recorded = others
}

// awaitTopicsTaken waits until, in every other site's ensemble, the topic
// entries this bundle mirrored there are another session's (the new
// master replaced them), or ctx ends.
func (s *siteViews) awaitTopicsTaken(ctx context.Context) error {
	s.mu.Lock()
	regs := map[string]*registry.Registry{}
	for site, r := range s.remote {
		if r.reg != nil && r.mirrored {
			regs[site] = r.reg
		}
	}
	s.mu.Unlock()
	var errs []error
	for site, reg := range regs {
		if err := reg.AwaitTopicsTaken(ctx); err != nil {
			errs = append(errs, fmt.Errorf("site %s's ZooKeeper: %w", site, err))
		}
	}
	return errors.Join(errs...)
}

// connect opens a session to a remote site's ensemble. It registers nothing:
// the session only writes that site's view.
func (s *siteViews) connect(ctx context.Context, site string, r *remoteEnsemble) {
	defer s.wg.Done()
	o := s.base
	o.Connect, o.Root = r.ens.Connect, r.ens.Root
	o.Slave, o.SlaveID, o.Port, o.ConfigChecksum = false, 0, 0, 0
	if o.SessionFile != "" {
		// This session's own record, so that a restart after a kill replaces
		// the master node it mirrored there without waiting for it to expire.
		o.SessionFile += "." + site
	}
	var self atomic.Pointer[registry.Registry]
	o.MasterGuard = s.mirrorGuard(&self)
	reg, err := registry.New(ctx, o)
	if err == nil {
		self.Store(reg)
	}
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

// mirrorGuard is the MasterGuard of the session to another site's
// ensemble (self, once connected): a master node this session mirrored is
// written again (after a new session, or by Mirror) only while this bundle
// is a master that has not stepped down and that ensemble has no newer
// generation. A master paused past its session timeout while another site
// was promoted otherwise re-registered there at once when it ran again,
// waited out the new master's node (zk.zkSessionTimeoutMs) and logged an
// ERROR, holding the session's registration lock meanwhile. It takes no
// lock of siteViews: the registry calls it with its own held.
func (s *siteViews) mirrorGuard(self *atomic.Pointer[registry.Registry]) func(context.Context) error {
	return func(ctx context.Context) error {
		reg := self.Load()
		if reg == nil || !reg.Registration().Master() || s.master == nil {
			return nil // nothing mirrored yet: Mirror checks what it writes
		}
		m := s.master()
		if !m.Master() {
			return fmt.Errorf("%w: this bundle is no master now", registry.ErrNotCurrentMaster)
		}
		return reg.CheckNotSuperseded(ctx, m.Generation)
	}
}

// mirror writes this bundle's master registration (or its absence) into
// site's ensemble through reg, once; reconcile starts it again at every
// interval. It may wait up to the session timeout for a master node the
// old master still holds there.
func (s *siteViews) mirror(ctx context.Context, site string, r *remoteEnsemble, reg *registry.Registry) {
	defer s.wg.Done()
	wait := s.base.SessionTimeout
	if wait <= 0 {
		wait = 30 * time.Second
	}
	mctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	var err error
	var gen uint64
	if s.generation != nil {
		s.mu.Lock()
		raised := r.raisedGen
		s.mu.Unlock()
		if gen = s.generation(); gen > raised {
			// With its raiser, so that every ensemble says who owns the
			// generation: the promotion's as this site's ensemble names it,
			// else this site.
			_, _, err = reg.RaiseGenerationToBy(mctx, s.base.BrokerID, gen, s.raiserOf(mctx, gen), false)
		}
	}
	var m registry.MasterMirror
	if err == nil {
		m = s.master()
		if m.Generation > 0 {
			m.Raiser = s.raiserOf(mctx, m.Generation)
		}
		if s.leaveSlave != nil && m.Master() {
			if id, ok := s.leaveSlave(site); ok {
				m.LeaveSlave = &id
			}
		}
		err = reg.Mirror(mctx, m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.mirroring = false
	if err == nil {
		r.raisedGen = max(r.raisedGen, gen)
	}
	if err != nil {
		r.mirrorErr = err.Error()
		r.mirrorFailures++
		if (r.mirrorFailures == 1 || r.mirrorFailures%20 == 0) && ctx.Err() == nil && !r.closed {
			s.log.Warn("TOPOLOGY: cannot write this master's registration into another site's ZooKeeper",
				"site", site, "zk", r.ens.Connect, "attempts", r.mirrorFailures, "err", err)
		}
		return
	}
	r.mirrorFailures, r.mirrorErr = 0, ""
	if r.mirrored != m.Master() {
		r.mirrored = m.Master()
		if r.mirrored {
			s.log.Info("TOPOLOGY: this master is registered in another site's ZooKeeper too", "site", site,
				"zk", r.ens.Connect, "root", r.ens.Root, "url", m.URL, "generation", m.Generation)
		} else {
			s.log.Info("TOPOLOGY: this broker is no longer master: its registration left another site's ZooKeeper",
				"site", site, "zk", r.ens.Connect)
		}
	}
}

// raiserOf is the raiser this bundle writes with generation gen into
// another site's ensemble: the one this site's ensemble names for gen
// (the promotion that raised it), else this site with no token.
func (s *siteViews) raiserOf(ctx context.Context, gen uint64) registry.Raiser {
	if g, by, err := s.own.GenerationRaiser(ctx, s.base.BrokerID); err == nil && g == gen && by.Site != "" && !by.Abandoned {
		return by
	}
	return registry.Raiser{Generation: gen, Site: s.site}
}

// masterMirror is what this bundle mirrors into the other sites'
// ensembles: its registration while it is a master that has not stepped
// down (a newer generation exists), with its replication address and
// generation; otherwise a registration that is no master's, which removes
// the mirror.
func (b *Bundle) masterMirror(static topology.Mastership) registry.MasterMirror {
	m := registry.MasterMirror{Registration: b.Registry.Registration()}
	if !m.Master() {
		return m
	}
	ms, ok := b.mirrorableMastership(static)
	if !ok {
		m.Broker = false
		return m
	}
	m.ReplicationAddr, m.Generation = ms.ReplAddr, ms.Generation
	return m
}

// masterGeneration is this bundle's generation while it is master by its
// role (configured or promoted) and has not stepped down, else 0.
func (b *Bundle) masterGeneration(static topology.Mastership) uint64 {
	ms, ok := b.mirrorableMastership(static)
	if !ok {
		return 0
	}
	return ms.Generation
}

// mirrorableMastership is this bundle's mastership and whether it may be
// written into the other sites' ensembles as their master's: only while
// it is master by its role, has not stepped down (by its role or its
// shipper's fence) and has recorded no slave role. A master that stepped
// down is demoted in steps: between the recording of its slave role (with
// the newer generation it follows) and its registration as a slave, its
// registration is still a master's and its generation the new master's;
// mirrored then, it took the new master's node in the other ensembles.
func (b *Bundle) mirrorableMastership(static topology.Mastership) (topology.Mastership, bool) {
	if r := b.Role(); r.SteppedDown {
		return topology.Mastership{}, false
	}
	if s := b.runningShipper(); s != nil && s.Fence().SteppedDown {
		return topology.Mastership{}, false
	}
	if id := b.failover.openedIdentity(); id != nil && followedGeneration(id) > 0 {
		return topology.Mastership{}, false
	}
	ms := b.mastership(static)
	if ms.Role != topology.RoleMaster {
		return topology.Mastership{}, false
	}
	return ms, true
}

// EnsembleStatus is, in the bundle's status, one other site's ensemble:
// whether this bundle holds a session to it and has its master
// registration written there.
type EnsembleStatus struct {
	ZooKeeper string `json:"zk"`
	Root      string `json:"root"`
	Connected bool   `json:"connected"`
	// MasterRegistered: this bundle's master registration is written there.
	MasterRegistered bool   `json:"masterRegistered"`
	Error            string `json:"error,omitempty"` // the last failure to write it
}

// status reports every other site's ensemble this bundle keeps a session
// to. A registration it wrote is read back, not remembered: status never
// reports one that has gone (until the next mirror writes it again).
func (s *siteViews) status() map[string]EnsembleStatus {
	s.mu.Lock()
	out := make(map[string]EnsembleStatus, len(s.remote))
	regs := map[string]*registry.Registry{}
	for site, r := range s.remote {
		out[site] = EnsembleStatus{ZooKeeper: r.ens.Connect, Root: r.ens.Root, Connected: r.reg != nil && r.reg.Connected(),
			MasterRegistered: r.mirrored, Error: r.mirrorErr}
		if r.mirrored && r.reg != nil {
			regs[site] = r.reg
		}
	}
	s.mu.Unlock()
	for site, reg := range regs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		owned, err := reg.Owns(ctx, reg.Paths().Broker(s.base.BrokerID, -1))
		cancel()
		if st := out[site]; err != nil || !owned {
			st.MasterRegistered = false
			if err != nil && st.Error == "" {
				st.Error = "reading the registration back: " + err.Error()
			}
			out[site] = st
		}
	}
	return out
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
	// Producers on the view that may still use a bundle gossip declared
	// dead read the brokers again (a Java producer re-reads only when
	// topics-pub/<topic>'s children change).
	sv, err := registry.NewSiteView(reg, registry.SiteViewOptions{ViewRoot: viewRootFor(root, site), Sources: sources,
		Dead: s.t.ServeURLDown, NotAlive: s.t.ServeURLNotAlive, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.views[site] = &siteViewEntry{reg: reg, sv: sv}
	return sv, nil
}
