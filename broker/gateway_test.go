package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/wire"
)

// gatewayConfig is the vectors' configuration with extra appended to it
// (forwardPuts keys, more topics).
func gatewayConfig(t *testing.T, extra string) *config.Server {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir, "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(t, append(data, "\n"+extra+"\n"...))
}

// gatewayPair starts a master and a slave that refuses writes as a slave
// does, with a gateway to the master; dials counts the connections it
// opens.
func gatewayPair(t *testing.T, slaveExtra string, o GatewayOptions) (master, slave *testBroker, g *Gateway, dials *atomic.Int32) {
	t.Helper()
	master = startBroker(t, gatewayConfig(t, "[topic=other]\nnumPartitions=1"), nil)
	slave = startBroker(t, gatewayConfig(t, slaveExtra), nil)
	slave.RefuseWrites("slave", Refusal{Reason: "this broker is a slave of " + master.URL()})
	dials = new(atomic.Int32)
	o.Holder = "slave"
	if o.Master == nil {
		o.Master = func(context.Context) (string, error) { return master.Addr().String(), nil }
	}
	o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	g, err := slave.SetGateway(&o)
	if err != nil {
		t.Fatal(err)
	}
	return master, slave, g, dials
}

// movingMaster is the master address a test's gateway finds
// (GatewayOptions.Master), which the test moves with Store; "" is no
// master registered yet, which Master says.
type movingMaster struct{ addr atomic.Value }

func (m *movingMaster) Store(addr string) { m.addr.Store(addr) }

func (m *movingMaster) find(context.Context) (string, error) {
	if a, _ := m.addr.Load().(string); a != "" {
		return a, nil
	}
	return "", errors.New("no master registered yet")
}

// movingGateway is gatewayPair with a master the test moves (none until
// it stores one).
func movingGateway(t *testing.T, slaveExtra string, o GatewayOptions) (master, slave *testBroker, g *Gateway, target *movingMaster) {
	t.Helper()
	target = &movingMaster{}
	o.Master = target.find
	master, slave, g, _ = gatewayPair(t, slaveExtra, o)
	return master, slave, g, target
}

