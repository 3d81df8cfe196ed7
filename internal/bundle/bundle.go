package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/outbox"
	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/configsync"
	"metaq/georeplicator"
	"metaq/internal/routines"
	"metaq/internal/siterole"
)

// Bundle is one running broker bundle. Its exported fields are set by Start
// and read-only afterwards; components use them.
type Bundle struct {
	opts Options
	// commandMode is the mode the command line gave (opts.Mode before the
	// role the data directory recorded replaced it): what this host is
	// configured to run, which no failover changes.
	commandMode Mode
	log         *slog.Logger
	cfg         atomic.Pointer[config.Server]

	// Slave is the async_slave.properties the bundle started with
	// (ModeSlave, or the slave role a former master recorded), else nil.
	// Never changed once Start runs: SlaveConfig is the role at run time.
	Slave *config.Slave
	// Samsa holds samsa_master.properties (ModeSamsa), else nil.
	Samsa *config.Samsa

	// afterRecover, when set (tests), runs after the samsa offset recovery
	// and before the broker starts and registers in ZooKeeper.
	afterRecover func()
	// finishRetry, when set (tests), is every wait of a promotion's
	// finisher between two attempts (runFinishPromotion), instead of 1 s
	// doubling to 10 s.
	finishRetry time.Duration
	// unfinishedSeen is since when the newest generation seen has had no
	// master (unfinishedFacts).
	unfinishedSeen unfinishedSince

	// Store is the storage engine.
	Store *store.Store
	// Broker serves the MetaQ protocol.
	Broker *broker.Broker
	// Registry is the ZooKeeper registry; nil when zk.zkEnable=false or in ModeGregor.
	Registry *registry.Registry
	// Admin is the admin HTTP endpoint; nil when disabled.
	Admin *Admin

	// formerMaster: started as a slave because the data directory says
	// this master was demoted (applyPersistedRole).
	formerMaster bool
	// supersededBy is the generation a former master found in ZooKeeper
	// when it started as the slave its command line says
	// (applyPersistedRole), 0 otherwise. Set before anything starts. It
	// is gossiped as the generation this slave follows: when the raise of
	// it is given back, no ensemble holds it and it is the only trace that
	// the master of the generation before is gone (seed 944185).
	supersededBy uint64

	// roleWatchers are the goroutines that keep state following the current
	// role (startRoleWatchers); stopRoleWatchers ends them, Close calls it.
	roleWatchers routines.Group
	// gatewayLinks counts the slave sites' gateway links served (gateway.go).
	gatewayLinks atomic.Int64
	// gatewayLinkSet supersedes a slave gateway's older links when it
	// opens a newer one (georeplicator.GatewayLinks; gateway.go).
	gatewayLinkSet georeplicator.GatewayLinks
	// outbox is the gateway's store-and-forward outbox, or nil; closed
	// after the broker (gateway.go).
	outbox           *outbox.Outbox
	stopRoleWatchers context.CancelFunc

	comps     []Component      // set in Start before any reader runs; never changed after
	nStarted  int              // comps[:nStarted] started; Start and Close only
	slave     slaveStatsHolder // `stats slave`, filled by the replication component
	msgs      msgCounter       // messages held per partition, for the dashboard
	failover  failoverState    // the role and what runs for it; replication identity
	started   time.Time
	reloadMu  sync.Mutex // one reload at a time
	onStarted func()     // set by OnStarted, called by Run
	closing   atomic.Bool
	closeErr  error
	closed    chan struct{}
}

