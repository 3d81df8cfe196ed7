package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

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
			testutil.Eventually(t, 10*time.Second, 2*time.Millisecond, func() error {
				if brk.stats.getsHeld.Load() != 1 {
					return errors.New("the get at the end is not waiting")
				}
				return nil
			})
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
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.GetWait = time.Minute
		o.waiterIdle = time.Hour
	})
	p := dial(t, brk.Addr())
	c := dial(t, brk.Addr())
	c.sendCmd(getAtEnd(t, brk, p, 2))
	testutil.Eventually(t, 10*time.Second, 2*time.Millisecond, func() error {
		if brk.stats.getsHeld.Load() != 1 {
			return errors.New("the get at the end is not waiting")
		}
		return nil
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
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if n := brk.stats.getsHeld.Load(); n != int64(i+1) {
				return fmt.Errorf("%d gets held, want %d", n, i+1)
			}
			return nil
		})
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
