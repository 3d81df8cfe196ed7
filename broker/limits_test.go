package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// version does one version round trip, proving the connection is served.
func (c *client) version() error {
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write((&wire.Version{Opaque: 7}).AppendTo(nil)); err != nil {
		return err
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	cmd, err := c.d.Decode()
	if err != nil {
		return err
	}
	if r, ok := cmd.(*wire.Result); !ok || !r.OK() {
		return fmt.Errorf("version answered %v", cmd)
	}
	return nil
}

// dialFrom connects from a given loopback source address.
func dialFrom(t testing.TB, addr net.Addr, src string) *client {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { nc.Close() })
	r := bufio.NewReader(nc)
	return &client{t: t, nc: nc, r: r, d: wire.NewDecoder(r)}
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *logCapture) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			n++
		}
	}
	return n
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitResources(t testing.TB, b *testBroker, what string, ok func(Resources) bool) Resources {
	t.Helper()
	var last Resources
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		last = b.Resources()
		if !ok(last) {
			return fmt.Errorf("waiting for %s: %+v", what, last)
		}
		return nil
	})
	return last
}

func TestMaxConnections(t *testing.T) {
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.MaxConnections = 3
		o.Logger = slogTo(logs)
	})
	var open []*client
	for range 3 {
		cl := dial(t, brk.Addr())
		if err := cl.version(); err != nil {
			t.Fatal(err)
		}
		open = append(open, cl)
	}
	for range 5 {
		over := dial(t, brk.Addr())
		over.expectClosed(5 * time.Second)
	}
	if r := brk.Resources(); r.RefusedMaxConnections != 5 || r.Connections != 3 {
		t.Fatalf("resources %+v, want 5 refused and 3 open", r)
	}
	if n := logs.count("too many connections"); n != 1 {
		t.Fatalf("refusals logged %d times, want once (rate-limited)", n)
	}
	// The connections admitted are still served; once one closes, a new
	// one is admitted.
	if err := open[0].version(); err != nil {
		t.Fatal(err)
	}
	open[2].nc.Close()
	waitResources(t, brk, "a slot to free", func(r Resources) bool { return r.Connections == 2 })
	if err := dial(t, brk.Addr()).version(); err != nil {
		t.Fatalf("a connection under the limit again: %v", err)
	}
}

func TestMaxConnectionsPerAddress(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.MaxConnectionsPerAddress = 2 })
	for range 2 {
		if err := dialFrom(t, brk.Addr(), "127.0.0.1").version(); err != nil {
			t.Fatal(err)
		}
	}
	dialFrom(t, brk.Addr(), "127.0.0.1").expectClosed(5 * time.Second)
	// Another address has its own allowance.
	for range 2 {
		if err := dialFrom(t, brk.Addr(), "127.0.0.2").version(); err != nil {
			t.Fatalf("from 127.0.0.2: %v", err)
		}
	}
	dialFrom(t, brk.Addr(), "127.0.0.2").expectClosed(5 * time.Second)
	if r := brk.Resources(); r.RefusedPerAddress != 2 || r.RefusedMaxConnections != 0 || r.Connections != 4 {
		t.Fatalf("resources %+v, want 2 refused per address and 4 open", r)
	}
}

// TestIdleConnectionsClosed opens 2,000 connections that never send
// anything: all are closed by the idle timeout.
func TestIdleConnectionsClosed(t *testing.T) {
	const n = 2000
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.IdleTimeout = 500 * time.Millisecond
		// All n come from one address; the per-address default (1,000)
		// would refuse half of them when they are dialled faster than the
		// idle timeout closes the first ones.
		o.MaxConnectionsPerAddress = 2 * n
		o.Logger = slog.New(slog.DiscardHandler) // 2,000 connections' logs
	})
	conns := make([]net.Conn, 0, n)
	for range n {
		nc, err := net.DialTimeout("tcp", brk.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conns = append(conns, nc)
	}
	t.Cleanup(func() {
		for _, nc := range conns {
			nc.Close()
		}
	})
	waitResources(t, brk, "idle connections to close", func(r Resources) bool { return r.ClosedIdle == n && r.Connections == 0 })
	// The client side sees each one closed.
	buf := make([]byte, 1)
	for _, nc := range conns[:50] {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Read(buf); err == nil || isTimeout(err) {
			t.Fatalf("connection not closed by the broker: %v", err)
		}
	}
}

