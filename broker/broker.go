package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/config"
	"metaq/internal/backoff"
	"metaq/internal/hostaddr"
	"metaq/internal/routines"
)

// closeGrace bounds how long Close waits for requests already read.
const closeGrace = 5 * time.Second

// Sentinel errors.
var (
	// ErrClosed is returned by Start after Close, and by Health once closed.
	ErrClosed = errors.New("broker: closed")
	// ErrNotStarted is returned by Health before Start.
	ErrNotStarted = errors.New("broker: not started")
)

// Broker is one MetaQ-protocol server. Its methods are safe for concurrent use.
type Broker struct {
	opts  Options
	log   *slog.Logger
	store Store

	// divergence moves consumers that read a former master's lost records
	// (divergence.go).
	divergence divergence

	cfg    atomic.Pointer[config.Server]
	topics topicTable                 // policies, registrations, closed partitions
	tcache atomic.Pointer[topicCache] // per-config topic lookups
	closed atomic.Pointer[closedSet]  // partitions closed by an operator
	tx     atomic.Pointer[txHolder]
	stats  *statsCounters
	// puts is the put route's store step (put.go): the store, or the
	// syncMaster in front of it on a synchronous-replication master.
	puts  batchStore
	samsa *syncMaster // nil unless Options.SyncSlave
	// siteRep is the cross-site replication master that topics with
	// minSyncSites wait for (syncsites.go); siteStats their state.
	siteRep   atomic.Pointer[siteRepHolder]
	siteStats siteSyncStats
	gate      writeGate               // client writes refused, by holder
	hold      atomic.Pointer[Hold]    // puts held while mastership is handed over (hold.go)
	gateway   atomic.Pointer[Gateway] // a slave's forwarding of puts to the master (gateway.go)
	// sitesUntil (unix ns) is when puts to minSyncSites topics stop
	// waiting for their slave sites to connect (AwaitSitesFor).
	sitesUntil atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	url   string
	conns map[*conn]struct{}
	// sniffing holds the admitted connections whose first byte is awaited
	// (handoff.go); handoffs the listeners of other protocols by that byte.
	sniffing  map[net.Conn]struct{}
	handoffs  map[byte]*handoffListener
	nextConn  atomic.Uint64
	started   bool
	startedAt time.Time

	limits   connLimits  // open connections, in all and per address
	mem      *byteBudget // the bytes all connections hold (Options.MaxBufferedBytes)
	limitLog *limitLogs

	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	routines routines.Group // every goroutine of the broker
	// diskProbing is set while writes are refused for a full disk (diskFull).
	diskProbing atomic.Bool
	connWG      sync.WaitGroup // connection goroutines only
	closing     atomic.Bool
	done        chan struct{}

	retention *retention

	// gatePassedHook, tests only: StoreValidatedGroup calls it between its
	// gate check and its hand-off to the store.
	gatePassedHook func()
}

type txHolder struct{ h TxHandler }

// New checks opts and builds a Broker. It does not listen yet.
func New(opts Options) (*Broker, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		opts:     opts,
		log:      opts.Logger.With("component", "broker"),
		store:    opts.Store,
		conns:    make(map[*conn]struct{}),
		sniffing: make(map[net.Conn]struct{}),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	b.mem = newByteBudget(opts.MaxBufferedBytes, nil)
	b.mem.onWait = b.relievePressure
	b.mem.recheck = min(max(opts.StallTimeout/2, 10*time.Millisecond), time.Second)
	b.limits = connLimits{max: opts.MaxConnections, perAddr: opts.MaxConnectionsPerAddress,
		share: opts.MaxAddressBufferedBytes, mem: b.mem, onWait: b.relievePressure, recheck: b.mem.recheck}
	b.limitLog = newLimitLogs()
	b.stats = newStatsCounters(opts.Clock)
	b.stats.enabled = b.statTopic
	b.cfg.Store(opts.Config)
	b.topics.init()
	if opts.TxHandler != nil {
		b.tx.Store(&txHolder{opts.TxHandler})
	}
	b.puts = localStore{opts.Store}
	if opts.SyncSlave != "" {
		b.samsa = newSyncMaster(opts.Store, syncMasterOptions{
			Addr:             opts.SyncSlave,
			BrokerID:         opts.Config.System.BrokerID,
			Clock:            opts.Clock,
			Timeout:          opts.SyncTimeout,
			FailureThreshold: opts.SyncFailureThreshold,
			ProbeInterval:    opts.SyncProbeInterval,
			Logger:           b.log,
			OnSlaveLost:      b.leaveRegistry,
			OnSlaveBack:      b.rejoinRegistry,
		})
		b.puts = b.samsa
	}
	if !opts.SyncReceiver {
		// On a samsa slave every put is the master's sync (client writes
		// are refused): replication, which never waits for slave sites.
		ss := siteSyncStore{b: b, next: b.puts}
		if _, ok := b.puts.(groupStore); ok {
			b.puts = siteSyncGroupStore{ss}
		} else {
			b.puts = ss
		}
	}
	b.retention = newRetention(b)
	return b, nil
}

