package bundle

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/atomicfile"
	"metaq/internal/hostaddr"
	"metaq/internal/peek"
	"metaq/internal/siterole"
)

// keepPublishedEvery is how soon a master checks again that its
// registrations are in place when a check could not run or finish, and
// when it makes its first check (a variable for tests).
var keepPublishedEvery = time.Second

// keepPublishedBackstop is how often a master checks its registrations
// although no watch fired (keepPublished; a variable for tests).
var keepPublishedBackstop = 30 * time.Second

// replicationNode is the ephemeral znode under <root>/brokers/ids/<id> in
// which a master publishes its replication listener (host:port), as the
// georeplicator's Resolver documents.
const replicationNode = "replication"

// shipperComponent is the master side of geo-replication: it serves the
// store's durable log to slave sites on [replication] listen and publishes
// that address in ZooKeeper.
type shipperComponent struct {
	mu        sync.Mutex
	b         *Bundle
	s         *georeplicator.Shipper
	advertise string
	znode     string
	cancel    context.CancelFunc
	// guard is when the generation was last confirmed in ZooKeeper (nil
	// with ZooKeeper off); set in Start before anything reads it.
	guard *ackGuard
	// raised: a promotion started this shipper at the generation it had
	// just raised (roleOwner.startShipper); its first confirmation needs
	// this site's ensemble only (siterole.ConfirmsGeneration). gen is the
	// generation it ships at.
	raised bool
	gen    uint64
	// stopGateway stops serving gateway links on a [replication] listen
	// of its own (nil on the MetaQ port, which serves them itself).
	stopGateway func()
}

func newShipperComponent() *shipperComponent { return &shipperComponent{} }

func (c *shipperComponent) Name() string { return compShipper }

// startsBeforeServing: the replication address is published before the
// broker's master node, so a slave that sees the master also sees how to
// reach the compressed stream, and never picks the MetaQ method by mistake.
func (c *shipperComponent) startsBeforeServing() bool { return true }

