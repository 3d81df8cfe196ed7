package broker

import (
	"context"
	"sync"
)

// byteBudget bounds the bytes of fetched data one connection holds before
// they are written, so that a client pipelining many large gets without
// reading cannot make the broker buffer MaxInFlight × maxTransferSize. A
// request larger than the whole budget is let through alone (when nothing
// else is held), so it cannot wait forever.
type byteBudget struct {
	mu    sync.Mutex
	total int64
	avail int64
	wait  chan struct{} // closed and replaced on every release
}

func newByteBudget(total int64) *byteBudget {
	return &byteBudget{total: total, avail: total}
}

func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.avail >= n || (n > b.total && b.avail == b.total) {
			b.avail -= n
			b.mu.Unlock()
			return nil
		}
		if b.wait == nil {
			b.wait = make(chan struct{})
		}
		ch := b.wait
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.avail += n
	if b.wait != nil {
		close(b.wait)
		b.wait = nil
	}
	b.mu.Unlock()
}

// acquireOver takes n more bytes without waiting (a read returned more
// than was reserved); avail may go negative until releases catch up.
func (b *byteBudget) acquireOver(n int64) {
	b.mu.Lock()
	b.avail -= n
	b.mu.Unlock()
}