// New loads the configuration (and the mode's properties file) and checks
// it. It opens nothing yet.
func New(opts Options) (*Bundle, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	b := &Bundle{opts: opts, commandMode: opts.Mode, log: opts.Logger, closed: make(chan struct{})}
	b.failover.rejoinWake = make(chan struct{}, 1)
	b.failover.role = newRoleOwner(func() (*shipperComponent, *receiverComponent) {
		return compOf[*shipperComponent](b), compOf[*receiverComponent](b)
	})
	b.slave.role = b.failover.role
	cfg, warnings, err := config.Load(opts.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	for _, w := range warnings {
		b.log.Warn("CONFIG: " + w.String())
	}
	if err := config.CheckUnknown(warnings); err != nil && !opts.AllowUnknown && !configsync.AppliedHere(opts.ConfigPath, cfg.Raw) {
		return nil, fmt.Errorf("bundle: %w\n(fix the file, or start with -allow-unknown to run it anyway)", err)
	}
	cfg.System.MoveData(opts.DataPath)
	if opts.Adjust != nil {
		opts.Adjust(cfg)
	}
	b.cfg.Store(cfg)
	switch opts.Mode {
	case ModeSlave:
		sl, warnings, err := config.LoadSlave(opts.PluginPath)
		if err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		for _, w := range warnings {
			b.log.Warn("CONFIG: " + w.String())
		}
		if err := config.CheckUnknown(warnings); err != nil && !opts.AllowUnknown {
			return nil, fmt.Errorf("bundle: %w\n(fix the file, or start with -allow-unknown to run it anyway)", err)
		}
		b.Slave = sl
	case ModeSamsa:
		sa, warnings, err := config.LoadSamsa(opts.PluginPath)
		if err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		for _, w := range warnings {
			b.log.Warn("CONFIG: " + w.String())
		}
		if err := config.CheckUnknown(warnings); err != nil && !opts.AllowUnknown {
			return nil, fmt.Errorf("bundle: %w\n(fix the file, or start with -allow-unknown to run it anyway)", err)
		}
		b.Samsa = sa
	}
	return b, nil
}

// Config returns the configuration in effect (replaced by Reload).
func (b *Bundle) Config() *config.Server { return b.cfg.Load() }

// Mode returns the role the bundle started in (after the role its data
// directory recorded, see applyPersistedRole); SlaveConfig tells whether
// it is a slave now.
func (b *Bundle) Mode() Mode { return b.opts.Mode }

// SlaveConfig is the slave configuration in effect now: nil while this
// bundle is master (also after a promotion), the demotion's after one.
func (b *Bundle) SlaveConfig() *config.Slave { return b.failover.role.slaveConfig() }

// Logger returns the bundle's logger, for components.
func (b *Bundle) Logger() *slog.Logger { return b.log }

// zkEnabled reports whether this bundle registers in ZooKeeper: a gregor
// slave never does (see Samsa and gregor in broker/wire/doc.go).
func (b *Bundle) zkEnabled() bool {
	return b.Config().ZooKeeper.Enable && b.opts.Mode != ModeGregor
}

// Start opens the store, connects the registry, starts the broker, the admin
// endpoint and the components. On error everything started is closed again.
func (b *Bundle) Start(ctx context.Context) (err error) {
	b.started = time.Now()
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if err = b.waitForEnsemble(ctx); err != nil {
		return err
	}
	if err = b.applyPersistedRole(); err != nil {
		return err
	}
	cfg := b.Config()
	b.failover.role.start(b.startRole(), b.Slave)

	b.Store, err = store.Open(store.Options{
		Dir:           cfg.System.DataPath,
		SegmentBytes:  cfg.System.MaxSegmentSize,
		DefaultPolicy: systemPolicy(cfg),
		BrokerID:      cfg.System.BrokerID,
		Logger:        b.log.With("component", "store"),
	})
	if err != nil {
		return fmt.Errorf("bundle: open store %s: %w", cfg.System.DataPath, err)
	}

	var reg broker.Registry
	if b.zkEnabled() {
		ro := registry.Options{
			Connect:           cfg.ZooKeeper.Connect,
			Root:              cfg.ZooKeeper.Root,
			SessionTimeout:    cfg.ZooKeeper.SessionTimeout,
			ConnectionTimeout: cfg.ZooKeeper.ConnectionTimeout,
			SyncTime:          cfg.ZooKeeper.SyncTime,
			BrokerID:          cfg.System.BrokerID,
			Site:              cfg.Site.Name,
			Host:              cfg.System.HostName,
			Port:              cfg.System.ServerPort,
			ConfigChecksum:    cfg.Checksum,
			Logger:            b.log,
			Dialer:            b.opts.ZooKeeperDialer,
			// In the data directory, which belongs to this broker alone.
			SessionFile: filepath.Join(cfg.System.DataPath, "zookeeper.session"),
			MasterGuard: b.guardMaster,
			// The ensemble answered waitForEnsemble a moment ago; if it
			// went again, wait for it here too rather than exit.
			KeepWaiting: true,
		}
		if b.Slave != nil {
			ro.Slave, ro.SlaveID = true, b.Slave.SlaveID
		}
		b.Registry, err = registry.New(ctx, ro)
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		reg = b.Registry
	} else {
		b.log.Info("BUNDLE: ZooKeeper disabled, running standalone", "mode", b.opts.Mode.String())
	}

	if err = b.recoverSamsaOffsets(ctx); err != nil {
		return err
	}

	bo := broker.Options{
		Config:       cfg,
		Store:        b.Store,
		Logger:       b.log,
		Registry:     reg,
		ListenAddr:   b.opts.ListenAddr,
		SyncReceiver: b.opts.Mode == ModeGregor,
		SlaveStats:   b.slaveStats(),
	}
	if b.Samsa != nil {
		bo.SyncSlave = b.Samsa.Slave
		bo.SyncTimeout = b.Samsa.SyncTimeout
		bo.SyncFailureThreshold = b.Samsa.SyncFailureThreshold
		bo.SyncProbeInterval = b.Samsa.SyncProbeInterval
	}
	b.Broker, err = broker.New(bo)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	// A replica refuses client writes before anything can reach the broker.
	b.refuseReplicaWrites(ctx)
	if err = b.startGateway(); err != nil {
		return err
	}

	// Set once, before anything (the admin endpoint, the dashboard's
	// sampler) can read it; components report "not running" until started.
	b.comps = orderComponents(append(builtinComponents(b), b.opts.Components...))

	// The port is bound first (the replication stream shares it, and
	// publishes its address), but served only once the components that
	// answer commands or publish what clients and slaves read next to the
	// broker's znodes have started: a client connecting the moment it can
	// waits in the kernel's queue and finds them ready.
	if err = b.Broker.Listen(); err != nil {
		return startBrokerErr(err)
	}
	for _, c := range b.comps {
		if !startsBeforeServing(c) {
			break
		}
		if err = b.startComponent(ctx, c); err != nil {
			return err
		}
	}
	if err = b.Broker.Start(ctx); err != nil {
		return startBrokerErr(err)
	}

	adminAddr := cfg.Site.AdminAddr
	if b.opts.AdminAddr != "" {
		adminAddr = b.opts.AdminAddr
	}
	if adminAddr != "off" {
		b.Admin, err = startAdmin(b, cfg.System.AdminSocket(), adminAddr, cfg.Site.Token)
		if err != nil {
			return err
		}
	}

	for _, c := range b.comps[b.nStarted:] {
		if err = b.startComponent(ctx, c); err != nil {
			return err
		}
	}
	b.startRejoin()
	b.startRoleWatchers()
	b.log.Info("BUNDLE: started", "mode", b.opts.Mode.String(), "broker", cfg.System.BrokerID,
		"addr", addrString(b.Broker), "admin", b.AdminAddr(), "zk", b.Registry != nil)
	return nil
}

// waitForEnsemble waits, before anything is opened or served, until this
// site's ZooKeeper ensemble gives a session (with zk.zkEnable=true): the
// role a bundle starts in, and whether a master is still current, are read
// there (applyPersistedRole). It warns once zk.zkConnectionTimeoutMs has
// passed and then at growing intervals, and returns ctx's error when ctx
// ends first (Run cancels it on SIGTERM or SIGINT).
func (b *Bundle) waitForEnsemble(ctx context.Context) error {
	if !b.zkEnabled() {
		return nil
	}
	cfg := b.Config()
	began := time.Now()
	r, err := registry.New(ctx, registry.Options{Connect: cfg.ZooKeeper.Connect, Root: cfg.ZooKeeper.Root,
		SessionTimeout: cfg.ZooKeeper.SessionTimeout, ConnectionTimeout: cfg.ZooKeeper.ConnectionTimeout,
		Dialer: b.opts.ZooKeeperDialer, Logger: b.log, KeepWaiting: true})
	if err != nil {
		return fmt.Errorf("bundle: wait for ZooKeeper %s before starting: %w", cfg.ZooKeeper.Connect, err)
	}
	r.Close()
	if waited := time.Since(began); waited >= cfg.ZooKeeper.ConnectionTimeout {
		b.log.Info("BUNDLE: ZooKeeper answers; starting", "zk", cfg.ZooKeeper.Connect, "waited", waited.Round(time.Second))
	}
	return nil
}

// startRoleWatchers starts the goroutines that make state the bundle set up at
// start follow the current role after a failover: the replica's put
// refusal names the master followed now (followMasterInRefusal), the
// NATS record is named after the role now (followRoleInNATSRecord) and the
// write gateway leaves a replaced master at once (followMasterInGateway).
func (b *Bundle) startRoleWatchers() {
	ctx, cancel := context.WithCancel(context.Background())
	b.stopRoleWatchers = cancel
	b.roleWatchers.Go(func() { b.followMasterInRefusal(ctx) })
	b.roleWatchers.Go(func() { b.serveGatewayLinks(ctx) })
	if b.Registry != nil {
		b.roleWatchers.Go(func() { b.followRoleInNATSRecord(ctx) })
		if b.opts.Mode != ModeGregor {
			b.roleWatchers.Go(func() { b.followMasterInGateway(ctx) })
		}
	}
}

// startRole is the role the bundle starts in: its mode after the role its
// data directory recorded, at the generation recorded there.
func (b *Bundle) startRole() siterole.State {
	st := siterole.State{Role: siterole.Master, Why: "started as master"}
	if b.Slave != nil {
		st = siterole.State{Role: siterole.Slave, SlaveID: b.Slave.SlaveID, SlaveGroup: b.Slave.SlaveGroup,
			Master: b.Slave.MasterAddress, Why: "started as slave"}
		if b.formerMaster {
			st.Why = "started as the slave this former master became at run time"
		}
	}
	if id, err := existingIdentity(b.Config().System.DataPath); err == nil && id != nil {
		st.Generation = id.Generation()
		if r := id.Role(); r != nil && b.formerMaster {
			st.Generation = max(st.Generation, r.Generation) // the generation it follows
		}
	}
	return st
}

func startBrokerErr(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("bundle: start broker: %w (another bundle on this host may hold it as its serverPort+3 or +4, for [gossip] or [nats] with no address of their own: set [gossip] bind and [nats] embeddedListen, or give such brokers on one host serverPorts 5 apart)", err)
	}
	return fmt.Errorf("bundle: start broker: %w", err)
}