func (c *shipperComponent) Start(ctx context.Context, b *Bundle) error {
	cfg := b.Config()
	mode, err := georeplicator.ParseMode(cfg.Replication.Compression)
	if err != nil {
		return err
	}
	var serverTLS *tls.Config
	if cfg.Replication.TLSCert != "" {
		if serverTLS, err = georeplicator.ServerTLS(cfg.Replication.TLSCert, cfg.Replication.TLSKey, cfg.Replication.TLSCA); err != nil {
			return err
		}
	}
	secrets, err := ReplicationSecrets(cfg)
	if err != nil {
		return err
	}
	var secret []byte
	if len(secrets) > 0 {
		secret = secrets[0]
	}
	ln, shared, err := listenReplication(b, cfg)
	if err != nil {
		return err
	}
	if !shared {
		// A listener of its own serves the slave sites' gateway links
		// too: without ZooKeeper a slave knows only this address.
		sp := peek.NewSplit(ln, georeplicator.GatewayFirstByte, 10*time.Second)
		ln = sp.Rest()
		gctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { // ended with the listener (the shipper closes it) or by stop
			defer close(done)
			b.serveGatewayOn(gctx, sp.Matched())
		}()
		c.stopGateway = func() { stop(); <-done }
	}
	if serverTLS == nil && secret == nil && !config.IsLoopbackAddr(ln.Addr().String()) {
		b.Logger().Warn("REPLICATION: the log is served without TLS to any host that reaches "+ln.Addr().String()+
			", as the MetaQ port serves it; set [replication] secretFile, or tlsCert, tlsKey and tlsCA for mutual TLS, a loopback listen, or enable=false",
			"addr", ln.Addr().String())
	}
	id, err := b.identity()
	if err != nil {
		ln.Close()
		return err
	}
	ident := id.Get()
	s, err := georeplicator.NewShipper(georeplicator.ShipperOptions{
		LogID:                ident.LogID,
		Generation:           ident.Generation,
		PromotionEnds:        ident.Ends,
		History:              ident.History,
		Sites:                cfg.Replication.FenceSites,
		Lease:                cfg.Replication.Lease,
		OnFence:              b.onFence,
		TLS:                  serverTLS,
		Secret:               secret,
		PreviousSecrets:      secrets[min(1, len(secrets)):],
		Listener:             ln,
		BrokerID:             cfg.System.BrokerID,
		Source:               b.Store,
		Compression:          mode,
		BandwidthBytesPerSec: cfg.Replication.BandwidthBytesPerSec,
		StuckAfter:           cfg.Replication.StuckAfter,
		StateFile:            filepath.Join(cfg.System.DataPath, "replication", "shipper.json"),
		ConfigBytes: func() ([]byte, error) {
			// Secrets never travel: a slave keeps its own in its overlay.
			return config.StripSecrets(b.Config().Raw), nil
		},
		Logger: b.Logger(),

		OnControl: b.onControl,
		// Loud in the log at start and at each request (georeplicator/control.go).
		AllowUnauthenticatedControl: cfg.Replication.AllowUnauthenticatedSwitchover,
	})
	if err != nil {
		ln.Close()
		return err
	}
	if err := os.MkdirAll(filepath.Join(cfg.System.DataPath, "replication"), 0o755); err != nil {
		s.Close()
		return fmt.Errorf("replication: %w", err)
	}
	if err := s.Start(); err != nil {
		return err
	}
	c.mu.Lock()
	c.b, c.s, c.gen = b, s, ident.Generation
	c.advertise = advertiseAddr(s.Addr(), cfg)
	if shared {
		// Exactly the address the master node publishes for clients.
		c.advertise = strings.TrimPrefix(b.Broker.URL(), "meta://")
	}
	if cfg.Replication.Advertise != "" {
		c.advertise = cfg.Replication.Advertise
	}
	c.mu.Unlock()
	b.slave.set(s.StatsLines)
	b.Broker.SetSiteReplicator(s) // topics with minSyncSites wait for the slave sites

	if b.Registry != nil {
		c.znode = b.Registry.Paths().BrokerID(cfg.System.BrokerID) + "/" + replicationNode
		// From here on this master acknowledges puts only while it has
		// confirmed its generation recently (ackguard.go).
		c.guard = newAckGuard(cfg.ZooKeeper.SessionTimeout)
		c.guard.raised = c.raised
		c.guard.observe(0, 0, cfg.Replication.FenceSites, len(cfg.Replication.Sites))
		b.Broker.SetWriteCheck(b.ackCheck(c.guard))
		switch err := c.publish(ctx); {
		case errors.Is(err, errNotCurrentMaster):
			// It stepped down: it refuses puts and rejoins as a slave.
			b.Logger().Warn("REPLICATION: "+err.Error(), "path", c.znode)
		case err != nil:
			// ZooKeeper lost the session or refused the write: the keeper
			// below publishes the address once it can, and until this
			// master confirms its generation it acknowledges nothing. A
			// bundle that exited here died on a passing ZooKeeper outage.
			b.Logger().Warn("REPLICATION: publishing the replication address failed; retrying", "path", c.znode, "every", keepPublishedEvery, "err", err)
		}
		// Ephemeral nodes die with the session; the registry re-creates its
		// own, this one is ours.
		pctx, cancel := context.WithCancel(context.Background())
		var watched sync.WaitGroup
		watched.Add(2)
		go func() { // ended by cancel in Close, which waits for it
			defer watched.Done()
			// Confirmed several times within the guard's bound, so that one
			// slow read does not make this master refuse puts.
			b.watchGeneration(pctx, s, ident.Generation, c.guard, min(max(cfg.Replication.Lease/4, 100*time.Millisecond), c.guard.bound/4))
		}()
		go func() { // the same
			defer watched.Done()
			c.keepPublished(pctx, keepPublishedEvery)
		}()
		c.cancel = func() { cancel(); watched.Wait() }
		b.Registry.OnNewSession(func() {
			if pctx.Err() != nil {
				return
			}
			if err := c.publish(pctx); err != nil {
				b.Logger().Warn("REPLICATION: re-publishing the replication address failed", "err", err)
			}
		})
	}
	return nil
}

