package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"metaq/internal/portprobe"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("registry: closed")
	// ErrNoNode is returned when a node read or deleted does not exist.
	ErrNoNode = errors.New("registry: node does not exist")
	// ErrNodeExists is returned by CreateEphemeral when the node exists.
	ErrNodeExists = errors.New("registry: node already exists")
	// ErrNoSession is returned by New when no ZooKeeper session could be
	// established within the connection timeout.
	ErrNoSession = errors.New("registry: no ZooKeeper session")
	// ErrBrokerNodeHeld is returned by RegisterBroker when the broker's
	// master/slave node belongs to another live session for longer than the
	// session timeout: another process runs with the same brokerId (and slaveId).
	ErrBrokerNodeHeld = errors.New("registry: broker node held by another session")
	// errSlaveNodeHeld marks a re-registration that gave up on a slave
	// node another live session holds (resyncLoop).
	errSlaveNodeHeld = errors.New("registry: slave node held by another live session")
	// ErrNotCurrentMaster is what Options.MasterGuard wraps when this
	// broker is no longer its brokerId's current master: it writes no
	// master entry, and a new session does not retry it.
	ErrNotCurrentMaster = errors.New("registry: not the current master of this brokerId")
)

// Options configure a Registry. Zero values mean MetaQ's defaults for the [zookeeper] keys.
type Options struct {
	// Connect is zk.zkConnect: comma-separated host:port list, optionally
	// followed by a chroot ("/x") which is folded into Root. Default localhost:2181.
	Connect string
	// Root is zk.zkRoot, default /meta; normalised by NormalizeRoot.
	Root string
	// SessionTimeout is zk.zkSessionTimeoutMs, default 30s.
	SessionTimeout time.Duration
	// ConnectionTimeout is zk.zkConnectionTimeoutMs, default 30s: how long New
	// waits for the first session (with KeepWaiting, how long before it
	// first warns that it is still waiting).
	ConnectionTimeout time.Duration
	// KeepWaiting makes New wait for the first session until its context
	// ends instead of failing after ConnectionTimeout: a broker whose
	// ensemble is down when it starts waits for it. It warns once
	// ConnectionTimeout has passed and then at doubling intervals (at most
	// maxWaitWarn apart), naming the ensemble and how long it has waited.
	// A connect string whose every server answers MetaQ's protocol (a
	// configuration mistake, not an outage) still fails at once.
	KeepWaiting bool
	// SyncTime is zk.zkSyncTimeMs, default 5s: UnregisterAll waits this long
	// after deleting so that clients notice before the broker stops serving.
	SyncTime time.Duration

	// BrokerID is [system] brokerId.
	BrokerID int
	// Site is this broker's site ([site] name), recorded as the raiser of a
	// generation it raises (GenerationRaiser); "" records none.
	Site string
	// Slave makes this registration an async slave's (ids/<id>/slave<SlaveID>,
	// topic nodes <id>-s<SlaveID>); false registers a master.
	Slave bool
	// SlaveID is the async slave's slaveId (>= 0); ignored unless Slave.
	SlaveID int
	// Host is the advertised host ([system] hostName); "" = hostaddr.Local().
	Host string
	// Port is [system] serverPort, advertised in meta://host:port.
	Port int
	// ConfigChecksum is the unsigned CRC32 of server.ini, written by a master
	// into master_config_checksum. SetConfigChecksum changes it on reload.
	ConfigChecksum uint32

	// Logger receives the registry's and the ZooKeeper library's logs; nil discards.
	Logger *slog.Logger
	// MasterGuard, when set, is called before a master writes its master
	// node or its topics' master entries (at registration, after a new
	// session, at BecomeMaster and BecomeMasterFrom); an error writes nothing. It wraps
	// ErrNotCurrentMaster when another site's master took over (a newer
	// generation), which is not retried after a new session. It may call
	// the registry's reads.
	MasterGuard func(ctx context.Context) error
	// Dialer replaces net.DialTimeout for the ZooKeeper connection (proxies, tests).
	Dialer func(network, address string, timeout time.Duration) (net.Conn, error)

	// SessionFile, when set, records the ids of this broker's ZooKeeper
	// sessions. It must live in a directory only this broker uses (its data
	// directory). A broker node still held by one of those sessions with
	// this broker's own url was left by its previous process (killed before
	// its session expired): RegisterBroker replaces it instead of waiting
	// for the session timeout.
	SessionFile string
}

