package topology

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"metaq/georeplicator"
)

// ErrClosed is returned by Start and Join after Close.
var ErrClosed = errors.New("topology: closed")

// MemberState is a member's liveness as this bundle sees it.
type MemberState uint8

// The zero value is StateDown, so a site or member missing from a map reads
// as down.
const (
	// StateDown: the member was declared dead or left the pool.
	StateDown MemberState = iota
	// StateSuspect: this bundle's probes failed and memberlist is waiting for
	// the member to refute before declaring it dead.
	StateSuspect
	// StateAlive: the member answers probes.
	StateAlive
)

// String returns alive, suspect or down.
func (s MemberState) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	}
	return "down"
}

// MarshalText makes MemberState print as its name in JSON.
func (s MemberState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the names String returns.
func (s *MemberState) UnmarshalText(b []byte) error {
	for _, c := range []MemberState{StateAlive, StateSuspect, StateDown} {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("topology: unknown member state %q", b)
}

// Member is one bundle of the pool with its last known metadata.
type Member struct {
	Name string `json:"name"`
	// Addr is the gossip address host:port.
	Addr  string      `json:"addr"`
	Meta  Meta        `json:"meta"`
	State MemberState `json:"state"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
	// Local is true for this bundle itself.
	Local bool `json:"local"`
}

// Healthy reports whether the member is alive with storage and replication ok.
func (m Member) Healthy() bool {
	return m.State == StateAlive && m.Meta.Health.StorageOK && m.Meta.Health.ReplicationOK
}

// SiteState is a site's liveness: up while any of its members is alive,
// suspect while all its live members are suspect, down when none is left.
type SiteState = MemberState

// EventKind says what an Event reports.
type EventKind uint8

const (
	// NodeUp: a member joined, came back, or refuted a suspicion.
	NodeUp EventKind = iota
	// NodeUpdate: a member's metadata (health, lag) changed.
	NodeUpdate
	// NodeSuspect: this bundle's probes of a member failed.
	NodeSuspect
	// NodeDown: a member was declared dead or left.
	NodeDown
	// SiteUp, SiteSuspect and SiteDown report a site's state changes.
	SiteUp
	SiteSuspect
	SiteDown
)

// String returns the kind's name, e.g. "site-down".
func (k EventKind) String() string {
	return [...]string{"node-up", "node-update", "node-suspect", "node-down", "site-up", "site-suspect", "site-down"}[k]
}

// MarshalText makes EventKind print as its name in JSON.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the names String returns.
func (k *EventKind) UnmarshalText(b []byte) error {
	for c := NodeUp; c <= SiteDown; c++ {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("topology: unknown event kind %q", b)
}

// Event is a change in the pool. Member is set for node events (a copy).
type Event struct {
	Kind   EventKind `json:"kind"`
	Site   string    `json:"site"`
	Member Member    `json:"member"`
	Time   time.Time `json:"time"`
}

// Topology is this bundle's membership in the gossip pool: it publishes the
// bundle's metadata and tracks every other bundle's. All methods are safe for
// concurrent use.
type Topology struct {
	opts Options
	log  *slog.Logger

	ml   *memberlist.Memberlist // set by Start, nil before
	addr string                 // set by Start with ml: the gossip address
	meta atomic.Pointer[[]byte] // encoded local metadata served to memberlist
	// refreshMu serialises refreshNow; announced is the metadata last handed
	// to memberlist's UpdateNode (nil before the first). close holds it
	// across memberlist's Leave and Shutdown: once this member has left,
	// memberlist reaps its own node after GossipToTheDeadTime, and an
	// UpdateNode then dereferences the missing node (a nil pointer panic
	// seen when a loaded machine kept Leave waiting that long).
	refreshMu sync.Mutex
	announced []byte

	// qmu guards queue, which memberlist's callbacks append to while holding
	// their own locks: they must never wait on anything else of ours.
	qmu    sync.Mutex
	queue  []rawEvent
	qready chan struct{} // buffered 1: queue has items

	mu      sync.RWMutex // guards members, sites, subs
	members map[string]*Member
	sites   map[string]SiteState
	subs    map[chan Event]struct{}
	dropped atomic.Int64

	views atomic.Pointer[[]string] // SetViewReach: sites whose views this bundle can write

	kick    chan struct{} // buffered 1: refresh metadata now
	self    chan struct{} // closed once this node is in its own member table
	selfOne sync.Once
	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Bool
	closing atomic.Bool
}

type rawKind uint8

const (
	rawJoin rawKind = iota
	rawUpdate
	rawLeave
	rawSuspect
	rawAck
)

type rawEvent struct {
	kind rawKind
	name string
	addr string
	meta []byte
}

// New validates opts and returns a Topology that has not joined yet.
func New(opts Options) (*Topology, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t := &Topology{
		opts:    opts,
		log:     opts.Logger.With("component", "topology", "node", opts.Name),
		qready:  make(chan struct{}, 1),
		members: make(map[string]*Member),
		sites:   make(map[string]SiteState),
		subs:    make(map[chan Event]struct{}),
		kick:    make(chan struct{}, 1),
		self:    make(chan struct{}),
		quit:    make(chan struct{}),
	}
	b, err := EncodeMeta(t.computeMeta())
	if err != nil {
		return nil, err
	}
	t.meta.Store(&b)
	return t, nil
}

// Start creates the gossip listener, starts the event and refresh loops and
// tries the Join seeds (a failed join is logged: the pool may not exist yet,
// and Join can be called again later).
func (t *Topology) Start(ctx context.Context) error {
	if t.closing.Load() {
		return ErrClosed
	}
	if !t.started.CompareAndSwap(false, true) {
		return errors.New("topology: already started")
	}
	conf, err := t.opts.memberlistConfig()
	if err != nil {
		return err
	}
	if len(t.opts.Key) == 0 {
		t.log.Warn("TOPOLOGY: gossip is not encrypted: set [gossip] key")
	}
	conf.Delegate = delegate{t}
	conf.Events = eventDelegate{t}
	conf.Ping = pingDelegate{t}
	conf.Logger = newMemberlistLogger(t.opts.Logger, func(name string) {
		t.enqueue(rawEvent{kind: rawSuspect, name: name})
	})
	switch {
	case t.opts.transport != nil:
		conf.Transport = t.opts.transport
	case t.opts.DropTo != nil:
		dt, err := newDropTransport(conf, t.opts.DropTo)
		if err != nil {
			return fmt.Errorf("topology: start gossip on %s: %w", t.opts.Bind, err)
		}
		conf.Transport = dt
	}
	// The event loop must run before Create: memberlist reports our own join
	// from inside Create.
	t.wg.Add(2)
	go t.eventLoop()
	go t.refreshLoop()
	ml, err := memberlist.Create(conf)
	if err != nil {
		if dt, ok := conf.Transport.(*dropTransport); ok {
			dt.Shutdown()
		}
		t.Close()
		return fmt.Errorf("topology: start gossip on %s: %w", t.opts.Bind, err)
	}
	// The local node's address never changes; read it before the refresh
	// loop can see ml, because UpdateNode rewrites the node LocalNode returns.
	n := ml.LocalNode()
	addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	// What Create announced, read from NodeMeta during Create: the refresh
	// loop gossips anything newer once it sees ml.
	t.refreshMu.Lock()
	t.announced = append([]byte(nil), n.Meta...)
	t.refreshMu.Unlock()
	t.mu.Lock()
	t.ml, t.addr = ml, addr
	t.mu.Unlock()
	// memberlist reports our own join through the event loop; wait for it so
	// Members, Reports and the routers see this bundle as soon as Start
	// returns.
	select {
	case <-t.self:
	case <-ctx.Done():
		t.Close()
		return fmt.Errorf("topology: start: %w", ctx.Err())
	}
	t.log.Info("TOPOLOGY: gossip started", "addr", t.Addr(), "site", t.opts.Site, "role", t.opts.Role.String(),
		"encrypted", len(t.opts.Key) > 0, "label", t.opts.Label)
	if len(t.opts.Join) > 0 {
		if _, err := t.Join(ctx, t.opts.Join...); err != nil {
			t.log.Warn("TOPOLOGY: join failed, waiting for others to join us", "seeds", t.opts.Join, "err", err)
		}
	}
	t.wg.Add(1)
	go t.rejoinLoop()
	return nil
}

// rejoinLoop asks, every RejoinInterval, the join seeds that are not alive
// members and the members this node holds down to join again, as Serf
// reconnects to failed members. memberlist gossips to a member it declared
// dead only for GossipToTheDeadTime and never probes it again, so without
// this two sites split by a WAN partition longer than that stay split after
// it heals, and a bundle whose seeds were all down when it started stays
// alone.
func (t *Topology) rejoinLoop() {
	defer t.wg.Done()
	tick := t.opts.Clock.NewTicker(t.opts.Timing.rejoinInterval())
	defer tick.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-tick.C():
		}
		addrs := t.rejoinAddrs()
		if len(addrs) == 0 {
			continue
		}
		// Join waits up to TCPTimeout for an address that black-holes;
		// Close must not wait for that, so the wait ends with quit.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-t.quit:
			case <-ctx.Done():
			}
			cancel()
		}()
		n, err := t.Join(ctx, addrs...)
		cancel()
		if t.closing.Load() {
			return
		}
		if n > 0 {
			t.log.Info("TOPOLOGY: rejoined", "asked", addrs, "answered", n)
		} else {
			t.log.Debug("TOPOLOGY: rejoin found nobody", "asked", addrs, "err", err)
		}
	}
}

// rejoinAddrs lists the join seeds that are not the address of an alive
// member (this node's own included) and the addresses of members held down.
func (t *Topology) rejoinAddrs() []string {
	alive := map[string]bool{t.Addr(): true}
	var down []string
	for _, m := range t.Members() {
		if m.State == StateDown {
			down = append(down, m.Addr)
		} else {
			alive[m.Addr] = true
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, a := range append(slices.Clone(t.opts.Join), down...) {
		if a == "" || alive[a] || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
	}
	return out
}

// Join contacts the given gossip addresses and returns how many answered.
func (t *Topology) Join(ctx context.Context, addrs ...string) (int, error) {
	ml := t.memberlist()
	if ml == nil || t.closing.Load() {
		return 0, ErrClosed
	}
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	// memberlist.Join has no context; it is bounded by TCPTimeout per seed.
	go func() {
		n, err := ml.Join(addrs)
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.n, fmt.Errorf("topology: join %v: %w", addrs, r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("topology: join %v: %w", addrs, ctx.Err())
	}
}

// Addr returns the gossip address others reach this node at (host:port),
// "" before Start.
func (t *Topology) Addr() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.addr
}

// Master returns the alive master of brokerID with the highest generation
// gossip knows, other than this bundle; ok is false when there is none.
func (t *Topology) Master(brokerID int) (m Member, ok bool) {
	for _, c := range t.Members() {
		if c.Name == t.opts.Name || c.State != StateAlive || c.Meta.Role != RoleMaster || c.Meta.BrokerID != brokerID {
			continue
		}
		if !ok || c.Meta.Generation > m.Meta.Generation {
			m, ok = c, true
		}
	}
	return m, ok
}

// Name returns this node's gossip name.
func (t *Topology) Name() string { return t.opts.Name }

// Site returns this bundle's site.
func (t *Topology) Site() string { return t.opts.Site }

// DetectionTime is an upper bound on how long the pool takes to declare a
// crashed member down with n members: one probe round to reach it, the probe
// timeout, and the longest suspicion memberlist allows. memberlist's local
// health awareness stretches probe intervals on an overloaded node (up to
// 8×), so a starved process can take longer.
func (t *Topology) DetectionTime() time.Duration {
	c, _ := t.opts.memberlistConfig()
	n := len(t.Members())
	if n < 1 {
		n = 1
	}
	scale := 1.0
	if n > 10 {
		// memberlist scales suspicion by log10(n).
		for x := n; x >= 10; x /= 10 {
			scale++
		}
	}
	suspicion := time.Duration(float64(c.SuspicionMult)*scale) * c.ProbeInterval * time.Duration(c.SuspicionMaxTimeoutMult)
	return time.Duration(n)*c.ProbeInterval + c.ProbeTimeout + suspicion
}

// Refresh recomputes the local metadata from the Health and Lag sources now
// and gossips it when it changed (the refresh loop also does it every
// RefreshInterval). It does not block.
func (t *Topology) Refresh() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// LocalMeta returns the metadata this bundle currently gossips.
func (t *Topology) LocalMeta() Meta {
	m, _ := DecodeMeta(*t.meta.Load())
	return m
}

// Members returns every member this bundle has seen, down ones included,
// sorted by name. The slice is a copy.
func (t *Topology) Members() []Member {
	t.mu.RLock()
	out := make([]Member, 0, len(t.members))
	for _, m := range t.members {
		out = append(out, copyMember(m))
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Sites returns each known site's state.
func (t *Topology) Sites() map[string]SiteState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]SiteState, len(t.sites))
	for k, v := range t.sites {
		out[k] = v
	}
	return out
}

// Subscribe returns a channel receiving every event from now on, and a
// function that ends the subscription. A subscriber that does not keep up
// loses events (counted in Dropped) rather than stalling the pool; buf sets
// its channel's capacity (default 64). The channel is never closed: stop
// reading when the returned function was called or the topology closed.
func (t *Topology) Subscribe(buf int) (<-chan Event, func()) {
	if buf <= 0 {
		buf = 64
	}
	ch := make(chan Event, buf)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			t.mu.Lock()
			delete(t.subs, ch)
			t.mu.Unlock()
		})
	}
}

// Dropped returns how many events slow subscribers lost.
func (t *Topology) Dropped() int64 { return t.dropped.Load() }

// Close leaves the pool gracefully (others see this member down at once),
// stops the listener and waits for the loops. It is idempotent.
func (t *Topology) Close() error {
	return t.close(true)
}

// Crash stops gossip without leaving the pool, as a killed process does:
// the other members find this one down by failure detection (probes, then
// suspicion), not at once. Tests that kill a bundle use it; Close after it
// does nothing.
func (t *Topology) Crash() error { return t.close(false) }

// close with leave=false stops without telling anyone, as a crash would:
// tests use it to exercise failure detection.
func (t *Topology) close(leave bool) error {
	if !t.closing.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	if ml := t.memberlist(); ml != nil {
		t.refreshMu.Lock() // no UpdateNode from here on (see refreshMu)
		if leave {
			if lerr := ml.Leave(t.leaveTimeout()); lerr != nil {
				t.log.Warn("TOPOLOGY: leave", "err", lerr)
			}
		}
		err = ml.Shutdown()
		t.refreshMu.Unlock()
	}
	close(t.quit)
	t.wg.Wait()
	t.mu.Lock()
	for ch := range t.subs {
		delete(t.subs, ch)
	}
	t.mu.Unlock()
	t.log.Info("TOPOLOGY: gossip stopped")
	if err != nil {
		return fmt.Errorf("topology: shutdown: %w", err)
	}
	return nil
}

func (t *Topology) leaveTimeout() time.Duration {
	c, _ := t.opts.memberlistConfig()
	return 2 * c.ProbeInterval
}

func (t *Topology) memberlist() *memberlist.Memberlist {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.ml
}

func (t *Topology) enqueue(e rawEvent) {
	t.qmu.Lock()
	t.queue = append(t.queue, e)
	t.qmu.Unlock()
	select {
	case t.qready <- struct{}{}:
	default:
	}
}

func (t *Topology) eventLoop() {
	defer t.wg.Done()
	for {
		select {
		case <-t.quit:
			return
		case <-t.qready:
		}
		t.qmu.Lock()
		batch := t.queue
		t.queue = nil
		t.qmu.Unlock()
		for _, e := range batch {
			evs, subs := t.apply(e)
			for _, ev := range evs {
				t.emit(ev, subs)
			}
		}
	}
}

// apply folds one raw memberlist event into the member table and returns the
// events it causes with the subscribers to tell. The subscribers are taken
// with the change, under one lock: one that subscribed after the change was
// made already sees it in the table and must not get its event as news.
func (t *Topology) apply(e rawEvent) ([]Event, []chan Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.applyLocked(e)
	if len(out) == 0 {
		return nil, nil
	}
	subs := make([]chan Event, 0, len(t.subs))
	for ch := range t.subs {
		subs = append(subs, ch)
	}
	return out, subs
}

// applyLocked is apply's change of the table; t.mu is held.
func (t *Topology) applyLocked(e rawEvent) []Event {
	now := t.opts.Clock.Now()
	m := t.members[e.name]
	var out []Event
	switch e.kind {
	case rawJoin, rawUpdate:
		meta, err := DecodeMeta(e.meta)
		if err != nil {
			t.log.Warn("TOPOLOGY: ignoring member with unreadable metadata", "member", e.name, "err", err)
			return nil
		}
		if m == nil {
			m = &Member{Name: e.name, Local: e.name == t.opts.Name, State: StateDown}
			t.members[e.name] = m
		}
		m.Addr, m.Meta = e.addr, meta
		if m.Local {
			t.selfOne.Do(func() { close(t.self) })
		}
		if m.State != StateAlive {
			m.State, m.Since = StateAlive, now
			out = append(out, Event{Kind: NodeUp, Site: meta.Site, Member: copyMember(m), Time: now})
		} else {
			out = append(out, Event{Kind: NodeUpdate, Site: meta.Site, Member: copyMember(m), Time: now})
		}
	case rawLeave:
		if m == nil || m.State == StateDown {
			return nil
		}
		m.State, m.Since = StateDown, now
		out = append(out, Event{Kind: NodeDown, Site: m.Meta.Site, Member: copyMember(m), Time: now})
	case rawSuspect:
		if m == nil || m.State != StateAlive {
			return nil
		}
		m.State, m.Since = StateSuspect, now
		out = append(out, Event{Kind: NodeSuspect, Site: m.Meta.Site, Member: copyMember(m), Time: now})
	case rawAck:
		if m == nil || m.State != StateSuspect {
			return nil
		}
		m.State, m.Since = StateAlive, now
		out = append(out, Event{Kind: NodeUp, Site: m.Meta.Site, Member: copyMember(m), Time: now})
	}
	if m != nil {
		out = append(out, t.siteChangeLocked(m.Meta.Site, now)...)
	}
	return out
}

// siteChangeLocked recomputes one site's state; t.mu is held.
func (t *Topology) siteChangeLocked(site string, now time.Time) []Event {
	state := StateDown
	for _, m := range t.members {
		if m.Meta.Site != site {
			continue
		}
		if m.State == StateAlive {
			state = StateAlive
			break
		}
		if m.State == StateSuspect {
			state = StateSuspect
		}
	}
	old, known := t.sites[site]
	if known && old == state {
		return nil
	}
	t.sites[site] = state
	if !known && state == StateDown {
		return nil
	}
	kind := map[MemberState]EventKind{StateAlive: SiteUp, StateSuspect: SiteSuspect, StateDown: SiteDown}[state]
	return []Event{{Kind: kind, Site: site, Time: now}}
}

// emit logs ev, hands it to OnEvent and to subs (taken with the change by
// apply).
func (t *Topology) emit(ev Event, subs []chan Event) {
	switch ev.Kind {
	case NodeUpdate:
		t.log.Debug("NODE("+ev.Member.Name+"): metadata updated", "site", ev.Site)
	case NodeUp, NodeSuspect, NodeDown:
		t.log.Info("NODE("+ev.Member.Name+"): "+ev.Member.State.String(), "site", ev.Site,
			"role", ev.Member.Meta.Role.String(), "brokerId", ev.Member.Meta.BrokerID, "addr", ev.Member.Addr)
	default:
		lvl := slog.LevelWarn
		if ev.Kind == SiteUp {
			lvl = slog.LevelInfo
		}
		t.log.Log(context.Background(), lvl, "SITE("+ev.Site+"): "+map[EventKind]string{SiteUp: "up", SiteSuspect: "suspect", SiteDown: "down"}[ev.Kind])
	}
	if t.opts.OnEvent != nil {
		t.opts.OnEvent(ev)
	}
	for _, ch := range subs {
		select {
		case ch <- ev:
		default:
			t.dropped.Add(1)
		}
	}
}

func (t *Topology) refreshLoop() {
	defer t.wg.Done()
	tick := t.opts.Clock.NewTicker(t.opts.RefreshInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-tick.C():
		case <-t.kick:
		}
		t.refreshNow()
	}
}

// refreshNow recomputes the metadata and gossips it when it differs from
// what memberlist last announced. It compares with the announced copy, not
// with the one NodeMeta serves: memberlist.Create reads NodeMeta before
// Start can hand its result to this loop, and metadata that changed in
// between (a receiver connecting as the bundle starts) would otherwise be
// served but never gossiped, leaving peers with the old copy for good.
func (t *Topology) refreshNow() {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	if t.closing.Load() {
		return
	}
	b, err := EncodeMeta(t.computeMeta())
	if err != nil {
		t.log.Error("TOPOLOGY: cannot encode metadata", "err", err)
		return
	}
	if !bytes.Equal(b, *t.meta.Load()) {
		t.meta.Store(&b)
	}
	ml := t.memberlist()
	if ml == nil || bytes.Equal(b, t.announced) {
		return
	}
	t.announced = b
	// UpdateNode waits until the update was handed to a peer. Keep the wait
	// short: the metadata is gossiped regardless, and Close waits for this
	// loop.
	c, _ := t.opts.memberlistConfig()
	if err := ml.UpdateNode(2*c.GossipInterval + 100*time.Millisecond); err != nil {
		t.log.Debug("TOPOLOGY: metadata update not yet gossiped", "err", err)
	}
}

// computeMeta builds the local metadata from the options and sources.
func (t *Topology) computeMeta() Meta {
	m := t.opts.staticMeta()
	if t.opts.Health != nil {
		m.Health = t.opts.Health.Health()
	}
	if t.opts.Lag != nil {
		m.Lag = SummarizeLag(t.opts.Lag.Lag(), t.opts.LaggingAfter)
	}
	if t.opts.Mastership != nil {
		ms := t.opts.Mastership.Mastership()
		m.Role, m.SlaveID, m.Generation, m.ReplAddr, m.LogPos = ms.Role, ms.SlaveID, ms.Generation, ms.ReplAddr, ms.LogPos
		if ms.Role != RoleMaster {
			m.Lag = nil
		}
	}
	if v := t.views.Load(); v != nil {
		m.Views = *v
	}
	return m
}

// SummarizeLag sums up each slave group (GroupLag.Summary), sorted by
// slave group.
func SummarizeLag(groups []georeplicator.GroupLag, laggingAfter time.Duration) []LagSummary {
	out := make([]LagSummary, 0, len(groups))
	for i := range groups {
		out = append(out, groups[i].Summary(laggingAfter))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SlaveGroup < out[j].SlaveGroup })
	return out
}

func copyMember(m *Member) Member {
	c := *m
	c.Meta.Lag = append([]LagSummary(nil), m.Meta.Lag...)
	return c
}

// delegate serves our metadata to memberlist. Callbacks return at once.
type delegate struct{ t *Topology }

func (d delegate) NodeMeta(limit int) []byte {
	b := *d.t.meta.Load()
	if len(b) > limit {
		// EncodeMeta keeps it under MetaMaxSize; memberlist never asks for less.
		return nil
	}
	return append([]byte(nil), b...)
}
func (delegate) NotifyMsg([]byte)                           {}
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}

// eventDelegate copies what memberlist reports (it holds its node lock while
// calling) and queues it for the event loop.
type eventDelegate struct{ t *Topology }

func nodeEvent(kind rawKind, n *memberlist.Node) rawEvent {
	return rawEvent{
		kind: kind,
		name: n.Name,
		addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		meta: append([]byte(nil), n.Meta...),
	}
}

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.t.enqueue(nodeEvent(rawJoin, n)) }
func (e eventDelegate) NotifyLeave(n *memberlist.Node)  { e.t.enqueue(nodeEvent(rawLeave, n)) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.t.enqueue(nodeEvent(rawUpdate, n)) }

// pingDelegate clears a suspicion when a direct probe of the member succeeds.
type pingDelegate struct{ t *Topology }

func (pingDelegate) AckPayload() []byte { return nil }
func (p pingDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	p.t.enqueue(rawEvent{kind: rawAck, name: other.Name})
}