// errNotCurrentMaster: the shipper's generation is not ZooKeeper's, so it
// writes nothing there (another site was promoted; this master steps
// down).
var errNotCurrentMaster = errors.New("this master's generation is not the current one")

func (c *shipperComponent) publish(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r := c.b.Registry
	brokerID := c.b.Config().System.BrokerID
	c.mu.Lock()
	s := c.s
	c.mu.Unlock()
	// Only the current master writes ids/<id>/replication: a returning
	// old master overwriting it would leave the new master without one
	// once it steps down and deletes its own.
	readStart := time.Now()
	gen, err := r.Generation(ctx, brokerID)
	if err != nil {
		return fmt.Errorf("replication: read the generation before publishing the address: %w", err)
	}
	// One ensemble per site: this site's may have missed a promotion.
	timeout := 2 * time.Second
	if c.guard != nil {
		timeout = c.guard.readTimeout()
	}
	reads := c.b.generationReads(ctx, gen, true, c.gen, timeout)
	for _, g := range reads {
		gen = max(gen, g)
	}
	if s != nil {
		if s.ObserveGeneration(gen, "ZooKeeper"); s.Fence().SteppedDown {
			return fmt.Errorf("replication: not publishing the address: %w (ZooKeeper has generation %d)", errNotCurrentMaster, gen)
		}
		if c.guard != nil {
			c.b.confirmGeneration(c.guard, c.gen, reads, readStart)
		}
	}
	if err := r.EnsurePath(ctx, r.Paths().BrokerID(brokerID)); err != nil {
		return fmt.Errorf("replication: publish address: %w", err)
	}
	_ = r.Delete(ctx, c.znode) // the current master's: a node left by our previous session, or by an older master
	if err := r.CreateEphemeral(ctx, c.znode, []byte(c.advertise)); err != nil {
		return fmt.Errorf("replication: publish address at %s: %w", c.znode, err)
	}
	return nil
}

// published reports whether ids/<id>/replication holds this master's
// address under its own session.
func (c *shipperComponent) published(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r := c.b.Registry
	data, st, err := r.Get(ctx, c.znode)
	if errors.Is(err, registry.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.EphemeralOwner == r.SessionID() && string(data) == c.Addr(), nil
}

// keepPublished re-publishes the replication address (and registers the
// master node again) whenever it is missing while this shipper is the
// current master (a returning old master
// that wrote the node under its session and then deleted it, an operator's
// mistake). It returns when ctx ends.
//
// It is driven by ZooKeeper's watches: a check that finds everything in
// place leaves watches on what it read (the master node, every topic's
// entry under topics-pub, the replication node) and the next check runs
// when one fires, or after keepPublishedBackstop as a backstop (a watch
// lost with the connection). A check that could not run or finish (no
// shipper yet, a handover, a read or write that failed) is run again
// after every. Polling read the master node and every topic's entry once
// a second.
func (c *shipperComponent) keepPublished(ctx context.Context, every time.Duration) {
	backstop := time.NewTicker(max(keepPublishedBackstop, every))
	defer backstop.Stop()
	var changed registry.Watch // armed by the last check; nil when none is
	retry := time.After(every) // the first check: publish just ran
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = nil
		case <-backstop.C:
		case <-retry:
		}
		retry = nil
		w, done := c.checkPublished(ctx, changed == nil)
		if w != nil {
			changed = w
		}
		if !done {
			retry = time.After(every)
		}
	}
}

