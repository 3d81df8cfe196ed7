package bundle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

type fakeFollower struct {
	mu        sync.Mutex
	connected bool
	tried     string
	redials   atomic.Int64
}

func (f *fakeFollower) Status() georeplicator.ReceiverStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return georeplicator.ReceiverStatus{Connected: f.connected}
}

func (f *fakeFollower) Tried() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tried
}

func (f *fakeFollower) Redial() { f.redials.Add(1) }

// TestRedialOnMove: a slave with a static masterAddress (deploy/'s) that
// is not connected tries again at once when its resolver names another
// master than the one it last tried (a promotion moved it), and not
// otherwise. In deploy/'s layout, after SIGSTOP of bj and `promote` at hf,
// gz kept trying the paused bj for DialTimeout (10 s) and `promote`
// returned about 4 s after its promotion finished, waiting for gz.
func TestRedialOnMove(t *testing.T) {
	t.Parallel()
	f := &fakeFollower{tried: "paused:1"}
	var master atomic.Value
	master.Store("paused:1")
	resolve := georeplicator.ResolverFunc(func(context.Context) (string, error) { return master.Load().(string), nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		redialOnMove(ctx, 5*time.Millisecond, func() moveFollower { return f }, resolve)
	}()
	defer func() { cancel(); <-done }()

	time.Sleep(50 * time.Millisecond) // several rounds
	if n := f.redials.Load(); n != 0 {
		t.Fatalf("%d redials while the master did not move", n)
	}
	master.Store("promoted:1")
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if f.redials.Load() == 0 {
			return fmt.Errorf("no redial after the master moved")
		}
		return nil
	})
	// Connected to the new master: nothing more.
	f.mu.Lock()
	f.tried, f.connected = "promoted:1", true
	f.mu.Unlock()
	n := f.redials.Load()
	time.Sleep(50 * time.Millisecond)
	if m := f.redials.Load(); m > n+1 { // one round may have begun before
		t.Errorf("%d more redials once connected to the new master", m-n)
	}
}
