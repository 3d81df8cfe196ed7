package broker

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// heldMaster is a master's MetaQ port that reads puts and answers none of
// them until release is called: what a master a WAN round trip away looks
// like to the gateway while its answers are on the way.
type heldMaster struct {
	ln net.Listener

	mu       sync.Mutex
	got      []*wire.Put
	changed  chan struct{} // closed and replaced whenever got grows
	released bool
	nc       net.Conn
}

func newHeldMaster(t *testing.T) *heldMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &heldMaster{ln: ln, changed: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		m.mu.Lock()
		if m.nc != nil {
			m.nc.Close()
		}
		m.mu.Unlock()
		<-done
	})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		m.nc = nc
		m.mu.Unlock()
		d := wire.NewDecoder(bufio.NewReader(nc))
		for {
			cmd, err := d.Decode()
			if err != nil {
				return
			}
			p, ok := cmd.(*wire.Put)
			if !ok {
				continue
			}
			m.mu.Lock()
			m.got = append(m.got, p)
			close(m.changed)
			m.changed = make(chan struct{})
			if m.released {
				m.answerLocked(p)
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// answerLocked answers p as stored; a body "p-<n>" gets id 1000+n and
// offset 20n, so the producer's answer can be checked against it.
func (m *heldMaster) answerLocked(p *wire.Put) {
	k, _ := strconv.Atoi(strings.TrimPrefix(string(p.Body), "p-"))
	body := fmt.Sprintf("%d %d %d", 1000+k, p.Partition, 20*k)
	m.nc.Write(wire.AppendResult(nil, wire.StatusOK, body, p.Opaque))
}

// release answers every put read so far, and later ones as they come.
func (m *heldMaster) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released = true
	for _, p := range m.got {
		m.answerLocked(p)
	}
}

// waitFor waits until the master has read n puts and returns how many it
// read, fewer when timeout passed first.
func (m *heldMaster) waitFor(n int, timeout time.Duration) int {
	return waitCount(n, timeout, func() (int, <-chan struct{}) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.got), m.changed
	})
}

// waitCount waits until the count read returns reaches n and returns it,
// less when timeout passed first; read also returns a channel closed when
// the count changes.
func waitCount(n int, timeout time.Duration, read func() (int, <-chan struct{})) int {
	deadline := time.After(timeout)
	for {
		got, ch := read()
		if got >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			return got
		}
	}
}

func (m *heldMaster) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.got)
}

// heldGateway is a slave whose gateway forwards to a heldMaster, with the
// slave's Options changed by mod.
func heldGateway(t *testing.T, mod func(*Options)) (*heldMaster, *testBroker) {
	t.Helper()
	m, slave, _ := heldGatewayWith(t, mod, nil)
	return m, slave
}

// heldGatewayWith is heldGateway with the gateway's options (MaxWait 30 s)
// changed by gmod too, and returns the gateway.
func heldGatewayWith(t *testing.T, mod func(*Options), gmod func(*GatewayOptions)) (*heldMaster, *testBroker, *Gateway) {
	t.Helper()
	m := newHeldMaster(t)
	slave := startBroker(t, gatewayConfig(t, "[site]\nforwardPuts=true"), mod)
	slave.RefuseWrites("slave", Refusal{Reason: "this broker is a slave"})
	o := &GatewayOptions{
		Holder:  "slave",
		Master:  func(context.Context) (string, error) { return m.ln.Addr().String(), nil },
		MaxWait: 30 * time.Second,
	}
	if gmod != nil {
		gmod(o)
	}
	g, err := slave.SetGateway(o)
	if err != nil {
		t.Fatal(err)
	}
	return m, slave, g
}

// fillGatewayBound sends, on a new connection to slave, as many puts of
// body to partition 0 as the gateway's bound of bound bytes lets through,
// and returns the connection once the held master m has got them all.
func fillGatewayBound(t *testing.T, m *heldMaster, slave *testBroker, body string, bound int) *client {
	t.Helper()
	n := bound / len(body)
	a := dial(t, slave.Addr())
	var buf []byte
	for i := range n {
		buf = putCmd("test", 0, body, int32(i+1)).AppendTo(buf)
	}
	a.send(buf)
	if got := m.waitFor(n, 20*time.Second); got != n {
		t.Fatalf("the master got %d puts of connection a, want %d", got, n)
	}
	return a
}