// checkPublished does keepPublished's check once; with arm it leaves
// watches on what it read and returns them. done is false when the check
// could not run or finish, or wrote something: it is run again soon.
func (c *shipperComponent) checkPublished(ctx context.Context, arm bool) (registry.Watch, bool) {
	c.mu.Lock()
	s := c.s
	c.mu.Unlock()
	if s == nil || s.Fence().SteppedDown || c.b.failover.role.Busy() == siterole.HandingOver {
		return nil, false
	}
	reg := c.b.Registry
	var ws []registry.Watch
	done := true
	if reg.Registration().Master() {
		// The master node (and with it the topics' entries): a
		// registration status does not remember, it reads.
		path := reg.Paths().Broker(c.b.Config().System.BrokerID, -1)
		var owned bool
		var err error
		if arm {
			var w registry.Watch
			owned, w, err = reg.OwnsW(ctx, path)
			if err == nil {
				ws = append(ws, w)
			}
		} else {
			owned, err = reg.Owns(ctx, path)
		}
		if err == nil && owned {
			// The node is there, a topic's entry may not be: a write
			// that failed half way, or an old master's late removal.
			var p string
			var uerr error
			if arm {
				var w registry.Watch
				p, w, uerr = reg.UnlistedW(ctx)
				if uerr == nil {
					ws = append(ws, w)
				}
			} else {
				p, uerr = reg.Unlisted(ctx)
			}
			if uerr != nil {
				done = false
			} else if p != "" {
				owned, path = false, p
			}
		}
		if err != nil {
			done = false
		}
		if err == nil && !owned {
			done = false // read again once written: arms the watches anew
			// Bounded: the write holds the registry's write lock, which
			// a promotion's finisher and a demotion wait for.
			rctx, cancel := context.WithTimeout(ctx, 2*c.b.Config().ZooKeeper.SessionTimeout)
			err := reg.Reassert(rctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, registry.ErrNotCurrentMaster) {
					c.b.Logger().Warn("REPLICATION: this master's node (or a topic's entry) is missing in ZooKeeper and registering it again failed", "path", path, "err", err)
				}
			} else {
				c.b.Logger().Warn("REPLICATION: this master's node (or a topic's entry) was missing in ZooKeeper; registered it again", "path", path)
			}
		}
	} else {
		done = false // not registered as master yet: look again soon
	}
	// Only a missing node is written again: one that holds another
	// address is someone's on purpose (a relay's, a newer master's).
	var exists bool
	var err error
	if arm {
		var w registry.Watch
		exists, w, err = reg.ExistsW(ctx, c.znode)
		if err == nil {
			ws = append(ws, w)
		}
	} else {
		exists, _, err = reg.Exists(ctx, c.znode)
	}
	var w registry.Watch
	if len(ws) > 0 {
		w = reg.AnyOf(ws...)
	}
	if err != nil {
		return w, false
	}
	if exists {
		return w, done
	}
	if err := c.publish(ctx); err != nil {
		if ctx.Err() == nil && !errors.Is(err, errNotCurrentMaster) {
			c.b.Logger().Warn("REPLICATION: the replication address is missing in ZooKeeper and re-publishing it failed", "path", c.znode, "err", err)
		}
		return w, false
	}
	c.b.Logger().Warn("REPLICATION: the replication address was missing in ZooKeeper; published it again", "path", c.znode, "addr", c.Addr())
	return w, false
}

// Addr is the replication listener's address as slaves should dial it.
func (c *shipperComponent) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.advertise
}