// TestGatewayForwardsPuts: puts to a forwarded topic at a slave are
// answered with the master's id, partition and offset, where the master
// holds the record; the slave stores nothing; every client shares one
// connection to the master; puts of a connection to a partition keep their
// order at the master.
func TestGatewayForwardsPuts(t *testing.T) {
	master, slave, g, dials := gatewayPair(t, "[site]\nforwardPuts=true", GatewayOptions{})
	const clients, each = 3, 40
	cls := make([]*client, clients)
	for i := range cls {
		cls[i] = dial(t, slave.Addr())
	}
	for k, cl := range cls {
		var buf []byte
		for i := range each {
			buf = putCmd("test", int32(k%2), fmt.Sprintf("c%d-%03d", k, i), int32(i+1)).AppendTo(buf)
		}
		cl.send(buf)
	}
	for k, cl := range cls {
		var last int64 = -1
		for range each {
			r := cl.result()
			if r.Code != wire.StatusOK {
				t.Fatalf("client %d put %d: %s", k, r.Opaque, r)
			}
			a, err := parsePutAnswer(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(r.Body), fmt.Sprintf(" %d ", k%2)) {
				t.Fatalf("answer %q does not name partition %d", r.Body, k%2)
			}
			data, err := master.store.Read("test", k%2, a.Offset, 1<<10)
			if err != nil {
				t.Fatalf("client %d put %d answered at offset %d: %v", k, r.Opaque, a.Offset, err)
			}
			recs, _ := parseRecords(t, data)
			want := fmt.Sprintf("c%d-%03d", k, r.Opaque-1)
			if len(recs) == 0 || recs[0].id != a.ID || string(recs[0].body) != want {
				t.Fatalf("put %q answered %q, the master has %+v there", want, r.Body, recs)
			}
			// Answers come in the order of the puts (opaque order), and
			// their offsets grow: the master stored them in that order.
			if a.Offset <= last {
				t.Fatalf("client %d: put %d stored at %d, before the previous put's %d", k, r.Opaque, a.Offset, last)
			}
			last = a.Offset
		}
	}
	for p := range 2 {
		if partitionEnd(t, slave, "test", p) > 0 {
			t.Fatalf("the slave stored a forwarded put in test-%d", p)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections to the master for %d clients, want 1", n, clients)
	}
	if st := g.Stats(); st.Forwarded != clients*each || st.Unknown != 0 || st.NotSent != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGatewayRefusals: the master's refusal reaches the client as the
// master gave it (a topic the master does not accept; a closed partition);
// a topic that is not forwarded is refused by the slave as before; without
// a gateway a slave refuses every put.
func TestGatewayRefusals(t *testing.T) {
	master, slave, _, _ := gatewayPair(t, "[topic=onlyhere]\nforwardPuts=true\n[topic=other]\nforwardPuts=true\n[topic=notfwd]\nforwardPuts=false\n[site]\nforwardPuts=true", GatewayOptions{})
	cl := dial(t, slave.Addr())

	cl.sendCmd(putCmd("onlyhere", 0, "x", 1))
	r := cl.result()
	if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "The server do not accept topic onlyhere") ||
		!strings.Contains(string(r.Body), master.URL()) {
		t.Fatalf("put to a topic the master refuses: %s", r)
	}

	if err := master.ClosePartitions("other", 0, 0); err != nil {
		t.Fatal(err)
	}
	cl.sendCmd(putCmd("other", 0, "x", 2))
	r = cl.result()
	if r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "has been closed") {
		t.Fatalf("put to a partition closed at the master: %s", r)
	}

	cl.sendCmd(putCmd("notfwd", 0, "x", 3))
	r = cl.result()
	if r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "is a slave of") {
		t.Fatalf("put to a topic not forwarded: %s", r)
	}

	slave.SetGateway(nil)
	cl.sendCmd(putCmd("test", 0, "x", 4))
	r = cl.result()
	if r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "is a slave of") {
		t.Fatalf("put without a gateway: %s", r)
	}
	for p := range 2 {
		if partitionEnd(t, slave, "test", p) > 0 || partitionEnd(t, master, "test", p) > 0 {
			t.Fatalf("a refused put was stored in test-%d", p)
		}
	}
}

// TestGatewayOffByDefault: a slave with a gateway but no forwardPuts key
// refuses puts as MetaQ's slave does.
func TestGatewayOffByDefault(t *testing.T) {
	_, slave, g, dials := gatewayPair(t, "", GatewayOptions{})
	cl := dial(t, slave.Addr())
	cl.sendCmd(putCmd("test", 0, "x", 1))
	if r := cl.result(); r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "is a slave of") {
		t.Fatalf("put at a slave without forwardPuts: %s", r)
	}
	if dials.Load() != 0 || g.Stats().Forwarded != 0 {
		t.Fatalf("forwarded with forwardPuts unset: %d dials, %+v", dials.Load(), g.Stats())
	}
}

