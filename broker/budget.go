package broker

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// byteBudget is a byte semaphore, as Kafka's request memory pool is. The
// broker has one for all connections (Options.MaxBufferedBytes), and each
// connection one of its own (Options.MaxPendingBytes) that draws from it:
// what a connection holds counts against both, so no connection takes more
// than its share and all of them together no more than the broker's bound.
//
// A get reserves the bytes it may return before it reads them from the
// store, and gives them back once its answer is written; a put reserves its
// body before the body is read from the socket, and gives it back once the
// body has been copied into the store (or the request is done with it). So
// when a budget is used up, gets wait and readers stop reading, which
// pushes back on the clients through TCP instead of buffering without limit.
//
// Taking bytes that are free while nobody waits, and giving bytes back
// while nobody waits, is one atomic operation on each level (connection,
// address, broker): a put body passes through all three on its way in and
// out, and a mutex per level per body was a measurable share of the
// broker's CPU. mu is taken only to queue a waiter and to serve waiters.
type byteBudget struct {
	total int64
	avail atomic.Int64
	peak  atomic.Int64 // largest total-avail seen
	// waiting is waiters.Len(), changed under mu and read without it: the
	// fast paths take and give back bytes without mu while it is 0. A
	// waiter counts itself here before it looks at avail, and a release
	// adds to avail before it looks here, so one of the two always sees
	// the other (no waiter is left waiting for bytes that are free).
	waiting atomic.Int32
	parent  atomic.Pointer[byteBudget] // the broker's budget a connection's draws from; nil once detached

	mu      sync.Mutex
	waiters list.List // *budgetWaiter, first come first served

	// onWait, when set, is called (without mu held) when an acquire finds
	// the budget used up, and every recheck while it waits. Set before the
	// budget is shared.
	onWait  func()
	recheck time.Duration
}

// budgetWaiter is one acquire waiting for n bytes; ready is closed once
// they are granted.
type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

func newByteBudget(total int64, parent *byteBudget) *byteBudget {
	b := &byteBudget{total: total}
	b.avail.Store(total)
	if parent != nil {
		b.parent.Store(parent)
	}
	return b
}

// acquire takes n bytes, waiting until they are free or ctx ends. Waiters
// are served in arrival order (as golang.org/x/sync/semaphore does; that
// package has no overdraft, shares or peak, which the broker needs), so a
// client that asks after a flood of others is served after them, not
// never. A request larger than the whole budget is let through alone (when
// nothing else is held), so it cannot wait forever. The connection's own
// budget is taken first, then the broker's: a connection waiting for the
// broker's budget holds none of it, so waits never form a cycle.
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	p, err := b.acquireOwn(ctx, n)
	if err != nil {
		return err
	}
	if p != nil {
		if err := p.acquire(ctx, n); err != nil {
			b.releaseOwn(n)
			return err
		}
	}
	return nil
}

// tryAcquire takes n bytes if they are free now and nobody waits, from
// both budgets.
func (b *byteBudget) tryAcquire(n int64) bool {
	if n <= 0 {
		return true
	}
	if !b.tryOwn(n) {
		return false
	}
	if p := b.parent.Load(); p != nil && !p.tryAcquire(n) {
		b.releaseOwn(n)
		return false
	}
	return true
}

// release gives back n bytes taken by acquire, tryAcquire or acquireOver.
func (b *byteBudget) release(n int64) {
	if n <= 0 {
		return
	}
	if p := b.releaseOwn(n); p != nil {
		p.release(n)
	}
}

// acquireOver takes n more bytes without waiting, when they must be held
// whatever the budget says; avail may go negative until releases catch up.
func (b *byteBudget) acquireOver(n int64) {
	if n <= 0 {
		return
	}
	b.notePeak(b.total - b.avail.Add(-n))
	if p := b.parent.Load(); p != nil {
		p.acquireOver(n)
	}
}

// detach gives what b still holds back to its parent and cuts b off from
// it, so that releases after this (there should be none) cannot count
// twice. A connection calls it once it has ended, when nothing of it can
// take or give back bytes any more: whatever it held, even through a bug,
// returns to the broker.
func (b *byteBudget) detach() (held int64) {
	p := b.parent.Swap(nil)
	held = b.total - b.avail.Load()
	if p != nil && held > 0 {
		p.release(held)
	}
	return held
}

// used returns the bytes held now.
func (b *byteBudget) used() int64 { return b.total - b.avail.Load() }

// peakUsed returns the most bytes ever held at once.
func (b *byteBudget) peakUsed() int64 { return b.peak.Load() }

// fits reports whether n bytes may be taken when avail are free.
func (b *byteBudget) fits(avail, n int64) bool {
	return avail >= n || (n > b.total && avail == b.total)
}

// take takes n bytes of b alone if they fit now, without waiting and
// whether or not others wait.
func (b *byteBudget) take(n int64) bool {
	for {
		a := b.avail.Load()
		if !b.fits(a, n) {
			return false
		}
		if b.avail.CompareAndSwap(a, a-n) {
			b.notePeak(b.total - (a - n))
			return true
		}
	}
}

// tryOwn takes n bytes of b alone if they are free now and nobody waits.
func (b *byteBudget) tryOwn(n int64) bool {
	return b.waiting.Load() == 0 && b.take(n)
}

// acquireOwn takes n bytes of b alone, waiting in turn; it returns b's
// parent once they are taken.
func (b *byteBudget) acquireOwn(ctx context.Context, n int64) (*byteBudget, error) {
	if b.tryOwn(n) {
		return b.parent.Load(), nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.mu.Lock()
	elem := b.waiters.PushBack(w)
	b.waiting.Add(1)
	// Bytes given back before this waiter was counted found nobody to
	// serve: look again now that it is.
	b.grantLocked()
	b.mu.Unlock()
	select {
	case <-w.ready:
		return b.parent.Load(), nil
	default:
	}

	var tick <-chan time.Time
	if b.onWait != nil {
		// Waiting for the broker's budget: look for connections to close
		// now, and again while the wait lasts.
		b.onWait()
		t := time.NewTicker(b.recheck)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-w.ready:
			return b.parent.Load(), nil
		case <-tick:
			b.onWait()
		case <-ctx.Done():
			b.mu.Lock()
			select {
			case <-w.ready:
				// Granted meanwhile: give it back.
				b.mu.Unlock()
				b.releaseOwn(n)
			default:
				front := b.waiters.Front() == elem
				b.waiters.Remove(elem)
				b.waiting.Add(-1)
				if front {
					// Those behind may fit now.
					b.grantLocked()
				}
				b.mu.Unlock()
			}
			return nil, ctx.Err()
		}
	}
}

// grantLocked serves waiters in order while the first one fits.
func (b *byteBudget) grantLocked() {
	for {
		e := b.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*budgetWaiter)
		if !b.take(w.n) {
			return
		}
		b.waiters.Remove(e)
		b.waiting.Add(-1)
		close(w.ready)
	}
}

// releaseOwn returns n bytes to b alone and returns b's parent.
func (b *byteBudget) releaseOwn(n int64) *byteBudget {
	b.avail.Add(n)
	if b.waiting.Load() > 0 {
		b.mu.Lock()
		b.grantLocked()
		b.mu.Unlock()
	}
	return b.parent.Load()
}

func (b *byteBudget) notePeak(u int64) {
	for {
		p := b.peak.Load()
		if u <= p || b.peak.CompareAndSwap(p, u) {
			return
		}
	}
}