// TestHeartbeatingClientKept: a client that sends a heartbeat (version)
// more often than the idle timeout, as the Java client does every 10 s of
// silence, is never closed; one that stops is.
func TestHeartbeatingClientKept(t *testing.T) {
	const idle = time.Second
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.IdleTimeout = idle })
	cl := dial(t, brk.Addr())
	for i := 0; i < 12; i++ {
		if err := cl.version(); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		time.Sleep(idle / 5)
	}
	if r := brk.Resources(); r.ClosedIdle != 0 {
		t.Fatalf("a heartbeating client was closed: %+v", r)
	}
	cl.expectClosed(20 * idle)
	if r := brk.Resources(); r.ClosedIdle != 1 {
		t.Fatalf("resources %+v, want the silent client closed as idle", r)
	}
}

// TestIdleTimeoutWaitsForAnswers: a client that sent a request and waits
// for its answer is not idle, however long the answer takes.
func TestIdleTimeoutWaitsForAnswers(t *testing.T) {
	const idle = 300 * time.Millisecond
	release, appending := make(chan struct{}), make(chan struct{}, 1)
	hs := &hookStore{}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.IdleTimeout = idle
		hs.Store = o.Store
		hs.append = func(string) error {
			appending <- struct{}{}
			<-release
			return nil
		}
		o.Store = hs
	})
	cl := dial(t, brk.Addr())
	cl.sendCmd(putCmd("test", 0, "slow", 1))
	// Until the broker has read the put the connection is idle; on a loaded
	// machine that alone can last longer than idle.
	select {
	case <-appending:
	case <-time.After(30 * time.Second):
		t.Fatal("the put never reached the store")
	}
	time.Sleep(5 * idle)
	close(release)
	if r := cl.result(); !r.OK() {
		t.Fatalf("put answered %s", r)
	}
	if r := brk.Resources(); r.ClosedIdle != 0 {
		t.Fatalf("closed while awaiting an answer: %+v", r)
	}
}

// TestSlowlorisClosed: clients that send a request a byte at a time, in
// its header line or in its body, are closed once ReadTimeout has passed
// since the request began, although each byte arrives well within it.
func TestSlowlorisClosed(t *testing.T) {
	const readTimeout = 600 * time.Millisecond
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.ReadTimeout = readTimeout
		o.IdleTimeout = time.Hour
		o.Logger = slogTo(logs)
	})
	put := putCmd("test", 0, strings.Repeat("b", 1000), 1).AppendTo(nil)
	head := put[:bytes.Index(put, []byte("\r\n"))+2]
	cases := map[string][]byte{
		"header line": head,
		"body":        put[len(head)-2:], // the header arrives at once, then the body slowly
	}
	var wg sync.WaitGroup
	closed := make(chan string, len(cases))
	for name, slow := range cases {
		cl := dial(t, brk.Addr())
		if name == "body" {
			cl.send(head)
			slow = put[len(head):]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range slow {
				cl.nc.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := cl.nc.Write([]byte{b}); err != nil {
					closed <- name
					return
				}
				time.Sleep(readTimeout / 6)
			}
		}()
		go func() {
			cl.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			var buf [64]byte
			if _, err := cl.nc.Read(buf[:]); err != nil && !isTimeout(err) {
				closed <- name
			}
		}()
	}
	for range cases {
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatal("a slowloris client is still connected")
		}
	}
	waitResources(t, brk, "both closed", func(r Resources) bool { return r.ClosedReadTimeout == 2 && r.Connections == 0 })
	if !logs.contains("do not send a whole request in time") {
		t.Fatal("no warning names the cause")
	}
	// A client that sends whole requests keeps being served.
	if err := dial(t, brk.Addr()).version(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// largeGetConfig is the vector config with MetaQ's shipped maxTransferSize.
func largeGetConfig(t testing.TB) []byte {
	return bytes.Replace(iniWith(t, ""), []byte("maxTransferSize=1048576"), []byte("maxTransferSize=104857600"), 1)
}

// fillPartition stores n messages of size bytes in test-0.
func fillPartition(t testing.TB, b *testBroker, n, size int) {
	t.Helper()
	cl := dial(t, b.Addr())
	body := strings.Repeat("m", size)
	for range n {
		mustPut(t, cl, "test", 0, body)
	}
	cl.nc.Close()
}

// attack opens n connections that each pipeline gets of maxSize bytes and
// never read an answer.
func attack(t testing.TB, addr net.Addr, n, gets int) []*client {
	var out []*client
	for range n {
		cl := dial(t, addr)
		cl.nc.(*net.TCPConn).SetReadBuffer(4096)
		var buf []byte
		for i := range gets {
			buf = (&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100 << 20, Opaque: int32(i)}).AppendTo(buf)
		}
		cl.send(buf)
		out = append(out, cl)
	}
	return out
}

