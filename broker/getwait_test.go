package broker

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// getAtEnd puts one message into test-0 and returns a get at the
// partition's end.
func getAtEnd(t *testing.T, brk *testBroker, c *client, opaque int32) *wire.Get {
	t.Helper()
	c.sendCmd(putCmd("test", 0, "first", opaque-1))
	if r := c.result(); !r.OK() {
		t.Fatalf("put: %v", r)
	}
	info, err := brk.store.Partition("test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: info.Max, MaxSize: 1 << 20, Opaque: opaque}
}

// startHeldGet starts a broker with mod (which sets GetWait), puts one
// message into test-0 on a producer connection p and sends a get at the
// partition's end (opaque 2) on a consumer connection c, and returns once
// that get is held.
func startHeldGet(t *testing.T, mod func(*Options)) (brk *testBroker, p, c *client) {
	t.Helper()
	brk = startBroker(t, vectorConfig(t), mod)
	p = dial(t, brk.Addr())
	c = dial(t, brk.Addr())
	c.sendCmd(getAtEnd(t, brk, p, 2))
	waitHeld(t, brk, 1)
	return brk, p, c
}

// waitHeld waits until n gets have been held in all.
func waitHeld(t *testing.T, brk *testBroker, n int64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if got := brk.stats.getsHeld.Load(); got != n {
			return fmt.Errorf("%d gets held, want %d", got, n)
		}
		return nil
	})
}

// TestGetWaitAnsweredByAppend: with getWaitMs set, a get at the end of its
// partition waits in the broker, without holding up the connection (a
// request sent behind it is answered first), and is answered with the
// records of the next put to that partition, long before its bound (a
// minute, longer than the read deadline): on the reader (getInline), on a
// worker, and through the copy path.
func TestGetWaitAnsweredByAppend(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"reader", func(*Options) {}},
		{"worker", func(o *Options) { o.noInlineGets = true }},
		{"copy", func(o *Options) { o.CopyGets = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brk := startBroker(t, vectorConfig(t), func(o *Options) {
				o.GetWait = time.Minute
				tc.mod(o)
			})
			c := dial(t, brk.Addr())
			c.sendCmd(getAtEnd(t, brk, c, 2))
			waitHeld(t, brk, 1)
			c.sendCmd(&wire.Version{Opaque: 3, HasOpaque: true})
			if r := c.result(); r.Opaque != 3 {
				t.Fatalf("answer %v while the get waits, want version's (opaque 3)", r)
			}
			p := dial(t, brk.Addr())
			p.sendCmd(putCmd("test", 1, "other partition", 4))
			p.sendCmd(putCmd("test", 0, "second", 5))
			for range 2 {
				if r := p.result(); !r.OK() {
					t.Fatalf("put: %v", r)
				}
			}
			v, ok := c.read().(*wire.Value)
			if !ok || v.Opaque != 2 {
				t.Fatalf("answer %v, want the waiting get's records", v)
			}
			recs, rest := parseRecords(t, v.Data)
			if len(recs) != 1 || string(recs[0].body) != "second" || len(rest) != 0 {
				t.Fatalf("records %+v (rest %d bytes), want the one put after the get", recs, len(rest))
			}
			if n := brk.stats.getsHeldEmpty.Load(); n != 0 {
				t.Fatalf("%d waiting gets answered empty", n)
			}
		})
	}
}