// TestGatewayFollowsMaster: while the master refuses as a slave (it handed
// over), puts are sent again to the master named then, and answered with
// its answer; a master that cannot be reached within MaxWait makes the put
// 503, not stored.
func TestGatewayFollowsMaster(t *testing.T) {
	target := &movingMaster{}
	// MaxWait well above the 150 ms the new master stays unnamed: under
	// -race on a loaded machine the redials to the old master took the
	// whole second before and the 403 was passed on.
	master, slave, g, dials := gatewayPair(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: 5 * time.Second, Master: target.find})
	target.Store(master.Addr().String())
	cl := dial(t, slave.Addr())
	cl.sendCmd(putCmd("test", 0, "first", 1))
	if r := cl.result(); r.Code != wire.StatusOK {
		t.Fatalf("first put: %s", r)
	}
	// The master becomes a slave of a new master, named only later.
	nu := startBroker(t, vectorConfig(t), nil)
	master.RefuseWrites("slave", Refusal{Reason: "this broker is a slave of " + nu.URL()})
	cl.sendCmd(putCmd("test", 0, "second", 2))
	cl.expectSilence(150 * time.Millisecond)
	target.Store(nu.Addr().String())
	r := cl.result()
	if r.Code != wire.StatusOK {
		t.Fatalf("put while the master moved: %s", r)
	}
	a, _ := parsePutAnswer(r.Body)
	data, err := nu.store.Read("test", 0, a.Offset, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := parseRecords(t, data); len(recs) == 0 || string(recs[0].body) != "second" {
		t.Fatalf("the new master holds %+v at %d", recs, a.Offset)
	}
	if dials.Load() < 2 || g.Stats().Retried == 0 {
		t.Fatalf("%d dials, stats %+v", dials.Load(), g.Stats())
	}

	// No master reachable: not stored, 503.
	nu.RefuseWrites("slave", Refusal{Reason: "this broker is a slave of nobody"})
	target.Store("127.0.0.1:1")
	cl.sendCmd(putCmd("test", 0, "third", 3))
	r = cl.result()
	if r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not stored") {
		t.Fatalf("put with no master: %s", r)
	}
	if got := partitionEnd(t, slave, "test", 0); got > 0 {
		t.Fatalf("the slave stored %d bytes", got)
	}
}