// TestBufferedBytesBounded: many clients asking for large gets and never
// reading never make the broker hold more than MaxBufferedBytes of
// answers, and what they held is released when they go.
func TestBufferedBytesBounded(t *testing.T) {
	const share, bound = 2 << 20, 6 << 20
	brk := startBroker(t, parseConfig(t, largeGetConfig(t)), func(o *Options) {
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = bound
		o.MaxAddressBufferedBytes = bound // one address: the broker-wide bound is what is tested
		o.StallTimeout = time.Hour        // no relief: the bound alone holds
		o.WriteTimeout = time.Hour
	})
	fillPartition(t, brk, 32, 256<<10) // 8 MiB
	clients := attack(t, brk.Addr(), 20, 20)
	// Saturated: the broker holds (nearly) all it may, and no more.
	waitResources(t, brk, "the budget to fill", func(r Resources) bool { return r.BufferedBytes > bound-share })
	time.Sleep(300 * time.Millisecond)
	r := brk.Resources()
	if r.BufferedBytesPeak > bound || r.BufferedBytes > bound {
		t.Fatalf("held %d bytes (peak %d), bound %d", r.BufferedBytes, r.BufferedBytesPeak, bound)
	}
	// Every connection is held to its share.
	brk.mu.Lock()
	for c := range brk.conns {
		if u := c.bytes.used(); u > share {
			t.Errorf("a connection holds %d bytes, share %d", u, share)
		}
	}
	brk.mu.Unlock()
	for _, cl := range clients {
		cl.nc.Close()
	}
	r = waitResources(t, brk, "the bytes to be released", func(r Resources) bool { return r.Connections == 0 && r.BufferedBytes == 0 })
	if r.BufferedBytesPeak > bound {
		t.Fatalf("peak %d above the bound %d", r.BufferedBytesPeak, bound)
	}
}

