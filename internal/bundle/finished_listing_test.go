package bundle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestFinishedPromotionListsItsTopics: hf's forced promotion (bj killed)
// loses its ZooKeeper connection on the write of its topic's master entry
// under topics-pub ("zk: connection closed", as gz's promotion met in
// TestFailoverScenarios/switchover_then_kill), and the background
// finisher completes it. Before the fix the registry had taken the
// master's role before that write, so the finisher's retry found it a
// master already and wrote nothing: hf was master with no entry under
// topics-pub/orders, and producers found no partition for good. Then,
// hf's entry removed from outside (an old master stepping down late
// deletes what it owned, and may take a node written in its place in one
// step, which has its version): hf writes it again by itself.
func TestFinishedPromotionListsItsTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zkWithFastKeeper(t)
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 10)
	hf := s.site("hf")
	waitCaughtUp(t, s.site("bj"), hf, "orders", 30*time.Second)
	s.kill("bj")

	s.mu.Lock()
	hfZK := s.zks["hf"]
	s.mu.Unlock()
	s.tapOf("hf").BlockBeforeWrite(hfZK, "topics-pub/orders/0-m")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := hf.Promote(ctx, true); !errors.Is(err, ErrPromotionPending) {
		t.Fatalf("hf's promotion with the write of its topics-pub entry cut: %v, want it left to the finisher", err)
	}
	// The promotion may have been left to the finisher before it reached
	// that write (a slow step under load): heal only once the write was
	// cut, or the finisher's write would cut it after the heal, for good.
	tap := s.tapOf("hf")
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		if !tap.Blocked() {
			return errors.New("hf's write of its topics-pub entry not cut yet")
		}
		return nil
	})
	s.healZK("hf")
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if r := hf.Role(); r.Role != siterole.Master || hf.pendingPromotion() != nil {
			return fmt.Errorf("hf: %v, pending %+v", r, hf.pendingPromotion())
		}
		return nil
	})
	pub := hf.Registry.Paths().TopicsPub() + "/orders/0-m"
	listed := func(what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			if ok, err := hf.Registry.Owns(ctx, pub); err != nil || !ok {
				return fmt.Errorf("%s: %s is not hf's (%v)", what, pub, err)
			}
			return nil
		})
	}
	listed("after the finished promotion")
	s.produce("hf", "orders", 10)

	zc := zkClient(t, &testEnv{zk: hfZK, root: s.zkRoot})
	if err := zc.Delete(ctx, pub); err != nil {
		t.Fatal(err)
	}
	listed("after the entry was removed from outside")
	s.produce("gz", "orders", 10)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("converged on %s, want hf", m)
	}
}