// TestGetWaitAnsweredEmptyAfterBound: a get at the end of a partition
// that does not grow is answered 404 once getWaitMs is up, never sooner;
// a get below the end, and one of a partition that does not exist, are
// answered at once, without waiting.
func TestGetWaitAnsweredEmptyAfterBound(t *testing.T) {
	const bound = 300 * time.Millisecond
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.GetWait = bound })
	c := dial(t, brk.Addr())
	get := getAtEnd(t, brk, c, 2)
	start := time.Now()
	c.sendCmd(get)
	r := c.result()
	if took := time.Since(start); took < bound {
		t.Fatalf("answered after %v, before the bound %v", took, bound)
	}
	if r.Code != wire.StatusNotFound || r.Opaque != 2 {
		t.Fatalf("answer %v, want 404 for opaque 2", r)
	}
	if h, e := brk.stats.getsHeld.Load(), brk.stats.getsHeldEmpty.Load(); h != 1 || e != 1 {
		t.Fatalf("gets held %d, answered empty %d; want 1 and 1", h, e)
	}
	c.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 1 << 20, Opaque: 3})
	if v, ok := c.read().(*wire.Value); !ok || v.Opaque != 3 {
		t.Fatalf("get below the end: %v, want its records", v)
	}
	c.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 1, Offset: 0, MaxSize: 1 << 20, Opaque: 4})
	if r := c.result(); r.Code != wire.StatusNotFound || r.Opaque != 4 {
		t.Fatalf("get of a partition never written: %v, want 404", r)
	}
	if h := brk.stats.getsHeld.Load(); h != 1 {
		t.Fatalf("gets held %d, want only the one at the end", h)
	}
}

// TestGetWaitIdleWaiterEndsWithTheConnection: once the client quits, a
// connection whose held get was answered closes without waiting for its
// idle waiter goroutine's idle time (an hour here) to run out.
func TestGetWaitIdleWaiterEndsWithTheConnection(t *testing.T) {
	brk, p, c := startHeldGet(t, func(o *Options) {
		o.GetWait = time.Minute
		o.waiterIdle = time.Hour
	})
	p.sendCmd(putCmd("test", 0, "second", 5))
	if r := p.result(); !r.OK() {
		t.Fatalf("put: %v", r)
	}
	if v, ok := c.read().(*wire.Value); !ok || v.Opaque != 2 {
		t.Fatalf("answer %v, want the waiting get's records", v)
	}
	p.nc.Close()
	c.sendCmd(&wire.Quit{})
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if brk.hasConns() {
			return errors.New("the connection is still open after quit")
		}
		return nil
	})
}

// TestGetWaitReusesWaiters: a consumer's gets at the end of its partition,
// one after the other, each answered by the next put, wait on one reused
// waiter goroutine, not a fresh goroutine each (whose stack grew on every
// get: a measurable share of the broker's CPU per delivered message).
func TestGetWaitReusesWaiters(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.GetWait = time.Minute
		o.waiterIdle = time.Hour // under load too
	})
	p := dial(t, brk.Addr())
	c := dial(t, brk.Addr())
	get := getAtEnd(t, brk, p, 2)
	const rounds = 20
	for i := range rounds {
		c.sendCmd(get)
		waitHeld(t, brk, int64(i+1))
		p.sendCmd(putCmd("test", 0, "m", 5))
		if r := p.result(); !r.OK() {
			t.Fatalf("put: %v", r)
		}
		v, ok := c.read().(*wire.Value)
		if !ok || v.Opaque != 2 {
			t.Fatalf("round %d: answer %v, want the waiting get's records", i, v)
		}
		recs, _ := parseRecords(t, v.Data)
		if len(recs) != 1 {
			t.Fatalf("round %d: %d records, want 1", i, len(recs))
		}
		get.Offset += int64(20 + len(recs[0].body))
	}
	if n := brk.stats.getWaiters.Load(); n > 2 {
		t.Fatalf("%d waiter goroutines started for %d gets held one after the other, want 1 (2 if a wait ended as the next began)", n, rounds)
	}
}

// serverConn is the broker's side of cl's connection.
func serverConn(t *testing.T, brk *testBroker, cl *client) *conn {
	t.Helper()
	var srv *conn
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		brk.mu.Lock()
		defer brk.mu.Unlock()
		for c := range brk.conns {
			if c.remote == cl.nc.LocalAddr().String() {
				srv = c
				return nil
			}
		}
		return errors.New("the broker has no connection from the client")
	})
	return srv
}