// Shipper returns the running shipper (nil before Start or after Close).
func (c *shipperComponent) Shipper() *georeplicator.Shipper {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

func (c *shipperComponent) Close() error {
	c.mu.Lock()
	s, b := c.s, c.b
	c.s = nil
	cancel := c.cancel
	stopGateway := c.stopGateway
	c.stopGateway = nil
	c.mu.Unlock()
	if stopGateway != nil {
		defer stopGateway() // after the shipper closed the shared listener
	}
	if s == nil {
		return nil
	}
	if cancel != nil {
		cancel()
	}
	b.slave.set(nil)
	b.Broker.SetSiteReplicator(nil)
	if c.guard != nil {
		// What waited for a confirmation is answered while the check
		// still applies: stored if confirmed, refused otherwise.
		c.guard.close()
		b.Broker.SetWriteCheck(nil) // the refusals of the role that follows apply
	}
	if b.Registry != nil && c.znode != "" {
		// Only our own: after a handover the new master may already have
		// published its address at the same path.
		ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.Registry.DeleteOwned(ctx, c.znode)
		done()
	}
	return s.Close()
}

// Status is the shipper's lag per slave group.
func (c *shipperComponent) Status() any {
	s := c.Shipper()
	if s == nil {
		return map[string]any{"running": false}
	}
	st := map[string]any{"running": true, "addr": c.Addr(), "slaves": s.Lag()}
	if c.b.Registry != nil && c.znode != "" {
		// Read now, never remembered: status does not report a node that
		// is gone.
		ok, err := c.published(context.Background())
		st["published"] = ok
		if err != nil {
			st["publishedError"] = err.Error()
		}
	}
	return st
}

// listenReplication opens the replication listener. By default it is the
// MetaQ port itself: the broker hands over the connections that start as a
// slave's do (a hello frame, or a TLS ClientHello), which no MetaQ request
// can, so replication needs no port MetaQ did not use (MetaQ users run
// brokers on adjacent ports). [replication] listen, when written, opens a
// listener of its own there instead. shared reports the first case.
func listenReplication(b *Bundle, cfg *config.Server) (ln net.Listener, shared bool, err error) {
	if cfg.Replication.ListenSet {
		addr := cfg.Replication.Listen
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, false, fmt.Errorf("replication: listen on [replication] listen=%s: %w", addr, err)
		}
		return ln, false, nil
	}
	if ln, err = b.Broker.ListenFirstBytes(georeplicator.FirstBytes()...); err != nil {
		return nil, false, fmt.Errorf("replication: on the MetaQ port: %w", err)
	}
	return ln, true, nil
}

// advertiseAddr turns a listen address into one other hosts can dial: an
// unspecified host becomes [system] hostName (or this host's address).
func advertiseAddr(listen string, cfg *config.Server) string {
	fallback := cfg.System.HostName
	if fallback == "" {
		fallback = hostaddr.Local()
	}
	return hostaddr.Dialable(listen, fallback)
}

// ReplicationSecrets loads [replication] secretFile (relative to server.ini's
// directory): the current secret first, then older ones a master still
// accepts. nil when it is not set. `metaq-server check` calls it too.
func ReplicationSecrets(cfg *config.Server) ([][]byte, error) {
	path := cfg.Replication.SecretFile
	if path == "" {
		return nil, nil
	}
	if !filepath.IsAbs(path) && cfg.File != "" {
		path = filepath.Join(filepath.Dir(cfg.File), path)
	}
	secrets, err := georeplicator.LoadSecrets(path)
	if err != nil {
		return nil, fmt.Errorf("replication: [replication] secretFile: %w", err)
	}
	return secrets, nil
}

// syncMasterConfig is autoSyncMasterConfig: the master's server.ini replaces
// ours (atomically) when its bytes differ, then the bundle reloads, so new
// topic sections take effect here too. The master's file carries topics and
// shared settings, not who this slave is: the lines of our file that set a
// host key (config.IsHostKey: host name, ports, data paths, site, gossip,
// replication listener, secrets, TLS files) replace the master's, and the
// site overlay is not touched. Keys that need a restart (shared ones the
// master changed) take effect at the restart (keepRestartSettings).
func syncMasterConfig(ctx context.Context, b *Bundle, data []byte) error {
	cur := b.Config()
	own, err := os.ReadFile(b.opts.ConfigPath)
	if err != nil {
		return fmt.Errorf("replication: sync master config: %w", err)
	}
	data = config.KeepHostKeys(data, own)
	if bytes.Equal(own, data) {
		return nil
	}
	if _, _, err := config.Parse(cur.File, data); err != nil {
		return fmt.Errorf("replication: master's server.ini refused: %w", err)
	}
	path := b.opts.ConfigPath
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("replication: sync master config: %w", err)
	}
	if _, err := b.Reload(ctx); err != nil {
		return err
	}
	b.Logger().Info("REPLICATION: took the master's server.ini", "file", path)
	return nil
}