// TestGatewayPipelinesBeyondMaxInFlight: a producer connection's forwarded
// puts are not bounded by MaxInFlight while they wait for the master's
// answers (a WAN round trip): with 16 in flight at most per connection,
// 200 puts of one connection all reach the master before it answers any,
// and are all answered once it does; the connection's tokens come back
// (a later put is answered too).
func TestGatewayPipelinesBeyondMaxInFlight(t *testing.T) {
	const inFlight, n = 16, 200
	m, slave := heldGateway(t, func(o *Options) { o.MaxInFlight = inFlight })
	cl := dial(t, slave.Addr())
	var buf []byte
	for i := range n {
		buf = putCmd("test", int32(i%2), fmt.Sprintf("p-%03d", i), int32(i+1)).AppendTo(buf)
	}
	cl.send(buf)
	if got := m.waitFor(n, 20*time.Second); got < n {
		t.Fatalf("the master got %d of the connection's %d puts before answering any (MaxInFlight %d): forwarded puts wait on the connection's in-flight bound",
			got, n, inFlight)
	}
	m.release()
	seen := map[int32]bool{}
	for range n {
		r := cl.result()
		if r.Code != wire.StatusOK || seen[r.Opaque] {
			t.Fatalf("put %d answered %s (seen before: %v)", r.Opaque, r, seen[r.Opaque])
		}
		seen[r.Opaque] = true
		k := r.Opaque - 1
		if want := fmt.Sprintf("%d %d %d", 1000+k, k%2, 20*k); string(r.Body) != want {
			t.Fatalf("put %d answered %q, the master said %q", r.Opaque, r.Body, want)
		}
	}
	// Every token came back: more than MaxInFlight puts again.
	buf = buf[:0]
	for i := range 2 * inFlight {
		buf = putCmd("test", 0, "again", int32(n+1+i)).AppendTo(buf)
	}
	cl.send(buf)
	for range 2 * inFlight {
		if r := cl.result(); r.Code != wire.StatusOK {
			t.Fatalf("put after the first %d: %s", n, r)
		}
	}
}

