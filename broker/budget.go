package broker

import (
	"container/list"
	"context"
	"sync"
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
type byteBudget struct {
	mu      sync.Mutex
	total   int64
	avail   int64
	peak    int64       // largest total-avail seen
	waiters list.List   // *budgetWaiter, first come first served
	parent  *byteBudget // the broker's budget a connection's draws from; nil once detached

	// onWait, when set, is called (without mu held) when an acquire finds
	// the budget used up, and every recheck while it waits.
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
	return &byteBudget{total: total, avail: total, parent: parent}
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
	ok, p := b.tryOwn(n)
	if !ok {
		return false
	}
	if p != nil && !p.tryAcquire(n) {
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
	b.mu.Lock()
	b.avail -= n
	b.notePeakLocked()
	p := b.parent
	b.mu.Unlock()
	if p != nil {
		p.acquireOver(n)
	}
}

// detach gives what b still holds back to its parent and cuts b off from
// it, so that releases after this (there should be none) cannot count
// twice. A connection calls it once it has ended: whatever it held, even
// through a bug, returns to the broker.
func (b *byteBudget) detach() (held int64) {
	b.mu.Lock()
	p := b.parent
	b.parent = nil
	held = b.total - b.avail
	b.mu.Unlock()
	if p != nil && held > 0 {
		p.release(held)
	}
	return held
}

// used returns the bytes held now.
func (b *byteBudget) used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - b.avail
}

// peakUsed returns the most bytes ever held at once.
func (b *byteBudget) peakUsed() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// tryOwn takes n bytes of b alone if they are free now and nobody waits;
// it returns b's parent too.
func (b *byteBudget) tryOwn(n int64) (bool, *byteBudget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiters.Len() == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		return true, b.parent
	}
	return false, nil
}

func (b *byteBudget) fitsLocked(n int64) bool {
	return b.avail >= n || (n > b.total && b.avail == b.total)
}

func (b *byteBudget) takeLocked(n int64) {
	b.avail -= n
	b.notePeakLocked()
}

// acquireOwn takes n bytes of b alone, waiting in turn; it returns b's
// parent once they are taken.
func (b *byteBudget) acquireOwn(ctx context.Context, n int64) (*byteBudget, error) {
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		p := b.parent
		b.mu.Unlock()
		return p, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	onWait, recheck := b.onWait, b.recheck
	b.mu.Unlock()

	var tick <-chan time.Time
	if onWait != nil {
		// Waiting for the broker's budget: look for connections to close
		// now, and again while the wait lasts.
		onWait()
		t := time.NewTicker(recheck)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-w.ready:
			b.mu.Lock()
			p := b.parent
			b.mu.Unlock()
			return p, nil
		case <-tick:
			onWait()
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
		if !b.fitsLocked(w.n) {
			return
		}
		b.takeLocked(w.n)
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// releaseOwn returns n bytes to b alone and returns b's parent.
func (b *byteBudget) releaseOwn(n int64) *byteBudget {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.avail += n
	b.grantLocked()
	return b.parent
}

func (b *byteBudget) notePeakLocked() {
	if u := b.total - b.avail; u > b.peak {
		b.peak = u
	}
}
