package bundle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestSwitchoverTakeOverHoldsPuts: deploy/'s layout with forwardPuts=true
// at every site and producers on bj's and hf's views, `switchover -to hf`
// with hf slow (600 ms) between telling bj it took over and lifting its
// slave's refusal of puts. bj passes the puts it held on to hf as soon as
// hf said it took over; hf, a slave for 600 ms more, must not pass them
// back to bj through its gateway (each side then awaited the other's
// answer until bj's hold bound passed: "the put was sent to the master
// ... and no answer came"). hf holds what reaches it while it takes over
// and stores it once master: no send fails, and every acknowledged put is
// at hf where its producer was told.
func TestSwitchoverTakeOverHoldsPuts(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	fwd := "\n[site]\nforwardPuts=true\n"
	spec := autoFailoverDeploy()
	spec.replication += "sites=bj,gz,hf\n"
	spec.overlays = map[string]string{"bj": fwd, "hf": fwd, "gz": fwd}
	s := newSites(t, spec)
	slow := func() { time.Sleep(600 * time.Millisecond) }
	s.site("hf").failover.afterHandoverTold.Store(&slow)
	waitViewAt(t, s, "bj")
	waitViewAt(t, s, "hf")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	prods := []*syncProducer{{name: "bj-view"}, {name: "hf-view"}}
	for i, site := range []string{"bj", "hf"} {
		c := viewClient(t, s, site)
		p := prods[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.runWith(ctx, c, "orders")
		}()
	}
	defer func() { stop(); wg.Wait() }()
	waitAcked(t, prods, time.Time{}, 20)
	rep := s.switchover("bj", "hf")
	waitAcked(t, prods, time.Now(), 20)
	stop()
	wg.Wait()
	for _, p := range prods {
		for _, err := range p.dropFailures(func(err error, _ time.Time) bool {
			return strings.Contains(err.Error(), "confirm its generation")
		}) {
			t.Logf("%s: the ack guard's refusal (not what this test checks): %v", p.name, err)
		}
	}
	total := checkAcksAt(t, prods, s.site("hf"), "hf")
	t.Logf("switchover: writes stopped at bj for %s; %d puts acknowledged", rep.WritesStopped, total)
	s.converged("orders")
}

// TestSwitchoverTakeOverHoldOutlivesFailedStep: as
// TestSwitchoverTakeOverHoldsPuts, but hf's first attempt at the steps
// after its raise fails, so its promotion is finished in the background a
// second later. The puts hf holds while it takes over stay held until the
// finisher opens its writes, and are stored then: no send fails (before,
// the hold ended when the first attempt failed, and the held puts took the
// route of a slave's put: passed back to bj, which no longer stores
// puts).
func TestSwitchoverTakeOverHoldOutlivesFailedStep(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	fwd := "\n[site]\nforwardPuts=true\n"
	spec := autoFailoverDeploy()
	spec.replication += "sites=bj,gz,hf\n" + switchoverTestHold
	spec.overlays = map[string]string{"bj": fwd, "hf": fwd, "gz": fwd}
	s := newSites(t, spec)
	hf := s.site("hf")
	hf.finishRetry = 300 * time.Millisecond
	slow := func() { time.Sleep(600 * time.Millisecond) }
	hf.failover.afterHandoverTold.Store(&slow)
	var failed atomic.Bool
	failOnce := func() error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("injected: the first attempt after the raise fails")
		}
		return nil
	}
	hf.failover.completeFails.Store(&failOnce)
	waitViewAt(t, s, "bj")
	waitViewAt(t, s, "hf")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	prods := []*syncProducer{{name: "bj-view"}, {name: "hf-view"}}
	for i, site := range []string{"bj", "hf"} {
		c := viewClient(t, s, site)
		p := prods[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.runWith(ctx, c, "orders")
		}()
	}
	defer func() { stop(); wg.Wait() }()
	waitAcked(t, prods, time.Time{}, 20)
	// hf's take-over hold, caught while it holds.
	var hold *broker.Hold
	caught := make(chan struct{})
	go func() {
		defer close(caught)
		for ctx.Err() == nil && hold == nil {
			hf.failover.mu.Lock()
			hold = hf.failover.takingOver
			hf.failover.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	s.switchover("bj", "hf")
	testutil.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
		if r := hf.Role(); r.Role != siterole.Master {
			return fmt.Errorf("hf is %v", r)
		}
		return nil
	})
	if !failed.Load() {
		t.Fatal("the injected failure did not happen")
	}
	waitAcked(t, prods, time.Now(), 20)
	stop()
	<-caught
	if hold == nil {
		t.Fatal("hf held no puts while it took over")
	}
	if st := hold.Stats(); st.Local != st.Held || st.Forwarded+st.Expired+st.Unknown != 0 {
		t.Errorf("hf's take-over hold: %+v, want every held put stored at hf once its finished promotion opened writes", st)
	} else {
		t.Logf("hf's take-over hold: %+v", st)
	}
	wg.Wait()
	for _, p := range prods {
		for _, err := range p.dropFailures(func(err error, _ time.Time) bool {
			return strings.Contains(err.Error(), "confirm its generation")
		}) {
			t.Logf("%s: the ack guard's refusal (not what this test checks): %v", p.name, err)
		}
	}
	total := checkAcksAt(t, prods, hf, "hf")
	t.Logf("%d puts acknowledged", total)
	s.converged("orders")
}
