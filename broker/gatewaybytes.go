package broker

import (
	"fmt"
	"sync"
	"time"
)

// DefaultForwardMaxInFlightBytes is [site] forwardMaxInFlightBytes unset:
// the bodies of forwarded puts the gateway carries at once, all producer
// connections together, before new ones wait. 64 MiB is ~25 times what a
// 4 MiB/s link at a 60 ms round trip holds in flight of 200-byte log lines
// compressed ten to one, and a quarter of the broker's default byte
// budget (maxBufferedBytes, 256 MiB).
const DefaultForwardMaxInFlightBytes = 64 << 20

// inFlightBytes bounds the bytes of forwarded puts awaiting the master's
// answers, gateway-wide: each connection's own bound (maxForwardInFlight
// puts, its byte budget) does not stop many connections together.
type inFlightBytes struct {
	mu      sync.Mutex // a leaf
	max     int64      // the bound; a reload changes it (setMax)
	used    int64
	waiters int           // acquire calls waiting for room
	changed chan struct{} // closed and replaced when used falls while some wait
}

func newInFlightBytes(max int64) *inFlightBytes {
	return &inFlightBytes{max: max, changed: make(chan struct{})}
}

// full says why a batch of n bytes found no room before its time was up.
func (f *inFlightBytes) full(n int64) string {
	f.mu.Lock()
	used, bound := f.used, f.max
	f.mu.Unlock()
	return fmt.Sprintf("the gateway carries %d bytes of forwarded puts awaiting the master's answers, "+
		"its bound is [site] forwardMaxInFlightBytes=%d and this batch holds %d", used, bound, n)
}

// acquire takes n bytes, waiting for room until deadline or until gone or
// done says to stop; it reports whether it took them. A batch larger than
// the bound is taken when nothing else is in flight, so it is not refused
// for its size alone.
func (f *inFlightBytes) acquire(n int64, deadline time.Time, gone func() bool, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if f.used+n <= f.max || f.used == 0 {
			f.used += n
			f.mu.Unlock()
			return true
		}
		wait := time.Until(deadline)
		if wait <= 0 || gone() {
			f.mu.Unlock()
			return false
		}
		f.waiters++
		ch := f.changed
		f.mu.Unlock()
		// gone is polled: the connection's end has no channel here.
		t := time.NewTimer(min(wait, 100*time.Millisecond))
		stopped := false
		select {
		case <-ch:
		case <-t.C:
		case <-done:
			stopped = true
		}
		t.Stop()
		f.mu.Lock()
		f.waiters--
		f.mu.Unlock()
		if stopped {
			return false
		}
	}
}

// release gives n bytes back.
func (f *inFlightBytes) release(n int64) {
	f.mu.Lock()
	f.used -= n
	if f.waiters > 0 {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
}

// load returns the bytes in flight and the bound.
func (f *inFlightBytes) load() (used, bound int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used, f.max
}

// setMax changes the bound: batches in flight keep their bytes (a lower
// bound only makes new batches wait longer), and batches waiting for room
// look again at once (a higher bound may have it).
func (f *inFlightBytes) setMax(bound int64) {
	f.mu.Lock()
	f.max = bound
	if f.waiters > 0 {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
}