// TestGatewayForwardedBodiesHoldBytes: the bodies of forwarded puts count
// against the connection's byte budget until they are answered, so a
// connection cannot pile up more of them than its budget while the master
// is slow to answer.
func TestGatewayForwardedBodiesHoldBytes(t *testing.T) {
	const budget, size, n = 8 << 10, 1 << 10, 64
	m, slave := heldGateway(t, func(o *Options) { o.MaxPendingBytes = budget })
	cl := dial(t, slave.Addr())
	body := strings.Repeat("x", size)
	var buf []byte
	for i := range n {
		buf = putCmd("test", 0, body, int32(i+1)).AppendTo(buf)
	}
	go func() {
		// The reader stops reading while the budget is used up: write
		// from here, the test's goroutine waits on the master.
		cl.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		cl.nc.Write(buf)
	}()
	m.waitFor(budget/size, 20*time.Second)
	// Nothing more may come while the bodies sent are not answered.
	time.Sleep(300 * time.Millisecond)
	if got := m.count(); got > budget/size {
		t.Fatalf("the master got %d puts of %d bytes unanswered, with a byte budget of %d per connection", got, size, budget)
	}
	m.release()
	for range n {
		if r := cl.result(); r.Code != wire.StatusOK {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
	}
}

// heldStore is a store whose appends are answered only once release is
// called: a disk slow to sync, seen from the put route.
type heldStore struct {
	Store
	mu       sync.Mutex
	msgs     int
	changed  chan struct{}
	held     []func()
	released bool
}

func (h *heldStore) AppendAsync(ctx context.Context, topic string, p int, msgs []store.Message, notify func([]store.Appended, error)) *store.PendingAppend {
	h.mu.Lock()
	h.msgs += len(msgs)
	close(h.changed)
	h.changed = make(chan struct{})
	released := h.released
	h.mu.Unlock()
	if released || notify == nil {
		return h.Store.AppendAsync(ctx, topic, p, msgs, notify)
	}
	return h.Store.AppendAsync(ctx, topic, p, msgs, func(as []store.Appended, err error) {
		h.mu.Lock()
		if !h.released {
			h.held = append(h.held, func() { notify(as, err) })
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		notify(as, err)
	})
}

func (h *heldStore) release() {
	h.mu.Lock()
	h.released = true
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// waitFor waits until n messages were handed to the store and returns how
// many were, fewer when timeout passed first.
func (h *heldStore) waitFor(n int, timeout time.Duration) int {
	return waitCount(n, timeout, func() (int, <-chan struct{}) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.msgs, h.changed
	})
}

// TestGatewayLinkServedWithMoreInFlight: a master serves a gateway link
// (ServeConn), one connection for a whole site's producers, with 8 x
// MaxInFlight requests in progress: with its store slow to answer, 6 x
// MaxInFlight puts of the link all reach the store.
func TestGatewayLinkServedWithMoreInFlight(t *testing.T) {
	const inFlight, n = 16, 6 * 16
	var hs *heldStore
	master := startBroker(t, gatewayConfig(t, ""), func(o *Options) {
		o.MaxInFlight = inFlight
		hs = &heldStore{Store: o.Store, changed: make(chan struct{})}
		o.Store = hs
	})
	defer hs.release()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		master.ServeConn(nc)
	}()
	cl := dial(t, ln.Addr())
	var buf []byte
	for i := range n {
		buf = putCmd("test", int32(i%2), fmt.Sprintf("p-%03d", i), int32(i+1)).AppendTo(buf)
	}
	cl.send(buf)
	if got := hs.waitFor(n, 20*time.Second); got < n {
		t.Fatalf("the master's store got %d of the gateway link's %d puts before answering any (MaxInFlight %d)", got, n, inFlight)
	}
	hs.release()
	for range n {
		if r := cl.result(); r.Code != wire.StatusOK {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
	}
	cl.nc.Close()
	<-served
}

// TestGatewayBoundsBytesInFlight: the gateway-wide bound on forwarded
// bytes awaiting the master's answers holds across producer connections:
// with a bound of 4 KiB and a master that answers nothing yet, one
// connection's four 1 KiB puts fill it; another connection's put is not
// sent, and is answered 503 naming forwardMaxInFlightBytes once its time
// (MaxWait) is up; a third connection's put waits for room and is sent
// and stored once the master answers the first four.
func TestGatewayBoundsBytesInFlight(t *testing.T) {
	const size, bound = 1 << 10, 4 << 10
	m, slave, g := heldGatewayWith(t, nil, func(o *GatewayOptions) {
		o.MaxInFlightBytes = bound
		o.MaxWait = 2 * time.Second
	})
	body := strings.Repeat("x", size)
	a := fillGatewayBound(t, m, slave, body, bound)
	b := dial(t, slave.Addr())
	b.send(putCmd("test", 1, body, 100).AppendTo(nil))
	if r := b.result(); r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "forwardMaxInFlightBytes") {
		t.Fatalf("a put beyond the gateway's bound (%d bytes in flight): %s, want 503 naming forwardMaxInFlightBytes", bound, r)
	}
	if got := m.count(); got != bound/size {
		t.Fatalf("the master got %d puts with %d bytes allowed in flight, want %d", got, bound, bound/size)
	}
	if st := g.Stats(); st.Full != 1 || st.InFlightBytes != bound {
		t.Fatalf("gateway stats %+v, want Full 1 and InFlightBytes %d", st, bound)
	}
	c := dial(t, slave.Addr())
	c.send(putCmd("test", 1, body, 200).AppendTo(nil))
	m.release()
	for range bound / size {
		if r := a.result(); r.Code != wire.StatusOK {
			t.Fatalf("connection a's put %d: %s", r.Opaque, r)
		}
	}
	if r := c.result(); r.Code != wire.StatusOK {
		t.Fatalf("a put that waited for room: %s", r)
	}
	if got := m.count(); got != bound/size+1 {
		t.Fatalf("the master got %d puts, want %d", got, bound/size+1)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := g.Stats().InFlightBytes; n != 0 {
			return fmt.Errorf("%d bytes in flight after every put was answered", n)
		}
		return nil
	})
}