// TestConsumerProgressUnderAttack: while non-reading clients fill the
// byte budget, a consumer that reads its answers is still served, long
// before the write timeout would free anything.
func TestConsumerProgressUnderAttack(t *testing.T) {
	const share, bound = 2 << 20, 6 << 20
	brk := startBroker(t, parseConfig(t, largeGetConfig(t)), func(o *Options) {
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = bound
		o.MaxAddressBufferedBytes = bound // one address: the broker-wide bound is what is tested
		o.StallTimeout = time.Second
		o.WriteTimeout = time.Hour
	})
	fillPartition(t, brk, 32, 256<<10)
	attack(t, brk.Addr(), 20, 20)
	waitResources(t, brk, "the budget to fill", func(r Resources) bool { return r.BufferedBytes > bound-share })
	cl := dial(t, brk.Addr())
	var off int64
	for i := range 5 {
		cl.sendCmd(&wire.Get{Topic: "test", Group: "c", Partition: 0, Offset: off, MaxSize: 1 << 20, Opaque: int32(i)})
		// It waits its turn behind the non-readers' gets queued before it
		// (each round of them is closed after StallTimeout): no deadline
		// but the test's, far below the write timeout.
		cl.nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
		cmd, err := cl.d.Decode()
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		v, ok := cmd.(*wire.Value)
		if !ok {
			t.Fatalf("get %d answered %v, not data", i, cmd)
		}
		recs, _ := parseRecords(t, v.Data)
		if len(recs) == 0 {
			t.Fatalf("get %d: no whole record in %d bytes", i, len(v.Data))
		}
		for _, rec := range recs {
			off += int64(20 + len(rec.body))
		}
	}
	r := brk.Resources()
	if r.ClosedStalled == 0 {
		t.Fatalf("no stalled connection was closed: %+v", r)
	}
	if r.BufferedBytesPeak > bound {
		t.Fatalf("peak %d above the bound %d", r.BufferedBytesPeak, bound)
	}
}

// TestGetAnswerCappedToShare: a get's answer is at most the connection's
// share of the budget, and holds whole records up to it.
func TestGetAnswerCappedToShare(t *testing.T) {
	const share = 1 << 20
	brk := startBroker(t, parseConfig(t, largeGetConfig(t)), func(o *Options) { o.MaxPendingBytes = share })
	fillPartition(t, brk, 40, 64<<10)
	cl := dial(t, brk.Addr())
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100 << 20, Opaque: 1})
	v := cl.read().(*wire.Value)
	if len(v.Data) != share {
		t.Fatalf("answer of %d bytes, want the %d-byte share", len(v.Data), share)
	}
}

// TestLargeGetReadInPieces: an answer longer than readPiece is assembled
// from several store reads and is byte for byte what one read gives.
func TestLargeGetReadInPieces(t *testing.T) {
	brk := startBroker(t, parseConfig(t, largeGetConfig(t)), func(o *Options) { o.CopyGets = true })
	fillPartition(t, brk, 10, 1<<20+7)
	want, err := brk.store.Read("test", 0, 3, 9<<20)
	if err != nil {
		t.Fatal(err)
	}
	cl := dial(t, brk.Addr())
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 3, MaxSize: 9 << 20, Opaque: 1})
	v := cl.read().(*wire.Value)
	if !bytes.Equal(v.Data, want) {
		t.Fatalf("answer of %d bytes differs from the store's %d", len(v.Data), len(want))
	}
	if r := brk.Resources(); r.BufferedBytes != 0 {
		t.Fatalf("%d bytes still held after the answer", r.BufferedBytes)
	}
}

// TestPutBodiesBounded: bodies of puts still arriving count against the
// budget too. Clients that declare large bodies and send them slowly hold
// at most MaxBufferedBytes; the others wait unread; all is released when
// they go, and puts work again.
func TestPutBodiesBounded(t *testing.T) {
	const share, bound = 2 << 20, 4 << 20
	const body = 1 << 20
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = bound
		o.MaxAddressBufferedBytes = bound // one address: the broker-wide bound is what is tested
		o.ReadTimeout = time.Hour
	})
	put := putCmd("test", 0, strings.Repeat("p", body), 1).AppendTo(nil)
	var clients []*client
	for range 10 {
		cl := dial(t, brk.Addr())
		cl.send(put[:len(put)-body/2]) // half the body, then nothing
		clients = append(clients, cl)
	}
	waitResources(t, brk, "the budget to fill", func(r Resources) bool { return r.BufferedBytes == bound })
	time.Sleep(200 * time.Millisecond)
	if r := brk.Resources(); r.BufferedBytesPeak > bound {
		t.Fatalf("peak %d above the bound %d", r.BufferedBytesPeak, bound)
	}
	for _, cl := range clients {
		cl.nc.Close()
	}
	waitResources(t, brk, "the bytes to be released", func(r Resources) bool { return r.Connections == 0 && r.BufferedBytes == 0 })
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, strings.Repeat("q", body))
	if r := brk.Resources(); r.BufferedBytes != 0 || r.BufferedBytesPeak > bound {
		t.Fatalf("after a put: %+v", r)
	}
}