// TestGatewayKeepsOrderUntilConnected: puts that arrive before the
// gateway can reach the master (no master known yet) wait, and the
// connection's later puts go behind them: once the master is known they
// are stored there in arrival order, each answered once.
func TestGatewayKeepsOrderUntilConnected(t *testing.T) {
	master, slave, g, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: 2 * time.Second})
	cl := dial(t, slave.Addr())
	const reads, each = 6, 5
	for r := range reads {
		var buf []byte
		for i := range each {
			n := r*each + i
			buf = putCmd("test", 0, fmt.Sprintf("m%03d", n), int32(n+1)).AppendTo(buf)
		}
		cl.send(buf)
		time.Sleep(15 * time.Millisecond) // separate reads, each retried on its own before
		if r == reads/2 {
			target.Store(master.Addr().String())
		}
	}
	// Answers may come in any order (a client matches them by opaque);
	// the offsets, in the order of the puts, must grow.
	offsets := make([]int64, reads*each+1)
	for range reads * each {
		r := cl.result()
		if r.Code != wire.StatusOK {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		a, err := parsePutAnswer(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		offsets[r.Opaque] = a.Offset
	}
	for op := 2; op < len(offsets); op++ {
		if offsets[op] <= offsets[op-1] {
			t.Fatalf("put %d stored at %d, before the previous put's %d", op, offsets[op], offsets[op-1])
		}
	}
	if st := g.Stats(); st.Forwarded != reads*each || st.NotSent != 0 || st.Unknown != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGatewayKeepsOrderAcrossMasterMove: puts the old master refuses
// because it is a slave now are sent again to the new master before the
// puts that reached the gateway after them, so the new master stores one
// connection's puts to a partition in the order they were sent.
func TestGatewayKeepsOrderAcrossMasterMove(t *testing.T) {
	master, slave, _, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: 2 * time.Second})
	target.Store(master.Addr().String())
	cl := dial(t, slave.Addr())
	cl.sendCmd(putCmd("test", 0, "first", 1))
	if r := cl.result(); r.Code != wire.StatusOK {
		t.Fatalf("first put: %s", r)
	}
	nu := startBroker(t, vectorConfig(t), nil)
	master.RefuseWrites("slave", Refusal{Reason: "this broker is a slave of " + nu.URL()})
	target.Store(nu.Addr().String())
	const reads, each = 4, 5
	for r := range reads {
		var buf []byte
		for i := range each {
			n := 2 + r*each + i
			buf = putCmd("test", 0, fmt.Sprintf("m%03d", n), int32(n)).AppendTo(buf)
		}
		cl.send(buf)
		time.Sleep(3 * time.Millisecond) // separate reads
	}
	offsets := make([]int64, 2+reads*each)
	for range reads * each {
		r := cl.result()
		if r.Code != wire.StatusOK {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		a, err := parsePutAnswer(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		data, err := nu.store.Read("test", 0, a.Offset, 1<<10)
		if err != nil {
			t.Fatalf("put %d answered at %d: %v", r.Opaque, a.Offset, err)
		}
		if recs, _ := parseRecords(t, data); len(recs) == 0 || string(recs[0].body) != fmt.Sprintf("m%03d", r.Opaque) {
			t.Fatalf("put %d answered at %d, the new master has %+v there", r.Opaque, a.Offset, recs)
		}
		offsets[r.Opaque] = a.Offset
	}
	for op := 3; op < len(offsets); op++ {
		if offsets[op] <= offsets[op-1] {
			t.Fatalf("put %d stored at %d by the new master, before the previous put's %d", op, offsets[op], offsets[op-1])
		}
	}
}

// TestGatewayUnknownOutcome: a put sent to the master whose connection
// breaks before the master answers is answered 500, its outcome unknown,
// never as stored; the next put opens a new connection.
func TestGatewayUnknownOutcome(t *testing.T) {
	// A master that reads a put and goes away without answering.
	addr := serveConns(t, func(nc net.Conn) {
		buf := make([]byte, 1<<10)
		nc.Read(buf)
		nc.Close()
	})
	_, slave, g, dials := gatewayPair(t, "[site]\nforwardPuts=true", GatewayOptions{
		Master: func(context.Context) (string, error) { return addr, nil },
	})
	cl := dial(t, slave.Addr())
	for i := range 2 {
		cl.sendCmd(putCmd("test", 0, "lost", int32(i+1)))
		r := cl.result()
		if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "whether it is stored there is unknown") {
			t.Fatalf("put %d whose answer never came: %s", i+1, r)
		}
	}
	if st := g.Stats(); st.Unknown != 2 || st.Forwarded != 0 || dials.Load() != 2 {
		t.Fatalf("stats %+v, %d dials", st, dials.Load())
	}
}

// TestGatewayLeavesASilentMaster: a master that keeps the connection open
// but answers nothing (a paused process, whose kernel still accepts and
// acknowledges) makes the put 500, outcome unknown, and the gateway leaves
// that connection: the next put asks for the master again and reaches the
// one promoted meanwhile, instead of going to the silent one until it
// resumes.
func TestGatewayLeavesASilentMaster(t *testing.T) {
	// A master that reads everything and never answers nor closes. Its
	// cleanup, registered before the brokers', runs after theirs.
	silent := serveConns(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
	master, slave, g, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: 300 * time.Millisecond})
	target.Store(silent)
	cl := dial(t, slave.Addr())
	cl.sendCmd(putCmd("test", 0, "to the silent master", 1))
	if r := cl.result(); r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "whether it is stored there is unknown") {
		t.Fatalf("put to a master that does not answer: %s", r)
	}
	// Another site was promoted: ZooKeeper names it now.
	target.Store(master.Addr().String())
	cl.sendCmd(putCmd("test", 0, "to the new master", 2))
	r := cl.result()
	if r.Code != wire.StatusOK {
		t.Fatalf("put after the master moved, while the silent master still holds the connection open: %s (stats %+v)", r, g.Stats())
	}
	a, _ := parsePutAnswer(r.Body)
	data, err := master.store.Read("test", 0, a.Offset, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := parseRecords(t, data); len(recs) == 0 || string(recs[0].body) != "to the new master" {
		t.Fatalf("the new master holds %+v at %d", recs, a.Offset)
	}
}

