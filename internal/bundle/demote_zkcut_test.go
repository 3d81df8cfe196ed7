package bundle

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSwitchoverTakesOverPutsHeldForConfirmation: bj, cut off from its
// ZooKeeper, holds the puts that reach it while it cannot confirm its
// generation (ackguard.go) when `switchover -to hf` begins. The
// switchover's hold takes them over and passes them on to hf, and the
// answers of puts stored at bj that waited for the confirmation are given
// once hf holds them: no send fails (before, the switchover ended that hold
// first, and its puts were refused by the stopped writes, 503 "could not
// confirm its generation 0", or 500 "stored here, but not acknowledged").
func TestSwitchoverTakesOverPutsHeldForConfirmation(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{replication: switchoverTestHold})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	prods := []*syncProducer{{name: "p1"}, {name: "p2"}}
	for _, p := range prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(ctx, s, "bj", "orders")
		}()
	}
	defer func() { stop(); wg.Wait() }()
	waitAcked(t, prods, time.Time{}, 20)
	bj, hf := s.site("bj"), s.site("hf")
	s.cutZK("bj")
	// bj's confirmation lapses and it holds the puts that reach it.
	testutil.Eventually(t, time.Minute, 5*time.Millisecond, func() error {
		if !bj.Broker.Holding() {
			return errors.New("bj holds no puts yet")
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := bj.Switchover(sctx, "hf", "")
		done <- err
	}()
	testutil.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
		if hf.promotedShipper() == nil {
			return errors.New("hf has not taken over yet")
		}
		return nil
	})
	waitAcked(t, prods, time.Now(), 20)
	s.healZK("bj")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("switchover with bj's ZooKeeper cut off: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the switchover did not return")
	}
	stop()
	wg.Wait()
	total := checkAcksAt(t, prods, hf, "hf")
	t.Logf("%d puts acknowledged in all, %d failed", total, len(prods[0].errs)+len(prods[1].errs))
}
