package clock

import (
	"testing"
	"time"
)

// onlyAfter is a Clock that makes no timers of its own.
type onlyAfter struct{ *Fake }

func (onlyAfter) NewTimer() {} // not timerClock's method

// fired reports whether t's channel holds a value now.
func fired(t Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

// TestFakeTimer: a timer of a Fake (and one made of a clock's After) fires
// once Advance passes its time, not before; Reset arms it again from the
// clock's now, and a value from before a Reset or a Stop is not received
// after it.
func TestFakeTimer(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(*Fake) Clock
	}{
		{"fake", func(f *Fake) Clock { return f }},
		{"after", func(f *Fake) Clock { return onlyAfter{f} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(time.Unix(0, 0))
			tm := NewTimer(tc.mk(f), time.Second)
			f.Advance(999 * time.Millisecond)
			if fired(tm) {
				t.Fatal("fired before its time")
			}
			f.Advance(time.Millisecond)
			if !fired(tm) {
				t.Fatal("did not fire at its time")
			}
			tm.Reset(time.Second)
			f.Advance(time.Second)
			tm.Reset(time.Second) // fired, not received: dropped
			if fired(tm) {
				t.Fatal("a value from before Reset received after it")
			}
			f.Advance(time.Second)
			tm.Stop() // fired, not received: dropped
			if fired(tm) {
				t.Fatal("a value from before Stop received after it")
			}
			tm.Reset(time.Second)
			tm.Stop()
			f.Advance(time.Hour)
			if fired(tm) {
				t.Fatal("a stopped timer fired")
			}
		})
	}
}

// TestRealTimer: Real's timer fires after its duration, and a value from
// before a Reset is not received after it.
func TestRealTimer(t *testing.T) {
	tm := NewTimer(Real{}, time.Millisecond)
	<-tm.C()
	tm.Reset(time.Millisecond)
	time.Sleep(5 * time.Millisecond) // fired, not received
	tm.Reset(time.Hour)
	if fired(tm) {
		t.Fatal("a value from before Reset received after it")
	}
	tm.Stop()
}