// TestByteBudgetShares: a connection's budget draws from the broker's;
// detach gives back what it still holds.
func TestByteBudgetShares(t *testing.T) {
	ctx := context.Background()
	pool := newByteBudget(100, nil)
	a := newByteBudget(60, pool)
	b := newByteBudget(60, pool)
	if err := a.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if a.tryAcquire(1) {
		t.Fatal("a connection took more than its share")
	}
	if b.tryAcquire(50) {
		t.Fatal("the shares together took more than the pool")
	}
	if !b.tryAcquire(40) {
		t.Fatal("the rest of the pool is not available")
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(cctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire over the pool: %v", err)
	}
	if got := b.used(); got != 40 {
		t.Fatalf("a failed acquire kept %d bytes of the share", got-40)
	}
	if held := a.detach(); held != 60 || pool.used() != 40 {
		t.Fatalf("detach gave back %d, pool holds %d", held, pool.used())
	}
	a.release(60) // after detach: no effect on the pool
	if pool.used() != 40 || pool.peakUsed() != 100 {
		t.Fatalf("pool holds %d (peak %d)", pool.used(), pool.peakUsed())
	}
}

// TestSyncLinkNotIdle: a synchronous master's link to its slave sends no
// heartbeats; the slave never closes it as idle, however quiet the master.
func TestSyncLinkNotIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) {
		o.SyncReceiver = true
		o.IdleTimeout = idle
	})
	logs := &logCapture{t: t}
	master := startBroker(t, cfg, func(o *Options) {
		o.SyncSlave = slave.Addr().String()
		o.Logger = slogTo(logs)
	})
	mc := dial(t, master.Addr())
	mustPut(t, mc, "test", 1, "before")
	time.Sleep(5 * idle)
	mustPut(t, mc, "test", 1, "after")
	if logs.contains("lost connection to slave") {
		t.Fatal("the slave closed the master's quiet link")
	}
	if r := slave.Resources(); r.ClosedIdle != 0 {
		t.Fatalf("slave resources %+v", r)
	}
}

// TestMaxConnectionsWithinFileLimit: the connection limit stays at or
// below three quarters of the open-file limit, so that connections cannot
// take the descriptors the store needs.
func TestMaxConnectionsWithinFileLimit(t *testing.T) {
	fl := fileLimit()
	if fl == 0 {
		t.Skip("no open-file limit known on this platform")
	}
	for _, asked := range []int{0, 1 << 30} {
		o := Options{MaxConnections: asked}
		o.applyLimits(config.Limits{})
		if o.MaxConnections != fl*3/4 {
			t.Errorf("asked %d: limit %d, want %d (¾ of %d)", asked, o.MaxConnections, fl*3/4, fl)
		}
	}
	o := Options{MaxConnections: 10}
	o.applyLimits(config.Limits{MaxConnections: 500})
	if o.MaxConnections != 10 {
		t.Errorf("an option below the file limit became %d", o.MaxConnections)
	}
}