func (o *Options) validate() error {
	if o.Connect == "" {
		o.Connect = "localhost:2181"
	}
	// A chroot suffix on the connect string ("h:2181/x") is what ZkClient
	// honours; go-zookeeper does not, so fold it into the root.
	if i := strings.IndexByte(o.Connect, '/'); i >= 0 {
		chroot := o.Connect[i:]
		o.Connect = o.Connect[:i]
		o.Root = NormalizeRoot(chroot) + NormalizeRoot(o.Root)
	} else {
		o.Root = NormalizeRoot(o.Root)
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Second
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = 30 * time.Second
	}
	if o.SyncTime < 0 {
		return errors.New("registry: negative zkSyncTimeMs")
	}
	if o.BrokerID < 0 || o.BrokerID > 1023 {
		return fmt.Errorf("registry: brokerId %d out of range 0..1023", o.BrokerID)
	}
	if !o.Slave {
		o.SlaveID = -1
	} else if o.SlaveID < 0 {
		return fmt.Errorf("registry: slaveId %d must be >= 0", o.SlaveID)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Registry is one ZooKeeper session plus what this broker registered in it.
// All methods are safe for concurrent use. Calls that talk to ZooKeeper take
// a context; when it ends first they return its error (the request itself
// finishes or fails in the background).
type Registry struct {
	opts  Options
	paths Paths
	log   *slog.Logger
	conn  *zk.Conn

	// Lock order: regMu before urlMu (registerBrokerLocked reads URL);
	// sessionMu is never held with another lock (zkLogger.mu,
	// firstConns.mu and handshakeConn.mu are leaves too).
	//
	// regMu serialises every registration write, including re-registration
	// after a session expiry, so a reload and a resync never interleave.
	regMu sync.Mutex
	state regState // guarded by regMu
	// written is state as of the last release of regMu (unlockReg): what
	// Registration and Registered report without waiting for a write that
	// may sit on an unreachable ensemble for as long as its context allows
	// (status and the master's mirror must answer meanwhile).
	written atomic.Pointer[regSnapshot]

	urlMu sync.Mutex
	url   string // set by SetURL

	sessionMu    sync.Mutex
	sessionID    int64         // last session we saw established
	newSession   []func()      // OnNewSession callbacks
	firstSession chan struct{} // closed at the first StateHasSession
	firstOnce    sync.Once
	regained     chan struct{} // closed and replaced at every StateHasSession (SessionRegained)

	// previous are this broker's earlier sessions, read from SessionFile.
	previous map[int64]bool

	// lost is when the connection was last lost while a session was held
	// (nanoseconds since born on the monotonic clock, so a step of the
	// wall clock cannot shorten or stretch the wait; drainEvents), 0 while
	// connected, lostExpired once ZooKeeper said the session expired
	// (SessionMayBeAlive).
	lost atomic.Int64
	born time.Time

	resync  chan struct{} // buffered 1: a new session needs re-registration
	quit    chan struct{}
	wg      sync.WaitGroup
	closing atomic.Bool
}

// regState is what this process registered, replayed after a new session.
type regState struct {
	broker   bool // RegisterBroker succeeded and UnregisterAll was not called since
	checksum uint32
	// problem is why the broker node is not written although broker is
	// set (resyncLoop gave up on it), "" once it is written again.
	problem string
	topics  map[string]topicReg
	// keptPub: topic -> this broker's slave entry under topics-pub, left in
	// place when it became master (switchRoleLocked) for the old master,
	// which takes its slaveId, or created by a mirror for the old master
	// (MasterMirror.LeaveSlave); deleted with the topic's other entries.
	keptPub map[string]string
	// borrowed: this slave's topics-pub entries that another session's
	// node holds, each watched until it is this broker's (borrowLocked).
	borrowed map[string]bool
	// session is the ZooKeeper session the nodes above were written in.
	session int64
	// mirrorGen is the generation a Mirror wrote or found (never lowered);
	// mirrorRepl: a Mirror may have written the replication node.
	mirrorGen  uint64
	mirrorRepl bool
	// unwritten: a role switch (switchRoleLocked) took the new role but
	// could not write its nodes; a BecomeSlave retry writes them.
	unwritten bool
}

type topicReg struct {
	numPartitions            int
	acceptPublish, acceptSub bool
}

// regSnapshot is the part of regState that Registration reports.
type regSnapshot struct {
	slaveID  int // the role's slaveId: a role switch changes opts.SlaveID under regMu
	broker   bool
	checksum uint32
	topics   map[string]topicReg
	problem  string
}

// unlockReg publishes the registration as it now stands and releases
// regMu; every holder of regMu releases it through here.
func (r *Registry) unlockReg() {
	r.written.Store(&regSnapshot{slaveID: r.opts.SlaveID, broker: r.state.broker, checksum: r.state.checksum,
		topics: maps.Clone(r.state.topics), problem: r.state.problem})
	r.regMu.Unlock()
}

// maxWaitWarn is the longest interval between two of New's warnings that
// it still waits for the first session (Options.KeepWaiting).
const maxWaitWarn = 5 * time.Minute

// New connects to ZooKeeper and waits for the first session, at most
// opts.ConnectionTimeout (the library itself would retry forever), or,
// with opts.KeepWaiting, until ctx ends. It registers nothing: call
// RegisterBroker and RegisterTopic.
func New(ctx context.Context, opts Options) (*Registry, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	r := &Registry{
		opts:         opts,
		paths:        Paths{Root: opts.Root},
		log:          opts.Logger.With("component", "registry"),
		firstSession: make(chan struct{}),
		regained:     make(chan struct{}),
		resync:       make(chan struct{}, 1),
		quit:         make(chan struct{}),
		born:         time.Now(),
	}
	r.state.checksum = opts.ConfigChecksum
	r.state.topics = make(map[string]topicReg)
	r.written.Store(&regSnapshot{slaveID: opts.SlaveID})
	r.previous = readSessionFile(opts.SessionFile, r.log)

	servers := strings.Split(opts.Connect, ",")
	dialer := opts.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	// Until the first session, remember the connections the library opens:
	// a New that gives up closes them, instead of waiting for the library's
	// read timeout on a server that never answers its handshake. Every
	// connection's handshake is bounded as the Java client bounds it.
	var first firstConns
	bounded := boundHandshake(dialer, handshakeBound(opts.SessionTimeout, len(servers)))
	conn, events, err := zk.Connect(servers, opts.SessionTimeout,
		zk.WithLogger(&zkLogger{log: r.log}), zk.WithLogInfo(false), zk.WithDialer(first.wrap(bounded)))
	if err != nil {
		return nil, fmt.Errorf("registry: connect %s: %w", opts.Connect, err)
	}
	r.conn = conn
	r.wg.Add(2)
	go r.drainEvents(events)
	go r.resyncLoop()

	began := time.Now()
	timer := time.NewTimer(opts.ConnectionTimeout)
	defer timer.Stop()
	nextWarn := opts.ConnectionTimeout
	// A server that is no ZooKeeper (a MetaQ broker port given as zkConnect)
	// never answers the handshake: look once, early, and fail at once when
	// every server turns out to be one.
	probe := time.NewTimer(min(2*time.Second, opts.ConnectionTimeout/2))
	defer probe.Stop()
	var notZK []string
wait:
	for {
		select {
		case <-r.firstSession:
			first.stop()
			r.log.Info("REGISTRY: connected", "zk", opts.Connect, "root", opts.Root,
				"session", fmt.Sprintf("0x%x", conn.SessionID()), "waited", time.Since(began).Round(time.Millisecond))
			r.recordSession()
			return r, nil
		case <-probe.C:
			notZK = metaqServers(ctx, servers)
			if len(notZK) == len(servers) {
				err = fmt.Errorf("%w: %s", ErrNoSession, strings.Join(notZK, "; "))
				break wait
			}
		case <-timer.C:
			if opts.KeepWaiting {
				nextWarn = min(2*nextWarn, maxWaitWarn)
				timer.Reset(nextWarn)
				r.log.Warn("REGISTRY: no ZooKeeper session yet; still waiting for the ensemble",
					"zk", opts.Connect, "root", opts.Root, "waited", time.Since(began).Round(time.Second),
					"next_warning_in", nextWarn)
				continue
			}
			err = fmt.Errorf("%w: %s within %v", ErrNoSession, opts.Connect, opts.ConnectionTimeout)
			if len(notZK) > 0 {
				err = fmt.Errorf("%w (%s)", err, strings.Join(notZK, "; "))
			}
			break wait
		case <-ctx.Done():
			err = fmt.Errorf("registry: connect %s: %w", opts.Connect, ctx.Err())
			break wait
		}
	}
	first.closeAll()
	r.shutdown()
	return nil, err
}

// metaqServers lists, as sentences, the servers of a connect string that
// answer MetaQ's protocol instead of ZooKeeper's.
func metaqServers(ctx context.Context, servers []string) []string {
	var out []string
	for _, s := range servers {
		if answer, ok := portprobe.MetaQ(ctx, strings.TrimSpace(s), time.Second); ok {
			out = append(out, fmt.Sprintf("%s is a MetaQ broker port, not ZooKeeper (it answered %q to MetaQ's version command): give zk.zkConnect's host:port", s, answer))
		}
	}
	return out
}

// firstConns records the connections dialled before the first session.
type firstConns struct {
	mu      sync.Mutex
	conns   []net.Conn
	stopped bool
}

func (f *firstConns) wrap(dial zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err == nil {
			f.mu.Lock()
			if !f.stopped {
				// The library uses one connection at a time and
				// closes the ones it gave up on: a New that waits
				// long keeps only the latest few.
				if len(f.conns) >= 4 {
					f.conns = append(f.conns[:0], f.conns[1:]...)
				}
				f.conns = append(f.conns, c)
			}
			f.mu.Unlock()
		}
		return c, err
	}
}

// stop forgets the connections: the session owns them from now on.
func (f *firstConns) stop() {
	f.mu.Lock()
	f.stopped, f.conns = true, nil
	f.mu.Unlock()
}

// closeAll closes every connection dialled so far.
func (f *firstConns) closeAll() {
	f.mu.Lock()
	conns := f.conns
	f.stopped, f.conns = true, nil
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Paths returns the path builder for this registry's root.
func (r *Registry) Paths() Paths { return r.paths }

// SessionID returns the current ZooKeeper session id (0 while there is none).
func (r *Registry) SessionID() int64 { return r.conn.SessionID() }

// Connected reports whether the registry holds a ZooKeeper session right now.
func (r *Registry) Connected() bool { return r.conn.State() == zk.StateHasSession }

// lostExpired in Registry.lost: ZooKeeper said the session expired.
const lostExpired = -1

// SessionMayBeAlive reports whether this registry's session, and the
// ephemeral nodes it holds, may still exist: it holds the session now, or
// lost its connection less than the session timeout ago and has not heard
// since that the session expired. A disconnection is no session loss:
// ZooKeeper keeps the session until its timeout, and a reconnection
// within it finds everything in place. While disconnected the client only
// learns of an expiry when it reaches a server again, so the timeout
// bounds the wait.
func (r *Registry) SessionMayBeAlive() bool {
	if r.conn.State() == zk.StateHasSession {
		return true
	}
	if r.closing.Load() || r.conn.SessionID() == 0 {
		return false // closed, expired, or no session yet
	}
	switch lost := r.lost.Load(); {
	case lost == lostExpired:
		return false
	case lost == 0:
		return true // the disconnection's event is not read yet
	default:
		return time.Since(r.born)-time.Duration(lost) < r.opts.SessionTimeout
	}
}

// Connect returns the ensemble's connect string (without a chroot).
func (r *Registry) Connect() string { return r.opts.Connect }

// SyncTime returns zk.zkSyncTimeMs.
func (r *Registry) SyncTime() time.Duration { return r.opts.SyncTime }

// SessionRegained returns a channel that is closed the next time the
// registry has a ZooKeeper session after it had none: a reconnection
// within the same session, or a new session after an expiry (closed when
// the session is there, before a new session's re-registration is done).
// A caller that takes the channel before an attempt that needs ZooKeeper
// and waits on it after the attempt failed learns of a session that came
// back meanwhile too.
func (r *Registry) SessionRegained() <-chan struct{} {
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	return r.regained
}

// OnNewSession registers fn to run (in its own goroutine) whenever a new
// session replaces an expired one, after this registry re-registered its own
// nodes. Owners of watches and ephemeral nodes created through
// CreateEphemeral re-create them there.
func (r *Registry) OnNewSession(fn func()) {
	r.sessionMu.Lock()
	r.newSession = append(r.newSession, fn)
	r.sessionMu.Unlock()
}

// drainEvents reads every session event so the library never drops one, and
// hands new sessions to resyncLoop: doing ZooKeeper requests here would stall
// the channel.
func (r *Registry) drainEvents(events <-chan zk.Event) {
	defer r.wg.Done()
	for ev := range events {
		if ev.Type != zk.EventSession {
			continue
		}
		switch ev.State {
		case zk.StateHasSession:
			r.lost.Store(0)
			id := r.conn.SessionID()
			r.sessionMu.Lock()
			prev := r.sessionID
			r.sessionID = id
			close(r.regained)
			r.regained = make(chan struct{})
			r.sessionMu.Unlock()
			r.firstOnce.Do(func() { close(r.firstSession) })
			if prev != 0 && prev != id {
				r.log.Warn("REGISTRY: new ZooKeeper session, registering again",
					"old", fmt.Sprintf("0x%x", prev), "new", fmt.Sprintf("0x%x", id))
				select {
				case r.resync <- struct{}{}:
				default:
				}
			}
		case zk.StateExpired:
			r.lost.Store(lostExpired)
			r.log.Warn("REGISTRY: ZooKeeper session expired")
		case zk.StateDisconnected:
			r.lost.CompareAndSwap(0, max(int64(time.Since(r.born)), 1))
			if !r.closing.Load() {
				r.log.Warn("REGISTRY: disconnected from ZooKeeper", "server", ev.Server)
			}
		case zk.StateAuthFailed:
			r.log.Error("REGISTRY: ZooKeeper authentication failed")
		}
	}
}

// resyncLoop re-registers everything after a new session, retrying until it
// succeeds, a newer session asks again, or the registry closes.
func (r *Registry) resyncLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.quit:
			return
		case <-r.resync:
		}
		r.recordSession()
		for attempt := 0; ; attempt++ {
			err := r.reregister()
			if err == nil {
				break
			}
			if errors.Is(err, ErrNotCurrentMaster) {
				r.log.Warn("REGISTRY: not registering again as master: another master took over", "err", err)
				break
			}
			if errors.Is(err, errSlaveNodeHeld) {
				// Another live session registered this slaveId meanwhile:
				// retrying would wait out its session timeout for ever.
				// Registration().Problem says so until a registration
				// writes the node again (a new session, a role change).
				r.log.Error("REGISTRY: not registering again as slave: another live session holds its node; give this slave another slaveId, or stop the other broker",
					"err", err)
				break
			}
			r.log.Error("REGISTRY: re-registration failed, retrying", "err", err, "attempt", attempt)
			select {
			case <-r.quit:
				return
			case <-time.After(time.Second):
			}
		}
		r.sessionMu.Lock()
		fns := append([]func(){}, r.newSession...)
		r.sessionMu.Unlock()
		for _, fn := range fns {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				fn()
			}()
		}
	}
}