// Listen opens the MetaQ port without serving it: connections wait in the
// kernel's queue until Start. Other protocols that share the port
// (ListenFirstBytes) can be set up in between, knowing the address. Start
// calls it when it was not called.
func (b *Broker) Listen() error {
	if b.closing.Load() {
		return ErrClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listenLocked()
}

func (b *Broker) listenLocked() error {
	if b.ln != nil {
		return nil
	}
	ln := b.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", b.opts.ListenAddr); err != nil {
			return fmt.Errorf("broker: listen %s: %w", b.opts.ListenAddr, err)
		}
		if cc := b.opts.TCPCongestion; cc != "" {
			// The connections it accepts start with it (one switched after
			// accept keeps the pacing BBR set up). A host without it keeps
			// its own.
			switch set, err := setCongestion(ln, cc); {
			case err != nil:
				b.log.Warn("BROKER: cannot set the listener's TCP congestion control; the host's applies",
					"tcpCongestion", cc, "addr", ln.Addr().String(), "err", err)
			case set != "" && set != cc:
				b.log.Warn("BROKER: the listener's TCP congestion control is not permitted to this user (net.ipv4.tcp_allowed_congestion_control); using "+set,
					"tcpCongestion", cc, "set", set, "addr", ln.Addr().String())
			}
		}
	}
	b.ln = ln
	b.url = advertisedURL(b.cfg.Load().System.HostName, ln.Addr())
	return nil
}

// Start listens on Options.ListenAddr or serves Options.Listener (unless
// Listen did), applies topic policies, registers
// the broker and its configured topics, starts the retention schedules and
// serves in background goroutines. It returns once the listener is up (so
// Addr is valid). The broker runs until Close or until ctx ends.
func (b *Broker) Start(ctx context.Context) error {
	if b.closing.Load() {
		return ErrClosed
	}
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return errors.New("broker: already started")
	}
	if err := b.listenLocked(); err != nil {
		b.mu.Unlock()
		return err
	}
	ln := b.ln
	b.started = true
	b.startedAt = b.opts.Clock.Now()
	b.mu.Unlock()

	b.log.Info("BROKER: listening", "addr", ln.Addr().String(), "url", b.url,
		"brokerId", b.cfg.Load().System.BrokerID, "syncReceiver", b.opts.SyncReceiver, "syncSlave", b.opts.SyncSlave)
	b.log.Info("BROKER: limits", "maxConnections", b.opts.MaxConnections, "maxConnectionsPerAddress", b.opts.MaxConnectionsPerAddress,
		"idleTimeout", b.opts.IdleTimeout, "readTimeout", b.opts.ReadTimeout, "writeTimeout", b.opts.WriteTimeout,
		"maxBufferedBytes", b.opts.MaxBufferedBytes, "maxAddressBufferedBytes", b.opts.MaxAddressBufferedBytes,
		"maxConnectionBufferedBytes", b.opts.MaxPendingBytes)

	cfg := b.cfg.Load()
	b.applyPolicies(cfg)
	b.retention.reschedule(cfg)

	// Serve before registering: a client that dials the port (not found
	// through ZooKeeper) is answered even while registration waits for a
	// node held by another session.
	b.routines.Go(func() { b.acceptLoop(ln) })

	b.diskFullAtStart()

	if r := b.opts.Registry; r != nil {
		r.SetURL(b.url)
		if err := r.RegisterBroker(ctx); err != nil {
			b.log.Error("BROKER: register in ZooKeeper failed; retrying", "err", err)
			b.routines.Go(func() { b.registerUntilDone(r) })
		}
		b.registerConfiguredTopics(ctx, cfg)
	}

	// Close waits for every goroutine of b.routines, so the watcher of ctx must not
	// be one of them: context.AfterFunc runs Close on its own goroutine.
	stop := context.AfterFunc(ctx, func() { b.Close() })
	b.routines.Go(func() {
		<-b.ctx.Done()
		stop()
	})
	return nil
}

// registerUntilDone retries a registration that failed at start (the node
// held by a session that has not expired, or by a master this one
// superseded, while ZooKeeper was unreachable) until it succeeds or the
// broker closes: a broker that gave up would serve for the rest of its
// life without being found through ZooKeeper, and a restarted master
// would be followed by no slave that finds it there.
func (b *Broker) registerUntilDone(r Registry) {
	wait := backoff.Backoff{Min: time.Second, Max: 10 * time.Second}
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(wait.Next()):
		}
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		err := r.RegisterBroker(ctx)
		cancel()
		if err == nil {
			b.log.Info("BROKER: registered in ZooKeeper after retrying")
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		b.log.Warn("BROKER: register in ZooKeeper failed; retrying", "err", err)
	}
}