// TestPressureShrinksAnswers: while half the broker's budget is in use,
// a get answers at most 1 MiB, but always its first record whole; once the
// pressure is gone, answers are full size again.
func TestPressureShrinksAnswers(t *testing.T) {
	const share, bound = 4 << 20, 6 << 20
	brk := startBroker(t, parseConfig(t, largeGetConfig(t)), func(o *Options) {
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = bound
		o.MaxAddressBufferedBytes = bound // one address: the broker-wide bound is what is tested
		o.StallTimeout = time.Hour
		o.WriteTimeout = time.Hour
	})
	fillPartition(t, brk, 32, 256<<10) // test-0: 8 MiB of small records
	big := strings.Repeat("B", 3<<19)  // 1.5 MiB
	cl := dial(t, brk.Addr())
	for range 3 {
		mustPut(t, cl, "test", 1, big)
	}
	get := func(p int32) int {
		t.Helper()
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: p, MaxSize: share, Opaque: 1})
		v, ok := cl.read().(*wire.Value)
		if !ok {
			t.Fatal("no data")
		}
		return len(v.Data)
	}
	if n := get(0); n != share {
		t.Fatalf("answer of %d bytes without pressure, want %d", n, share)
	}
	attacker := attack(t, brk.Addr(), 1, 1)[0]
	waitResources(t, brk, "the non-reader's answer", func(r Resources) bool { return r.BufferedBytes >= share })
	if n := get(0); n != pressuredAnswer {
		t.Fatalf("answer of %d bytes under pressure, want %d", n, pressuredAnswer)
	}
	if n, want := get(1), 20+len(big); n != want {
		t.Fatalf("answer of %d bytes under pressure, want the first record whole (%d)", n, want)
	}
	attacker.nc.Close()
	waitResources(t, brk, "the pressure to end", func(r Resources) bool { return r.BufferedBytes == 0 })
	if n := get(0); n != share {
		t.Fatalf("answer of %d bytes after the pressure, want %d", n, share)
	}
}

// TestPutHeadersFromOneAddress: put headers declaring large bodies that
// never come, from one address, hold at most that address's share of the
// broker's byte budget, and only until the budget is contested for
// StallTimeout; clients at another address keep having their puts and gets
// answered promptly all the while.
func TestPutHeadersFromOneAddress(t *testing.T) {
	const share, bound, declared = 4 << 20, 8 << 20, 2<<20 - 1
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = bound
		o.ReadTimeout = time.Hour // the body timeout alone would free nothing for an hour
		o.StallTimeout = 300 * time.Millisecond
		o.Logger = slogTo(logs)
	})
	attacker := netip.MustParseAddr("127.0.0.1")
	for i := range 48 {
		cl := dialFrom(t, brk.Addr(), attacker.String())
		cl.send(fmt.Appendf(nil, "put test 0 %d 0 %d\r\n", declared, i))
	}
	waitResources(t, brk, "the attacker's share to fill", func(r Resources) bool { return r.BufferedBytes >= 2*declared })

	victim := dialFrom(t, brk.Addr(), "127.0.0.2")
	deadline := time.Now().Add(3 * time.Second) // several rounds of the attacker's connections being closed
	for i := 0; time.Now().Before(deadline); i++ {
		start := time.Now()
		victim.sendCmd(putCmd("test", 0, fmt.Sprintf("victim %d", i), int32(i)))
		// The bound stands for "not held until the attacker's hour-long read
		// timeout": a loaded machine alone can make one answer take a second.
		raw, err := victim.readRaw(10 * time.Second)
		if err != nil || !strings.HasPrefix(string(raw), "result 200 ") {
			t.Fatalf("put %d while another address attacks: %q, %v", i, raw, err)
		}
		victim.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 64 << 10, Opaque: int32(i)})
		if raw, err = victim.readRaw(10 * time.Second); err != nil || !strings.HasPrefix(string(raw), "value ") {
			t.Fatalf("get %d while another address attacks: %q, %v", i, raw, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Logf("put and get %d took %v", i, took)
		}
		if u := brk.limits.addressUsed(attacker); u > share {
			t.Fatalf("one address holds %d bytes, its share is %d", u, share)
		}
	}
	r := brk.Resources()
	if r.BufferedBytesPeak > bound {
		t.Fatalf("peak %d above the bound %d", r.BufferedBytesPeak, bound)
	}
	if r.ClosedSilentBody == 0 || !logs.contains("reserved a put body and send none of it") {
		t.Fatalf("no connection holding an unsent body was closed (or none was logged): %+v", r)
	}
}