func (b *Bundle) startComponent(ctx context.Context, c Component) error {
	if err := c.Start(ctx, b); err != nil {
		return fmt.Errorf("bundle: start %s: %w", c.Name(), err)
	}
	b.nStarted++ // only the started ones are closed
	b.log.Info("BUNDLE: started component", "name", c.Name())
	return nil
}

func addrString(br *broker.Broker) string {
	if a := br.Addr(); a != nil {
		return a.String()
	}
	return ""
}

// AdminAddr returns the admin endpoint's TCP address, "" when it is off or
// serves only its unix socket (AdminSocket).
func (b *Bundle) AdminAddr() string {
	if b.Admin == nil {
		return ""
	}
	return b.Admin.Addr()
}

// AdminSocket returns the path of the admin endpoint's unix socket, "" when
// the endpoint is off.
func (b *Bundle) AdminSocket() string {
	if b.Admin == nil {
		return ""
	}
	return b.Admin.Socket()
}

// Close stops the bundle cleanly (idempotent): components in reverse order,
// the admin endpoint, then the broker (which unregisters from ZooKeeper and
// waits zkSyncTimeMs while still serving), the registry session and the store.
func (b *Bundle) Close() error {
	if !b.closing.CompareAndSwap(false, true) {
		<-b.closed
		return b.closeErr
	}
	defer close(b.closed)
	var errs []error
	if b.stopRoleWatchers != nil {
		b.stopRoleWatchers()
		b.roleWatchers.Stop()
		b.roleWatchers.Wait()
	}
	if err := b.closeFailover(); err != nil {
		errs = append(errs, fmt.Errorf("close promoted shipper: %w", err))
	}
	for i := b.nStarted - 1; i >= 0; i-- {
		if err := b.comps[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", b.comps[i].Name(), err))
		}
	}
	if b.Admin != nil {
		if err := b.Admin.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.Broker != nil {
		if err := b.Broker.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.Registry != nil {
		b.Registry.Close()
	}
	if b.outbox != nil {
		if err := b.outbox.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.Store != nil {
		if err := b.Store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	b.closeErr = errors.Join(errs...)
	if b.closeErr != nil {
		b.closeErr = fmt.Errorf("bundle: close: %w", b.closeErr)
	}
	b.log.Info("BUNDLE: stopped", "err", b.closeErr)
	return b.closeErr
}

// Reload re-reads server.ini and re-applies its [topic=...] sections (see
// Reload in broker/wire/doc.go): the broker accepts new topics and registers new and changed ones in
// ZooKeeper at once, and rewrites master_config_checksum. Changes outside the
// topic sections are reported in RestartKeys and not applied.
func (b *Bundle) Reload(ctx context.Context) (config.Changes, error) {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	old := b.Config()
	cfg, warnings, err := config.Load(b.opts.ConfigPath)
	if err != nil {
		return config.Changes{}, fmt.Errorf("bundle: reload: %w", err)
	}
	for _, w := range warnings {
		b.log.Warn("CONFIG: " + w.String())
	}
	if b.opts.Adjust != nil {
		b.opts.Adjust(cfg)
	}
	// The broker registers new and changed topics and the new checksum.
	changes, err := b.Broker.Reload(cfg)
	if err != nil {
		return changes, fmt.Errorf("bundle: reload: %w", err)
	}
	cfg = keepRestartSettings(old, cfg)
	b.cfg.Store(cfg)
	// A gateway started after this (a demotion) reads the new bound from
	// Config(); the broker's Reload gave the running one the new bound.
	for _, c := range b.comps {
		if r, ok := c.(Reloader); ok {
			if err := r.Reload(ctx, cfg, changes); err != nil {
				b.log.Error("BUNDLE: component reload failed", "name", c.Name(), "err", err)
			}
		}
	}
	if changes.NeedsRestart() {
		b.log.Warn("BUNDLE: reload: these keys need a restart", "keys", changes.RestartKeys)
	}
	b.log.Info("BUNDLE: reloaded "+cfg.File, "changes", changes.String(), "checksum", cfg.Checksum)
	return changes, nil
}

// keepRestartSettings returns the configuration a reload runs: next's topic
// sections, file and checksum, with every section whose keys need a restart
// (config.Changes.RestartKeys) as it runs now. The components read their
// listeners, data directory, site name, gossip, replication and NATS
// settings from Config() at any time (a component started after the reload,
// a demotion, a promotion): they must not see values the process has not
// started with. The file on disk takes effect at the restart.
func keepRestartSettings(running, next *config.Server) *config.Server {
	eff := *next
	eff.System = running.System
	eff.ZooKeeper = running.ZooKeeper
	eff.Site = running.Site
	// The one [site] key a reload applies (config.Changes.AppliedKeys).
	eff.Site.ForwardMaxInFlightBytes = next.Site.ForwardMaxInFlightBytes
	eff.Gossip = running.Gossip
	eff.NATS = running.NATS
	eff.Replication = running.Replication
	eff.Limits = running.Limits
	return &eff
}

// Status is the admin /status answer.
type Status struct {
	PID            int    `json:"pid"`
	Mode           string `json:"mode"`
	BrokerID       int    `json:"brokerId"`
	SlaveID        int    `json:"slaveId"`
	Addr           string `json:"addr"`
	URL            string `json:"url"`
	ConfigFile     string `json:"configFile"`
	ConfigChecksum uint32 `json:"configChecksum"`
	Uptime         string `json:"uptime"`
	Healthy        bool   `json:"healthy"`
	Health         string `json:"health,omitempty"`
	// Degraded names the ranges of records lost to disk damage (the store
	// serves everything else); Damaged lists them.
	Degraded string         `json:"degraded,omitempty"`
	Damaged  []store.Damage `json:"damaged,omitempty"`
	// Scrub is the store's background check of old segments.
	Scrub *store.ScrubStatus `json:"scrub,omitempty"`
	// IndexPending is the segment index the store holds in memory because
	// the disk had no room to write it (a start-up or a roll on a full
	// disk); it is written once there is room.
	IndexPending *store.IndexPending `json:"indexPending,omitempty"`
	ZooKeeper    *ZKStatus           `json:"zookeeper,omitempty"`
	Components   map[string]any      `json:"components,omitempty"`
	// PendingPromotion is a promotion that failed after it raised the
	// generation and is being finished (promote_finish.go).
	PendingPromotion *PendingPromotion `json:"pendingPromotion,omitempty"`
	// PromotionGivenUp is the last promotion whose finisher gave up after
	// its bound (promote_finish.go).
	PromotionGivenUp *GivenUpPromotion `json:"promotionGivenUp,omitempty"`
	// SteppedDown says why a master that saw a newer generation reports
	// mode slave before its demotion is done ("" otherwise).
	SteppedDown string `json:"steppedDown,omitempty"`
}

// ZKStatus is the registry part of Status.
type ZKStatus struct {
	Session string `json:"session"`
	// Connected says the registry has its ZooKeeper session now; without
	// it BrokerRegistered is false (the node cannot be confirmed).
	Connected        bool     `json:"connected"`
	BrokerRegistered bool     `json:"brokerRegistered"`
	Topics           []string `json:"topics"`
	// Problem says why the broker is not registered when the registry gave
	// up (a slave's node held by another live session).
	Problem string `json:"problem,omitempty"`
}

// Status reports the bundle's state.
func (b *Bundle) Status() Status {
	cfg := b.Config()
	s := Status{
		PID:            os.Getpid(),
		Mode:           b.opts.Mode.String(),
		BrokerID:       cfg.System.BrokerID,
		SlaveID:        -1,
		ConfigFile:     cfg.File,
		ConfigChecksum: cfg.Checksum,
		Uptime:         time.Since(b.started).Round(time.Second).String(),
		Healthy:        true,
	}
	if sl := b.SlaveConfig(); sl != nil {
		s.SlaveID = sl.SlaveID
	}
	s.PendingPromotion = b.pendingPromotion()
	s.PromotionGivenUp = b.promotionGivenUp()
	if b.opts.Mode == ModeMaster || b.opts.Mode == ModeSlave {
		// The role now: a promotion or a demotion at run time changes it.
		// A master that stepped down for a newer generation acknowledges
		// nothing and becomes a slave by itself (runRejoin): it says slave
		// at once, or it and the new master both say master while its
		// demotion waits, for as long as its ZooKeeper cannot be written.
		s.Mode = ModeMaster.String()
		switch r := b.Role(); {
		case r.Role == siterole.Slave:
			s.Mode = ModeSlave.String()
		case r.SteppedDown:
			s.Mode = ModeSlave.String()
			s.SteppedDown = fmt.Sprintf("this master of generation %d stepped down (%s); it acknowledges nothing and becomes a slave of the new master by itself", r.Generation, r.Why)
		}
	}
	if b.Broker != nil {
		s.Addr = addrString(b.Broker)
		s.URL = b.Broker.URL()
		if err := b.Broker.Health(); err != nil {
			s.Healthy, s.Health = false, err.Error()
		}
	}
	if b.Store != nil {
		if err := b.Store.Degraded(); err != nil {
			s.Degraded, s.Damaged = err.Error(), b.Store.Damaged()
		}
		sc := b.Store.Scrub()
		s.Scrub = &sc
		s.IndexPending = b.Store.IndexPending()
	}
	if b.Registry != nil {
		g := b.Registry.Registration()
		reg, topics := b.Registry.Registered()
		connected := b.Registry.Connected()
		switch {
		case reg && !connected:
			// No session: the node cannot be confirmed, and a read would
			// only wait out its bound. Status answers at once: a site
			// whose ZooKeeper was down answered /status only after that
			// bound, which a caller with a short timeout took for a site
			// that answers nothing.
			reg = false
		case reg:
			// Read now: status never reports a node that is gone.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			owned, err := b.Registry.Owns(ctx, b.Registry.Paths().Broker(g.BrokerID, g.SlaveID))
			cancel()
			reg = owned && err == nil
		}
		s.ZooKeeper = &ZKStatus{Session: fmt.Sprintf("0x%x", b.Registry.SessionID()), Connected: connected, BrokerRegistered: reg, Topics: topics, Problem: g.Problem}
	}
	s.Components = map[string]any{}
	for _, c := range b.comps {
		if r, ok := c.(StatusReporter); ok {
			s.Components[c.Name()] = r.Status()
		}
	}
	// A role change at run time starts a shipper or a receiver that the
	// role owner holds, and stops the one the bundle started with: report
	// the one that runs, under its usual name, and not the stopped one.
	if sc, rc, _ := b.failover.role.runtime(); sc != nil {
		s.Components[compShipper] = sc.Status()
		delete(s.Components, compReceiver)
	} else if rc != nil {
		s.Components[compReceiver] = rc.Status()
		delete(s.Components, compShipper)
	}
	if len(s.Components) == 0 {
		s.Components = nil
	}
	return s
}

// SlaveStatus answers slave-status: the async-slave component's report, or
// an error when this bundle is not an async slave.
func (b *Bundle) SlaveStatus() (any, error) {
	if b.promotedShipper() != nil {
		return nil, errors.New("bundle: not an async slave: this site was promoted to master")
	}
	if rc := b.demotedReceiver(); rc != nil {
		return rc.SlaveStatus(), nil
	}
	for _, c := range b.comps {
		if r, ok := c.(SlaveStatusReporter); ok {
			return r.SlaveStatus(), nil
		}
	}
	if !b.failover.role.isSlave() {
		return nil, errors.New("bundle: not an async slave")
	}
	return nil, errors.New("bundle: async-slave replication is not running in this build")
}

func systemPolicy(cfg *config.Server) store.Policy {
	return store.Policy{
		UnflushThreshold: cfg.System.UnflushThreshold,
		UnflushInterval:  cfg.System.UnflushInterval,
		MaxAge:           cfg.System.DeletePolicy.MaxAge,
		Archive:          cfg.System.DeletePolicy.Name == "archive",
		ArchiveCompress:  cfg.System.DeletePolicy.Compress,
	}
}