// reregister replays the registration in the current session
// (BrokerZooKeeper.reRegisterEveryThing).
func (r *Registry) reregister() error {
	ctx, cancel := r.opCtx()
	defer cancel()
	r.regMu.Lock()
	defer r.unlockReg()
	// Kept entries went with the old session.
	r.state.keptPub = nil
	if err := r.writeAllLocked(ctx, false); err != nil {
		if errors.Is(err, ErrBrokerNodeHeld) && !r.master() {
			r.state.problem = fmt.Sprintf("slave %d is not registered in ZooKeeper after a new session: %v", r.opts.SlaveID, err)
			return fmt.Errorf("%w: %w", errSlaveNodeHeld, err)
		}
		return err
	}
	r.state.session = r.conn.SessionID()
	r.log.Info("REGISTRY: registered again", "broker", r.state.broker, "topics", len(r.state.topics))
	return nil
}

// writeAllLocked writes the broker node and every registered topic's
// entries for the broker's current role (leavePub: see writeTopicLocked).
// The caller holds regMu.
func (r *Registry) writeAllLocked(ctx context.Context, leavePub bool) error {
	if err := r.guardMasterLocked(ctx); err != nil {
		return err
	}
	if r.state.broker {
		if err := r.registerBrokerLocked(ctx); err != nil {
			return err
		}
	}
	for topic, t := range r.state.topics {
		if err := r.writeTopicLocked(ctx, topic, t, leavePub); err != nil {
			return err
		}
	}
	r.state.unwritten = false
	return nil
}