// TestGatewayFollowsANewMasterAtOnce: the gateway's connection goes to a
// master that went silent (paused) with a put in flight; the site then
// learns that another master was promoted (FollowMaster). The next put
// reaches the new master well within MaxWait, without waiting for the
// silent connection's put to time out, and the put in flight is not sent
// again to the new master (its outcome stays unknown).
func TestGatewayFollowsANewMasterAtOnce(t *testing.T) {
	got := make(chan struct{}, 1)
	silent := serveConns(t, func(nc net.Conn) {
		buf := make([]byte, 4096)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
			select {
			case got <- struct{}{}:
			default:
			}
		}
	})
	const maxWait = 8 * time.Second
	master, slave, g, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: maxWait})
	target.Store(silent)
	first := dial(t, slave.Addr())
	first.sendCmd(putCmd("test", 0, "to the silent master", 1))
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the put never reached the silent master")
	}
	// Another site was promoted: ZooKeeper names it, and the site tells
	// the gateway.
	target.Store(master.Addr().String())
	g.FollowMaster(master.Addr().String())
	second := dial(t, slave.Addr())
	began := time.Now()
	second.sendCmd(putCmd("test", 0, "to the new master", 1))
	// Before the put's time is up: a gateway that stays on the silent
	// connection answers nothing until its time and MaxWait are up.
	second.nc.SetReadDeadline(began.Add(maxWait))
	cmd, err := second.d.Decode()
	if err != nil {
		t.Fatalf("no answer within MaxWait (%v) after the master moved: %v (stats %+v)", maxWait, err, g.Stats())
	}
	r, ok := cmd.(*wire.Result)
	if !ok || r.Code != wire.StatusOK {
		t.Fatalf("put after the master moved: %v", cmd)
	}
	t.Logf("answered by the new master after %v", time.Since(began).Round(time.Millisecond))
	data, err := master.store.Read("test", 0, 0, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := parseRecords(t, data); len(recs) != 1 || string(recs[0].body) != "to the new master" {
		t.Fatalf("the new master holds %+v, want only the put sent after it was named", recs)
	}
	// The put in flight at the silent master is still unanswered: it is
	// not sent again, and its outcome is unknown only after its time.
	first.nc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if cmd, err := first.d.Decode(); err == nil {
		t.Fatalf("the put in flight at the silent master was answered %v before its time", cmd)
	}
}

// frozenMaster is a master that accepts TCP connections (its kernel does)
// and never answers a gateway link's handshake: a paused process. dial is
// a LinkDial that, to that address, writes a hello and waits for the
// answer up to a fixed handshake deadline that ignores its context, as the
// gateway link's handshake did; other addresses are dialed plainly.
// handshaking receives each time a handshake with it begins. The client
// sides it opened are closed by a cleanup registered by the caller after
// the brokers start (so the brokers' close does not wait out handshakes).
type frozenMaster struct {
	addr        string
	handshaking chan struct{}
	mu          sync.Mutex
	open        []net.Conn
}

func newFrozenMaster(t *testing.T) *frozenMaster {
	t.Helper()
	f := &frozenMaster{handshaking: make(chan struct{}, 16)}
	f.addr = serveConns(t, func(nc net.Conn) { io.Copy(io.Discard, nc) })
	return f
}

const fakeHandshakeTimeout = 10 * time.Second

func (f *frozenMaster) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || addr != f.addr {
		return nc, err
	}
	f.mu.Lock()
	f.open = append(f.open, nc)
	f.mu.Unlock()
	f.handshaking <- struct{}{}
	nc.SetDeadline(time.Now().Add(fakeHandshakeTimeout))
	if _, err = nc.Write([]byte{0xA8, 'P'}); err == nil {
		if _, err = nc.Read(make([]byte, 1)); err == nil {
			err = errors.New("a frozen master answered")
		}
	}
	nc.Close()
	return nil, fmt.Errorf("handshake with %s: %w", addr, err)
}