func (b *Broker) acceptLoop(ln net.Listener) {
	wait := backoff.Backoff{Min: 5 * time.Millisecond, Max: time.Second}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if b.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary errors (EMFILE and the like): back off as net/http does.
			delay := wait.Next()
			b.log.Warn("BROKER: accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-b.ctx.Done():
				return
			}
			continue
		}
		wait.Reset()
		ip := remoteIP(nc)
		addrBytes, cause := b.limits.admit(ip)
		if cause != "" {
			b.refuse(nc, cause)
			continue
		}
		b.mu.Lock()
		if b.closing.Load() {
			b.mu.Unlock()
			nc.Close()
			b.limits.done(ip)
			return
		}
		b.sniffing[nc] = struct{}{}
		// Started under b.mu: Close stops the group under b.mu too. The
		// first byte is awaited there, not here: a silent client must not
		// hold up the next one.
		b.routines.Go(func() { b.route(nc, ip, addrBytes) })
		b.mu.Unlock()
	}
}

// Close stops the broker; it is idempotent and safe to call concurrently.
// Order: unregister from ZooKeeper (so clients go elsewhere first), stop
// accepting, stop reading requests and let those already read finish and
// be answered (at most closeGrace), cancel what still runs and close every
// connection, stop the retention schedules and the sync-slave link, wait
// for every goroutine.
// It does not close the store, which the caller owns.
func (b *Broker) Close() error {
	if !b.closing.CompareAndSwap(false, true) {
		<-b.done
		return nil
	}
	defer close(b.done)
	if h := b.holding(); h != nil {
		h.abandon() // what it holds is answered, not stored
	}
	if r := b.opts.Registry; r != nil && b.isStarted() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// The wait after unregistering lets connected clients notice;
		// with none connected there is nothing to wait for.
		var err error
		if u, ok := r.(interface {
			UnregisterAllWhile(context.Context, func() bool) error
		}); ok {
			err = u.UnregisterAllWhile(ctx, b.hasConns)
		} else {
			err = r.UnregisterAll(ctx)
		}
		if err != nil {
			b.log.Warn("BROKER: unregister failed", "err", err)
		}
		cancel()
	}
	b.mu.Lock()
	b.routines.Stop()
	ln := b.ln
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	sniffing := make([]net.Conn, 0, len(b.sniffing))
	for nc := range b.sniffing {
		sniffing = append(sniffing, nc)
	}
	b.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, nc := range sniffing {
		nc.Close() // its first byte is no longer awaited
	}
	// Stop reading requests; those already read finish and are answered
	// (bounded by the grace period), then everything still running is
	// cancelled.
	for _, c := range conns {
		c.stopReading()
	}
	drained := make(chan struct{})
	go func() { b.connWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(closeGrace):
		b.log.Warn("BROKER: requests still running after the grace period; cancelling them", "grace", closeGrace)
	}
	b.cancel()
	for _, c := range conns {
		c.close()
	}
	b.retention.stop()
	if b.samsa != nil {
		b.samsa.close()
	}
	b.routines.Wait()
	b.log.Info("BROKER: closed")
	return nil
}

// hasConns reports whether any client connection is open.
func (b *Broker) hasConns() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns) > 0
}

func (b *Broker) isStarted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

// Addr returns the listening address, or nil before Start.
func (b *Broker) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ln == nil {
		return nil
	}
	return b.ln.Addr()
}

// URL returns meta://host:port as the broker names itself in error texts:
// hostName from the config (the listener's or the first non-loopback
// address when blank) and the port it listens on.
func (b *Broker) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.url
}

// Health is nil while the broker serves and its store accepts appends.
func (b *Broker) Health() error {
	if b.closing.Load() {
		return ErrClosed
	}
	if !b.isStarted() {
		return ErrNotStarted
	}
	if err := b.store.Health(); err != nil {
		return fmt.Errorf("broker: store: %w", err)
	}
	return nil
}

// SetTxHandler installs (or, with nil, removes) the transaction handler.
func (b *Broker) SetTxHandler(h TxHandler) {
	if h == nil {
		b.tx.Store(nil)
		return
	}
	b.tx.Store(&txHolder{h})
}

func (b *Broker) txHandler() TxHandler {
	if h := b.tx.Load(); h != nil {
		return h.h
	}
	return nil
}

// Config returns the configuration in effect (after reloads).
func (b *Broker) Config() *config.Server { return b.cfg.Load() }

func advertisedURL(host string, addr net.Addr) string {
	port := 0
	ip := ""
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = ta.Port
		if !ta.IP.IsUnspecified() {
			ip = ta.IP.String()
		}
	}
	if host == "" {
		host = ip
	}
	if host == "" {
		host = hostaddr.Local()
	}
	return "meta://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// leaveRegistry takes the broker out of ZooKeeper, so that producers go
// elsewhere, while its synchronous slave does not answer.
func (b *Broker) leaveRegistry(ctx context.Context) {
	r := b.opts.Registry
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.UnregisterAll(ctx); err != nil {
		b.log.Warn("SYNC: unregister failed", "err", err)
	}
	b.forgetRegistrations()
}

// rejoinRegistry registers the broker and its topics again once its
// synchronous slave answers.
func (b *Broker) rejoinRegistry(ctx context.Context) {
	r := b.opts.Registry
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.RegisterBroker(ctx); err != nil {
		b.log.Warn("SYNC: register failed", "err", err)
	}
	b.registerConfiguredTopics(ctx, b.cfg.Load())
}
