package bundle

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/client"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/topology"
)

// topologyComponent joins the bundle to the gossip pool with its site, role,
// health and (on a master) the lag of its slave groups; it offers the read
// router for Go consumers, keeps this site's ZooKeeper view for Java
// consumers when ZooKeeper is on, and serves the lag report. It runs when
// the configuration has a [gossip] section (or [gossip] enable=true).
type topologyComponent struct {
	mu     sync.Mutex
	t      *topology.Topology
	router *topology.Router
	lag    http.Handler
	views  *siteViews // nil without ZooKeeper
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newTopologyComponent() *topologyComponent { return &topologyComponent{} }

func (c *topologyComponent) Name() string { return compTopology }

// gossipTiming scales memberlist's intervals from [gossip] probeIntervalMs:
// WAN defaults for production's seconds, proportionally shorter for the
// sub-second intervals of tests and the single-machine demo.
func gossipTiming(probe time.Duration) topology.Timing {
	if probe <= 0 || probe >= time.Second {
		tm := topology.Timing{ProbeInterval: probe}
		if probe > 0 && probe < 5*time.Second {
			tm.ProbeTimeout = probe * 3 / 5
		}
		return tm
	}
	return topology.Timing{
		ProbeInterval:           probe,
		ProbeTimeout:            probe / 2,
		GossipInterval:          max(probe/5, 10*time.Millisecond),
		PushPullInterval:        probe * 5,
		TCPTimeout:              probe * 5,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 2,
		DeadNodeReclaimTime:     probe,
		RejoinInterval:          probe * 10,
	}
}

func (c *topologyComponent) Start(ctx context.Context, b *Bundle) error {
	cfg := b.Config()
	log := b.Logger().With("component", "topology")
	o := topology.Options{
		Site:     cfg.Site.Name,
		Role:     topology.RoleMaster,
		BrokerID: cfg.System.BrokerID,
		SlaveID:  -1,
		ServeURL: b.Broker.URL(),
		Bind:     cfg.Gossip.Bind,
		Join:     cfg.Gossip.Join,
		Key:      cfg.Gossip.Key,
		Label:    cfg.Gossip.Label,
		Timing:   gossipTiming(cfg.Gossip.ProbeInterval),
		Logger:   log,
		DropTo:   b.opts.GossipDropTo,
	}
	if cfg.Gossip.Advertise != "" {
		o.Advertise = cfg.Gossip.Advertise
	}
	if b.Registry != nil {
		o.ZKConnect, o.ZKRoot = b.Registry.Connect(), b.Registry.Paths().Root
	}
	if cfg.Gossip.ProbeInterval > 0 && cfg.Gossip.ProbeInterval < time.Second {
		o.RefreshInterval = 5 * cfg.Gossip.ProbeInterval
	}
	if b.Slave != nil {
		o.Role, o.SlaveID = topology.RoleSlave, b.Slave.SlaveID
	}
	if d, ok := findComp[*dashboardComponent](b); ok {
		o.HTTPAddr = d.Addr()
	}
	ship, hasShipper := findComp[*shipperComponent](b)
	if hasShipper {
		o.ReplAddr = ship.Addr()
	}
	// Lag and health follow the role as a promotion or a demotion changes
	// it: the running shipper (configured or promoted), else the receiver.
	o.Lag = topology.LagFunc(func() []georeplicator.GroupLag {
		if s := b.runningShipper(); s != nil {
			return s.Lag()
		}
		return nil
	})
	o.Health = topology.HealthFunc(func() topology.Health {
		h := topology.Health{StorageOK: b.Store.Health() == nil, ReplicationOK: true}
		switch rc := b.receiver(); {
		case b.runningShipper() != nil:
		case rc != nil:
			h.ReplicationOK = rc.Connected() // either method
		case hasShipper || b.promotedShipper() != nil:
			h.ReplicationOK = false // a master whose shipper stopped
		}
		return h
	})
	// A change of role (a promotion, a demotion, stepping down) re-mirrors
	// the master's registration into the other sites' ensembles at once
	// (siteViews).
	type roleKey struct {
		role        topology.Role
		steppedDown bool
	}
	roleChanged := make(chan struct{}, 1)
	var lastRole atomic.Value
	o.Mastership = topology.MastershipFunc(func() topology.Mastership {
		m := b.mastership(topology.Mastership{Role: o.Role, SlaveID: o.SlaveID, ReplAddr: o.ReplAddr})
		key := roleKey{role: m.Role}
		if s := b.runningShipper(); s != nil {
			key.steppedDown = s.Fence().SteppedDown
		}
		if old := lastRole.Swap(key); old != nil && old != key {
			select {
			case roleChanged <- struct{}{}:
			default:
			}
		}
		return m
	})
	t, err := topology.New(o)
	if err != nil {
		return err
	}
	if err := t.Start(ctx); err != nil {
		return err
	}
	var offsets topology.OffsetSource
	var views *siteViews
	rctx, cancel := context.WithCancel(context.Background())
	if b.Registry != nil {
		reg := b.Registry
		root := reg.Paths().Root
		offsets = topology.OffsetFunc(func(ctx context.Context) ([]topology.ConsumerOffset, error) {
			var out []topology.ConsumerOffset
			read := func(reg *registry.Registry, root, site string) error {
				gos, err := reg.OffsetsUnder(ctx, root)
				if err != nil {
					return err
				}
				for _, g := range gos {
					out = append(out, topology.ConsumerOffset{Root: g.Root, Site: site, Group: g.Group, Topic: g.Topic,
						BrokerID: g.BrokerID, Partition: g.Part, Offset: g.Offset.Offset})
				}
				return nil
			}
			// The real root holds this site's consumers (with one ensemble
			// per site); Java consumers pinned to a site keep their offsets
			// under that site's view root, in that site's ensemble.
			if err := read(reg, root, o.Site); err != nil {
				return out, err
			}
			for site := range t.Sites() {
				if r, rroot, remote := views.registryFor(site); remote {
					if err := read(r, rroot, site); err != nil {
						continue // that site's ensemble is unreachable now
					}
					read(r, viewRootFor(rroot, site), site)
				} else if err := read(reg, viewRootFor(root, site), site); err != nil {
					return out, err
				}
			}
			return out, nil
		})
		// Every bundle runs the views of every site and writes those it is
		// keeper of, so a site whose bundles are all down still gets its view
		// pointed back at the master by a bundle elsewhere, in that site's
		// own ensemble.
		base := registry.Options{
			SessionTimeout:    cfg.ZooKeeper.SessionTimeout,
			ConnectionTimeout: min(cfg.ZooKeeper.ConnectionTimeout, 10*time.Second),
			BrokerID:          cfg.System.BrokerID,
			SessionFile:       filepath.Join(cfg.System.DataPath, "zookeeper.session"),
			Logger:            log,
			Dialer:            b.opts.ZooKeeperDialer,
		}
		views = newSiteViews(t, reg, o.Site, base, log)
		views.ensFile = ensemblesFile(cfg.System.DataPath)
		static := topology.Mastership{Role: o.Role, SlaveID: o.SlaveID, ReplAddr: o.ReplAddr}
		views.master = func() registry.MasterMirror { return b.masterMirror(static) }
		views.generation = func() uint64 { return b.masterGeneration(static) }
		views.paused = func() bool { return b.failover.role.Busy() == siterole.HandingOver }
		views.leaveSlave = b.handoverSlaveEntry
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			views.run(rctx, min(max(cfg.Gossip.ProbeInterval*5, 100*time.Millisecond), time.Second), roleChanged)
		}()
		go func() {
			defer c.wg.Done()
			err := t.RunViews(rctx, views.writer, []string{o.Site}, topology.ViewOptions{})
			if err != nil && rctx.Err() == nil {
				log.Warn("TOPOLOGY: site views stopped", "err", err)
			}
		}()
	}
	every := max(o.RefreshInterval, 50*time.Millisecond)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		b.watchGossipGenerations(rctx, t, every)
	}()
	// Automatic failover runs whatever role the bundle started with: a
	// master demoted at run time follows, and may take over, as any slave.
	if rp := cfg.Replication; rp.AutoFailover && (b.opts.Mode == ModeMaster || b.opts.Mode == ModeSlave) {
		if b.Registry == nil {
			log.Warn("FAILOVER: [replication] autoFailover=true needs ZooKeeper to agree the master is lost; it stays off")
		} else {
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				// Ticks at most a quarter second apart: the metadata
				// refresh (five probe intervals) would add seconds to
				// the failover time.
				b.runAutoFailover(rctx, t, rp.AutoFailoverAfter, min(every, max(cfg.Gossip.ProbeInterval/2, 50*time.Millisecond), 250*time.Millisecond))
			}()
		}
	}
	c.mu.Lock()
	c.t, c.cancel, c.views = t, cancel, views
	c.router = topology.NewRouter(t)
	c.lag = topology.NewLagHandler(t, topology.LagHandlerOptions{
		Offsets: offsets,
		Gateway: func() *topology.GatewayReport { return gatewayReport(b) },
		// Each broker id's consumer groups come from its current master's
		// dashboard, which takes the same [site] token as deploy/ sets it.
		Fetch: topology.HTTPLagFetcher(lagClient, "http", "/lag", cfg.Site.Token),
	})
	c.mu.Unlock()
	if d, ok := findComp[*dashboardComponent](b); ok {
		d.attachTopology(t, offsets)
	}
	return nil
}