func (f *frozenMaster) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, nc := range f.open {
		nc.Close()
	}
}

// TestGatewayLeavesADialToAFrozenMaster: the gateway has no connection
// and ZooKeeper still names the old master, which is frozen (its kernel
// accepts, the handshake never answers); while the dial hangs, the site
// learns of the new master (FollowMaster). The puts waiting for that dial,
// and those after them, are answered by the new master, in order, well
// within MaxWait and the handshake's deadline: the dial does not hold the
// gateway's locks, and FollowMaster gives it up.
func TestGatewayLeavesADialToAFrozenMaster(t *testing.T) {
	frozen := newFrozenMaster(t)
	const maxWait = 4 * time.Second
	master, slave, g, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: maxWait, LinkDial: frozen.dial})
	t.Cleanup(frozen.closeAll)
	target.Store(frozen.addr)
	cl := dial(t, slave.Addr())
	cl.sendCmd(putCmd("test", 0, "waits for the dial", 1))
	select {
	case <-frozen.handshaking:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never dialed the frozen master")
	}
	// Another site was promoted: the site's ZooKeeper names it now.
	began := time.Now()
	target.Store(master.Addr().String())
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		g.FollowMaster(master.Addr().String())
	}()
	cl.sendCmd(putCmd("test", 0, "after the promotion", 2))
	cl.nc.SetReadDeadline(began.Add(maxWait))
	// Answers come as the master gives them (the client matches them by
	// opaque); the order that counts is the master's, checked below.
	answered := map[int32]bool{}
	for i := range 2 {
		cmd, err := cl.d.Decode()
		if err != nil {
			t.Fatalf("answer %d: none within MaxWait (%v) after the new master was named, the handshake hangs for %v: %v (stats %+v)",
				i+1, maxWait, fakeHandshakeTimeout, err, g.Stats())
		}
		r, ok := cmd.(*wire.Result)
		if !ok || r.Code != wire.StatusOK || answered[r.Opaque] {
			t.Fatalf("answer %d after the master moved: %v", i+1, cmd)
		}
		answered[r.Opaque] = true
	}
	t.Logf("both answered by the new master %v after it was named", time.Since(began).Round(time.Millisecond))
	select {
	case <-followed:
	case <-time.After(time.Second):
		t.Fatal("FollowMaster still waits while the dial to the frozen master hangs")
	}
	data, err := master.store.Read("test", 0, 0, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := parseRecords(t, data)
	if len(recs) != 2 || string(recs[0].body) != "waits for the dial" || string(recs[1].body) != "after the promotion" {
		t.Fatalf("the new master holds %+v, want both puts in order", recs)
	}
}

// TestGatewayDialWithinAPutsTime: a put that waits for a dial to a frozen
// master is answered 503, not sent, once its time (MaxWait) is up, not
// when the handshake's own deadline passes.
func TestGatewayDialWithinAPutsTime(t *testing.T) {
	frozen := newFrozenMaster(t)
	const maxWait = time.Second
	_, slave, g, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: maxWait, LinkDial: frozen.dial})
	t.Cleanup(frozen.closeAll)
	target.Store(frozen.addr)
	cl := dial(t, slave.Addr())
	began := time.Now()
	cl.sendCmd(putCmd("test", 0, "to the frozen master", 1))
	cl.nc.SetReadDeadline(began.Add(fakeHandshakeTimeout - time.Second))
	cmd, err := cl.d.Decode()
	if err != nil {
		t.Fatalf("no answer before the handshake's deadline (%v), MaxWait %v: %v (stats %+v)", fakeHandshakeTimeout, maxWait, err, g.Stats())
	}
	if r, ok := cmd.(*wire.Result); !ok || r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not sent") {
		t.Fatalf("put to a frozen master: %v", cmd)
	}
	t.Logf("answered 503 after %v", time.Since(began).Round(time.Millisecond))
}