// opCtx bounds internal work by the session timeout and by Close.
func (r *Registry) opCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.opts.SessionTimeout)
	go func() {
		select {
		case <-r.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Close ends the session without unregistering first (the server then
// deletes our ephemeral nodes at once). A clean stop calls UnregisterAll
// before Close. Close is idempotent.
func (r *Registry) Close() error {
	if !r.closing.CompareAndSwap(false, true) {
		return nil
	}
	r.shutdown()
	r.log.Info("REGISTRY: closed")
	return nil
}

func (r *Registry) shutdown() {
	r.closing.Store(true)
	close(r.quit)
	// Closing the connection closes the event channel, which ends drainEvents,
	// and fails pending requests, which ends the goroutines of call().
	r.conn.Close()
	r.wg.Wait()
}

// call runs a ZooKeeper request and returns when it finishes or ctx ends.
// go-zookeeper has no context support; the request goroutine ends at the
// latest when the connection fails or closes, which fails pending requests.
func (r *Registry) call(ctx context.Context, fn func() error) error {
	if r.closing.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		done <- fn()
	}()
	select {
	case err := <-done:
		return mapErr(err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ConnectionLost reports whether err is ZooKeeper out of reach (no server
// answers, the connection closed under a request, the session expired or
// moved) rather than an answer: a request that failed so may succeed once
// the session is back (SessionRegained). A node held by another live
// session, a fenced master's refusal or a closed registry are answers.
func ConnectionLost(err error) bool {
	// net.ErrClosed: the library hands back the socket's own error for a
	// request written while the connection was being closed under it.
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: %w", ErrNoNode, err)
	case errors.Is(err, zk.ErrNodeExists):
		return fmt.Errorf("%w: %w", ErrNodeExists, err)
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// zkLogger routes the library's Printf logs into slog. The library logs
// every failed dial (once a second per server while an ensemble is down):
// those are logged at WARN at most once per failedDialEvery, with how many
// were left out, and at DEBUG otherwise.
type zkLogger struct {
	log *slog.Logger

	mu         sync.Mutex
	lastDial   time.Time // the last failed dial logged at WARN
	quietDials int       // failed dials since, logged at DEBUG only
}

// failedDialEvery is how often zkLogger logs a failed dial at WARN.
const failedDialEvery = time.Minute

func (l *zkLogger) Printf(format string, args ...any) {
	msg := "zk: " + fmt.Sprintf(format, args...)
	if !strings.HasPrefix(format, "failed to connect to") {
		l.log.Warn(msg)
		return
	}
	l.mu.Lock()
	now := time.Now()
	loud := now.Sub(l.lastDial) >= failedDialEvery
	quiet := l.quietDials
	if loud {
		l.lastDial, l.quietDials = now, 0
	} else {
		l.quietDials++
	}
	l.mu.Unlock()
	if !loud {
		l.log.Debug(msg)
		return
	}
	if quiet > 0 {
		l.log.Warn(msg, "failed_dials_not_logged_since_last", quiet)
		return
	}
	l.log.Warn(msg)
}

// guardMasterLocked asks Options.MasterGuard, on a master, whether it may
// write its master entries. The caller holds regMu.
func (r *Registry) guardMasterLocked(ctx context.Context) error {
	if !r.master() || r.opts.MasterGuard == nil {
		return nil
	}
	if err := r.opts.MasterGuard(ctx); err != nil {
		return fmt.Errorf("registry: writing nothing as master of broker %d: %w", r.opts.BrokerID, err)
	}
	return nil
}

// Reassert writes the registration again in the current session (the
// broker node and every topic's entries), as after a new session: a node
// removed by someone else comes back. A master asks MasterGuard first.
func (r *Registry) Reassert(ctx context.Context) error {
	r.regMu.Lock()
	defer r.unlockReg()
	return r.writeAllLocked(ctx, false)
}

// Owns reports whether path exists as an ephemeral node of this session.
func (r *Registry) Owns(ctx context.Context, path string) (bool, error) {
	ok, st, err := r.Exists(ctx, path)
	if err != nil || !ok {
		return false, err
	}
	return st.EphemeralOwner == r.conn.SessionID(), nil
}