// Topology returns the running membership (nil before Start or after Close).
func (c *topologyComponent) Topology() *topology.Topology {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// siteViews returns the sessions to the other sites' ensembles (nil
// without ZooKeeper, before Start or after Close).
func (c *topologyComponent) siteViews() *siteViews {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.views
}

// Router returns the site-affinity router for Go consumers in this process.
func (c *topologyComponent) Router() client.Router {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.router == nil {
		return nil
	}
	return c.router
}

// lagClient asks other masters' dashboards for their consumer groups; the
// lag handler's own 5 s bound applies too. No keep-alive: an operator's
// request is rare, and no idle connection (with its goroutines) outlives
// the bundle.
var lagClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// LagHandler serves the lag report (mounted at /lag on the dashboard).
func (c *topologyComponent) LagHandler() http.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lag
}

// Close stops the site view keeper and leaves the pool.
func (c *topologyComponent) Close() error {
	c.mu.Lock()
	t, cancel := c.t, c.cancel
	c.t, c.router, c.cancel, c.views = nil, nil, nil, nil
	c.mu.Unlock()
	if t == nil {
		return nil
	}
	cancel()
	c.wg.Wait()
	return t.Close()
}

// Status lists the pool's members.
func (c *topologyComponent) Status() any {
	t := c.Topology()
	if t == nil {
		return map[string]any{"running": false}
	}
	st := map[string]any{"running": true, "node": t.Name(), "addr": t.Addr(), "sites": t.Sites(), "members": len(t.Members())}
	c.mu.Lock()
	views := c.views
	c.mu.Unlock()
	if views != nil {
		// The other sites' ensembles, and whether this master is
		// registered in each (one ensemble per site).
		st["ensembles"] = views.status()
	}
	return st
}

// viewRootFor is the site view root for a registry root: /meta-view-<site>
// for MetaQ's default root /meta (registry.SiteViewRoot, what the Java
// consumer's zkRoot is set to), <root>-view-<site> for any other root, so
// that several deployments sharing one ensemble under different roots keep
// their views apart.
func viewRootFor(root, site string) string {
	if root == "/meta" {
		return registry.SiteViewRoot(site)
	}
	return root + "-view-" + site
}