// TestGatewayKeepsOrderAcrossConnections: puts of many producer
// connections forwarded at once, their frames built before Gateway.qmu and
// written by the connection's writer: each connection's puts to a
// partition reach the master in the order that connection sent them, and
// every put is answered stored.
func TestGatewayKeepsOrderAcrossConnections(t *testing.T) {
	const conns, per, chunk = 8, 200, 20
	m, slave := heldGateway(t, nil)
	m.release()
	cls := make([]*client, conns)
	for i := range cls {
		cls[i] = dial(t, slave.Addr())
	}
	for start := 0; start < per; start += chunk {
		for ci, cl := range cls {
			var buf []byte
			for k := start; k < start+chunk; k++ {
				buf = putCmd("test", int32(k%2), fmt.Sprintf("c%d-%04d", ci, k), int32(k+1)).AppendTo(buf)
			}
			cl.send(buf)
		}
	}
	for ci, cl := range cls {
		for range per {
			if r := cl.result(); r.Code != wire.StatusOK {
				t.Fatalf("connection %d, put %d: %s", ci, r.Opaque, r)
			}
		}
	}
	if got := m.waitFor(conns*per, 20*time.Second); got != conns*per {
		t.Fatalf("the master got %d puts, want %d", got, conns*per)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := map[string]string{} // connection and partition -> last body
	for _, p := range m.got {
		conn, _, _ := strings.Cut(string(p.Body), "-")
		key := fmt.Sprintf("%s/%d", conn, p.Partition)
		if prev, ok := last[key]; ok && prev >= string(p.Body) {
			t.Fatalf("the master got %q after %q: out of the order connection %s sent them to partition %d", p.Body, prev, conn, p.Partition)
		}
		last[key] = string(p.Body)
	}
}

// TestGatewayBoundReloads: a reload of [site] forwardMaxInFlightBytes
// applies to the running gateway, without a restart: with the bound (4
// KiB) full and a put of another connection waiting for room, raising it
// to 8 KiB sends that put at once; the reload reports the key applied,
// not as needing a restart; lowering it again shows in the stats.
func TestGatewayBoundReloads(t *testing.T) {
	const size, bound = 1 << 10, 4 << 10
	m, slave, g := heldGatewayWith(t, nil, func(o *GatewayOptions) { o.MaxInFlightBytes = bound })
	defer m.release()
	body := strings.Repeat("x", size)
	fillGatewayBound(t, m, slave, body, bound)
	b := dial(t, slave.Addr())
	b.send(putCmd("test", 1, body, 100).AppendTo(nil))
	ch, err := slave.Reload(gatewayConfig(t, fmt.Sprintf("[site]\nforwardPuts=true\nforwardMaxInFlightBytes=%d", 2*bound)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.AppliedKeys, []string{"site.forwardMaxInFlightBytes"}) || ch.NeedsRestart() {
		t.Fatalf("reload changes %+v, want site.forwardMaxInFlightBytes applied and no restart", ch)
	}
	if got := m.waitFor(bound/size+1, 20*time.Second); got != bound/size+1 {
		t.Fatalf("the master got %d puts after the bound was raised to %d bytes, want %d (stats %+v)", got, 2*bound, bound/size+1, g.Stats())
	}
	if st := g.Stats(); st.MaxInFlightBytes != 2*bound || st.InFlightBytes != bound+size {
		t.Fatalf("gateway stats %+v after the reload, want MaxInFlightBytes %d and InFlightBytes %d", st, 2*bound, bound+size)
	}
	if _, err := slave.Reload(gatewayConfig(t, "[site]\nforwardPuts=true\nforwardMaxInFlightBytes=2048")); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.MaxInFlightBytes != 2048 {
		t.Fatalf("gateway stats %+v after lowering the bound, want MaxInFlightBytes 2048", st)
	}
	m.release()
	if r := b.result(); r.Code != wire.StatusOK {
		t.Fatalf("the put sent once the bound was raised: %s", r)
	}
}
