package broker

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestByteBudget(t *testing.T) {
	b := newByteBudget(100, nil)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		b.acquire(ctx, 60)
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("acquired beyond the budget")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(60)
	select {
	case <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("release did not wake the waiter")
	}
	b.release(60)
	// A request larger than the whole budget passes when nothing is held.
	if err := b.acquire(ctx, 500); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(cctx, 1); err == nil {
		t.Fatal("acquire succeeded while over budget")
	}
	b.release(500)
	if b.avail.Load() != 100 {
		t.Fatalf("avail %d", b.avail.Load())
	}
}

// TestByteBudgetConcurrentAccounting runs connections' budgets under two
// addresses' under the broker's from many goroutines at once, taking bytes
// with tryAcquire and acquire and giving them back: no level ever holds
// more than its total, and once everything is given back every level holds
// nothing (run it with -race).
func TestByteBudgetConcurrentAccounting(t *testing.T) {
	const (
		brokerTotal = 64 << 10
		addrTotal   = 40 << 10
		connTotal   = 16 << 10
		conns       = 8
		ops         = 4000
	)
	brk := newByteBudget(brokerTotal, nil)
	addrs := []*byteBudget{newByteBudget(addrTotal, brk), newByteBudget(addrTotal, brk)}
	var cs []*byteBudget
	for i := range conns {
		cs = append(cs, newByteBudget(connTotal, addrs[i%2]))
	}
	over := func(what string, b *byteBudget) {
		if u := b.used(); u > b.total {
			t.Errorf("%s holds %d bytes of %d", what, u, b.total)
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i, c := range cs {
		// Each connection: a reader taking bytes, and two goroutines giving
		// them back (as the writer and the store's notify do).
		held := make(chan int64, 64)
		wg.Go(func() {
			defer close(held)
			for k := range ops {
				n := int64(1 + (k*7919+i*104729)%(6<<10))
				if k%3 == 0 || !c.tryAcquire(n) {
					if err := c.acquire(ctx, n); err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
				}
				over("a connection", c)
				over("an address", c.parent.Load())
				over("the broker", brk)
				held <- n
			}
		})
		for range 2 {
			wg.Go(func() {
				for n := range held {
					c.release(n)
				}
			})
		}
	}
	wg.Wait()
	for i, c := range cs {
		if u := c.used(); u != 0 {
			t.Errorf("connection %d holds %d bytes after giving everything back", i, u)
		}
		if p := c.peakUsed(); p > connTotal || p == 0 {
			t.Errorf("connection %d peak %d (total %d)", i, p, connTotal)
		}
	}
	for i, a := range addrs {
		if u := a.used(); u != 0 {
			t.Errorf("address %d holds %d bytes after giving everything back", i, u)
		}
	}
	if u := brk.used(); u != 0 {
		t.Errorf("the broker holds %d bytes after giving everything back", u)
	}
	if p := brk.peakUsed(); p > brokerTotal {
		t.Errorf("broker peak %d above its total %d", p, brokerTotal)
	}
}

// TestByteBudgetReleaseRacesWaiter gives bytes back while an acquire that
// does not fit is queueing: whichever comes first, the waiter is served
// (a release that ran before the waiter was counted must not leave it
// waiting for bytes that are free).
func TestByteBudgetReleaseRacesWaiter(t *testing.T) {
	b := newByteBudget(100, nil)
	ctx := context.Background()
	for round := range 20000 {
		if !b.tryAcquire(100) {
			t.Fatalf("round %d: the budget is not free: %d held", round, b.used())
		}
		got := make(chan error, 1)
		go func() { got <- b.acquire(ctx, 60) }()
		if round%3 == 0 {
			runtime.Gosched()
		}
		b.release(100)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a waiter was left waiting with %d bytes free", round, 100-b.used())
		}
		b.release(60)
	}
	if u := b.used(); u != 0 {
		t.Fatalf("%d bytes held at the end", u)
	}
}

// TestByteBudgetDetach: a connection's budget that ended holding bytes
// gives them back to its parent, and a release after that does not count
// against the parent twice.
func TestByteBudgetDetach(t *testing.T) {
	brk := newByteBudget(1000, nil)
	c := newByteBudget(100, brk)
	if !c.tryAcquire(70) {
		t.Fatal("tryAcquire refused free bytes")
	}
	c.acquireOver(50) // over its own total
	if u := brk.used(); u != 120 {
		t.Fatalf("broker holds %d, want 120", u)
	}
	if p := c.peakUsed(); p != 120 {
		t.Fatalf("connection peak %d, want 120", p)
	}
	if held := c.detach(); held != 120 {
		t.Fatalf("detach gave back %d, want 120", held)
	}
	if u := brk.used(); u != 0 {
		t.Fatalf("broker holds %d after detach", u)
	}
	c.release(120)
	if u := brk.used(); u != 0 {
		t.Fatalf("broker holds %d after a release past detach", u)
	}
}
