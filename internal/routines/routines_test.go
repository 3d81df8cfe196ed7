package routines

import (
	"sync/atomic"
	"testing"
)

func TestGoAfterStopStartsNothing(t *testing.T) {
	var g Group
	var ran atomic.Int32
	release := make(chan struct{})
	if !g.Go(func() { <-release; ran.Add(1) }) {
		t.Fatal("Go refused before Stop")
	}
	g.Stop()
	if g.Go(func() { ran.Add(1) }) {
		t.Fatal("Go started a goroutine after Stop")
	}
	close(release)
	g.Wait()
	if n := ran.Load(); n != 1 {
		t.Fatalf("%d goroutines ran, want 1", n)
	}
}

// TestWaitSeesEveryStarted races Go against Stop and Wait: whatever Go
// reports as started has finished when Wait returns.
func TestWaitSeesEveryStarted(t *testing.T) {
	for i := 0; i < 100; i++ {
		var g Group
		var started, done atomic.Int32
		go func() {
			for j := 0; j < 50; j++ {
				if g.Go(func() { done.Add(1) }) {
					started.Add(1)
				}
			}
		}()
		g.Stop()
		g.Wait()
		// Go calls after Stop return false, so started cannot grow now.
		if s, d := started.Load(), done.Load(); d < s {
			// a started goroutine may still be counted in started after
			// Wait only if Go raced past Stop, which the lock forbids
			t.Fatalf("round %d: %d started, %d done after Wait", i, s, d)
		}
	}
}
