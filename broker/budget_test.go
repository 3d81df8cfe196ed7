package broker

import (
	"context"
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
	if b.avail != 100 {
		t.Fatalf("avail %d", b.avail)
	}
}
