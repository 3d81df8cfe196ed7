package clock

import "time"

// Timer is the part of time.Timer the project uses: one timer armed again
// and again by its owner, instead of a fresh timer (and channel) per wait
// as After makes. Call C after each Reset: a fake clock's timer gets a new
// channel then.
type Timer interface {
	C() <-chan time.Time
	// Reset arms the timer to fire once, d from now. With the module's Go
	// version (1.23 or later) no value from before a Reset or Stop is
	// received after it, so neither needs the channel drained.
	Reset(d time.Duration)
	// Stop disarms it.
	Stop()
}

// timerClock is a Clock that makes its own Timers.
type timerClock interface {
	NewTimer(d time.Duration) Timer
}

// NewTimer returns a timer of c that fires once, d from now: c's own when
// it makes them (Real, Fake), otherwise one that asks c.After on every
// Reset.
func NewTimer(c Clock, d time.Duration) Timer {
	if tc, ok := c.(timerClock); ok {
		return tc.NewTimer(d)
	}
	t := &afterTimer{c: c}
	t.Reset(d)
	return t
}

// NewTimer returns a time.Timer behind the Timer interface.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// NewTimer returns a timer that fires when Advance passes d from now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f}
	t.Reset(d)
	return t
}

// fakeTimer is a Fake's timer: each Reset retires the waiter it had and
// adds a new one with a channel of its own, so a value from before the
// Reset is never received after it. Its fields are its owner's.
type fakeTimer struct {
	f *Fake
	w *fakeWaiter
}

func (t *fakeTimer) C() <-chan time.Time { return t.w.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.w != nil {
		t.w.done = true
	}
	t.w = &fakeWaiter{at: f.now.Add(d), ch: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, t.w)
}

func (t *fakeTimer) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.w.done = true
	select {
	case <-t.w.ch: // fired before the Stop: not received after it
	default:
	}
}

// afterTimer is a Timer made of a Clock's After, for clocks that make no
// timers of their own.
type afterTimer struct {
	c  Clock
	ch <-chan time.Time
}

func (t *afterTimer) C() <-chan time.Time   { return t.ch }
func (t *afterTimer) Reset(d time.Duration) { t.ch = t.c.After(d) }
func (t *afterTimer) Stop()                 { t.ch = nil }