// TestGetWaitHeldGetEndsWithTheConnection: a get held when the client
// quits, or closes its socket, is answered (404) at once and the
// connection closes, without waiting out getWaitMs (a minute here): a
// client that went away holds no goroutine, socket or connection slot.
func TestGetWaitHeldGetEndsWithTheConnection(t *testing.T) {
	for _, quit := range []bool{true, false} {
		t.Run(fmt.Sprintf("quit=%v", quit), func(t *testing.T) {
			brk, p, c := startHeldGet(t, func(o *Options) { o.GetWait = time.Minute })
			p.nc.Close()
			if quit {
				c.sendCmd(&wire.Quit{})
				if r := c.result(); r.Code != wire.StatusNotFound || r.Opaque != 2 {
					t.Fatalf("answer %v after quit, want 404 for the held get", r)
				}
				c.expectClosed(10 * time.Second)
			} else {
				c.nc.Close()
			}
			testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
				if brk.hasConns() {
					return errors.New("the connection is still open with its held get")
				}
				return nil
			})
		})
	}
}

// TestGetWaitWokenGetsDoNotWaitForTheirOwnBytes: the gets of a connection
// woken together are answered together, and each answer holds bytes of
// the connection's budget until the writer has written it. Two woken
// gets that each need more than half of it: the second must not wait for
// the budget while the first's answer, not queued yet, holds it (no
// answer would ever come). The wake is arranged so that both are in one
// list: someone is made to look busy answering while both wake, then one
// is handed back to a waiter.
func TestGetWaitWokenGetsDoNotWaitForTheirOwnBytes(t *testing.T) {
	const share, body = 64 << 10, 40 << 10
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.GetWait = time.Minute
		o.MaxPendingBytes = share
		o.waiterIdle = time.Hour
	})
	p := dial(t, brk.Addr())
	c := dial(t, brk.Addr())
	var gets []*wire.Get
	for part := range int32(2) {
		p.sendCmd(putCmd("test", part, "first", 1))
		if r := p.result(); !r.OK() {
			t.Fatalf("put: %v", r)
		}
		info, err := brk.store.Partition("test", int(part))
		if err != nil {
			t.Fatal(err)
		}
		gets = append(gets, &wire.Get{Topic: "test", Group: "g", Partition: part, Offset: info.Max, MaxSize: 1 << 20, Opaque: 10 + part})
	}
	for _, g := range gets {
		c.sendCmd(g)
	}
	srv := serverConn(t, brk, c) // a connection is served from its first byte on
	waitHeld(t, brk, 2)
	w := &srv.woken
	w.mu.Lock()
	w.answering = true
	w.mu.Unlock()
	for part := range int32(2) {
		p.sendCmd(putCmd("test", part, strings.Repeat("b", body), 2))
		if r := p.result(); !r.OK() {
			t.Fatalf("put: %v", r)
		}
	}
	testutil.Eventually(t, 10*time.Second, 2*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.gets) != 2 {
			return fmt.Errorf("%d gets woken, want 2", len(w.gets))
		}
		return nil
	})
	w.mu.Lock()
	h := w.gets[1]
	w.gets = w.gets[:1]
	w.answering = false
	w.mu.Unlock()
	if !srv.hold(h) {
		t.Fatal("the woken get could not be handed back to a waiter")
	}
	got := map[int32]bool{}
	for range gets {
		v, ok := c.read().(*wire.Value)
		if !ok {
			t.Fatalf("answer %v, want records", v)
		}
		recs, _ := parseRecords(t, v.Data)
		if len(recs) != 1 || len(recs[0].body) != body {
			t.Fatalf("answer to %d: %d records, want the one of %d bytes", v.Opaque, len(recs), body)
		}
		got[v.Opaque] = true
	}
	if !got[10] || !got[11] {
		t.Fatalf("answers %v, want both gets'", got)
	}
}

// TestGetWaitCountsEachGetOnce: a held get woken before its offset is
// readable (another get of its partition waited for a lower end) waits
// again, and is still one held get in the stats, not one per wait.
func TestGetWaitCountsEachGetOnce(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.GetWait = 2 * time.Second })
	p := dial(t, brk.Addr())
	a := dial(t, brk.Addr())
	b := dial(t, brk.Addr())
	get := getAtEnd(t, brk, p, 2)
	a.sendCmd(get)
	far := *get
	far.Offset += 1000 // past the end, past the next record too: 404 until it is reached
	far.Opaque = 3
	b.sendCmd(&far)
	waitHeld(t, brk, 2)
	p.sendCmd(putCmd("test", 0, "second", 5))
	if r := p.result(); !r.OK() {
		t.Fatalf("put: %v", r)
	}
	a.read()
	if r := b.result(); r.Code != wire.StatusNotFound || r.Opaque != 3 {
		t.Fatalf("answer %v to the get past the end, want 404", r)
	}
	if n := brk.stats.getsHeld.Load(); n != 2 {
		t.Fatalf("gets held %d, want 2 (each get once, however often it waited)", n)
	}
}

// gapStore is a store whose log has nothing at offset gap of test-0,
// although the partition's readable end is past it (as at a gap between
// chunks below the end): a get there reads no bytes. It counts those reads.
type gapStore struct {
	*store.Store
	gap   atomic.Int64
	reads atomic.Int64
}

func (s *gapStore) Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error) {
	if topic == "test" && partition == 0 && offset == s.gap.Load() {
		s.reads.Add(1)
		return nil, nil
	}
	return s.Store.Read(topic, partition, offset, maxBytes)
}

func (s *gapStore) ReadRun(topic string, partition int, offset int64, maxBytes int) (*store.LogRun, error) {
	if topic == "test" && partition == 0 && offset == s.gap.Load() {
		return nil, nil // no run: the copy path reads (Read)
	}
	return s.Store.ReadRun(topic, partition, offset, maxBytes)
}

// TestGetWaitBelowTheEndDoesNotSpin: a get answered 404 below the
// partition's readable end (nothing readable at its offset) is held, but
// its wait ends at once (the end is already past its offset), and its
// answer, read again, is 404 again: it is answered 404 then, not held again
// and again (each wait ending at once) until getWaitMs is up.
func TestGetWaitBelowTheEndDoesNotSpin(t *testing.T) {
	gs := &gapStore{}
	gs.gap.Store(-1)
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.GetWait = 2 * time.Second
		gs.Store = o.Store.(*store.Store)
		o.Store = gs
	})
	p := dial(t, brk.Addr())
	get := getAtEnd(t, brk, p, 2) // at the end of "first"
	p.sendCmd(putCmd("test", 0, "second", 3))
	if r := p.result(); !r.OK() {
		t.Fatalf("put: %v", r)
	}
	gs.gap.Store(get.Offset)
	c := dial(t, brk.Addr())
	c.sendCmd(get)
	if r := c.result(); r.Code != wire.StatusNotFound || r.Opaque != 2 {
		t.Fatalf("answer %v, want 404 for opaque 2", r)
	}
	// The get's first read, and one more after a wait that ended at once
	// (a commit may have made its records readable between the two).
	if n := gs.reads.Load(); n > 3 {
		t.Fatalf("the get below the end read its offset %d times, want at most 3 (held again and again)", n)
	}
}

// TestGetWaitLingersForMinBytes: a held get woken by a put that leaves
// fewer than getWaitMinBytes at its offset waits up to getWaitLingerMs
// more, so that its answer carries the next puts too (a minute of linger
// here: the answer comes when the bytes do); with a short linger it is
// answered with what there is once the linger is up, within its
// getWaitMs; and a client that quits while it lingers gets its answer at
// once.
func TestGetWaitLingersForMinBytes(t *testing.T) {
	const body = 1000 // a record: 20 bytes of header and body
	t.Run("bytes", func(t *testing.T) {
		brk, p, c := startHeldGet(t, func(o *Options) {
			o.GetWait = time.Minute
			o.GetWaitMinBytes = 3 * (20 + body)
			o.GetWaitLinger = time.Minute
		})
		for i := range 3 {
			p.sendCmd(putCmd("test", 0, strings.Repeat("x", body), int32(10+i)))
			if r := p.result(); !r.OK() {
				t.Fatalf("put: %v", r)
			}
		}
		v, ok := c.read().(*wire.Value)
		if !ok || v.Opaque != 2 {
			t.Fatalf("answer %v, want the held get's records", v)
		}
		if recs, _ := parseRecords(t, v.Data); len(recs) != 3 {
			t.Fatalf("%d records in the answer, want the 3 put while it lingered", len(recs))
		}
		if n := brk.stats.getsHeldEmpty.Load(); n != 0 {
			t.Fatalf("%d held gets answered empty", n)
		}
	})
	t.Run("time", func(t *testing.T) {
		_, p, c := startHeldGet(t, func(o *Options) {
			o.GetWait = time.Minute
			o.GetWaitMinBytes = 1 << 20
			o.GetWaitLinger = 50 * time.Millisecond
		})
		p.sendCmd(putCmd("test", 0, "second", 10))
		if r := p.result(); !r.OK() {
			t.Fatalf("put: %v", r)
		}
		v, ok := c.read().(*wire.Value) // long before the minute's bound
		if !ok || v.Opaque != 2 {
			t.Fatalf("answer %v, want the held get's records", v)
		}
		if recs, _ := parseRecords(t, v.Data); len(recs) != 1 {
			t.Fatalf("%d records in the answer, want the one put", len(recs))
		}
	})
	t.Run("quit", func(t *testing.T) {
		brk, p, c := startHeldGet(t, func(o *Options) {
			o.GetWait = time.Minute
			o.GetWaitMinBytes = 1 << 20
			o.GetWaitLinger = time.Minute
		})
		p.sendCmd(putCmd("test", 0, "second", 10))
		if r := p.result(); !r.OK() {
			t.Fatalf("put: %v", r)
		}
		p.nc.Close()
		c.sendCmd(&wire.Quit{})
		if v, ok := c.read().(*wire.Value); !ok || v.Opaque != 2 {
			t.Fatalf("answer %v after quit, want the held get's records", v)
		}
		c.expectClosed(10 * time.Second)
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
			if brk.hasConns() {
				return errors.New("the connection is still open with its lingering get")
			}
			return nil
		})
	})
}

// TestGetWaitLingerFromConfig: the linger's bounds come from [limits]
// when the options leave them 0, the options' own win, and negative ones
// (or the config's 0) turn it off.
func TestGetWaitLingerFromConfig(t *testing.T) {
	l := config.Limits{GetWaitMinBytes: 4096, GetWaitLinger: 7 * time.Millisecond}
	for _, tc := range []struct {
		name       string
		opts       Options
		lim        config.Limits
		min        int64
		linger     time.Duration
		lingerable bool
	}{
		{"config", Options{}, l, 4096, 7 * time.Millisecond, true},
		{"options", Options{GetWaitMinBytes: 1, GetWaitLinger: time.Millisecond}, l, 1, time.Millisecond, true},
		{"off in options", Options{GetWaitMinBytes: -1, GetWaitLinger: -1}, l, -1, -1, false},
		{"off in config", Options{}, config.Limits{}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.applyLimits(tc.lim)
			if o.GetWaitMinBytes != tc.min || o.GetWaitLinger != tc.linger {
				t.Fatalf("min bytes %d, linger %v; want %d, %v", o.GetWaitMinBytes, o.GetWaitLinger, tc.min, tc.linger)
			}
			if on := o.GetWaitMinBytes > 0 && o.GetWaitLinger > 0; on != tc.lingerable {
				t.Fatalf("lingers %v, want %v", on, tc.lingerable)
			}
		})
	}
}
