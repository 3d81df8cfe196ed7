package bundle

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestTwoSitesPromoteAtOnce: bj is killed and both slave sites, equally
// caught up, are promoted at the same moment (two operators, or automatic
// failover deciding on both sides at once). Exactly one becomes master and
// keeps taking puts; the other is refused, keeps following and follows the
// new master. A second promotion must not raise the generation again: the
// first master would step down for it while the second could not register.
func TestTwoSitesPromoteAtOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	hf, gz := s.site("hf"), s.site("gz")
	s.produce("bj", "orders", 20)
	waitCaughtUp(t, s.site("bj"), hf, "orders", 20*time.Second)
	waitCaughtUp(t, s.site("bj"), gz, "orders", 20*time.Second)

	s.kill("bj")
	// Both have lost bj and know the other has too, at the same position;
	// bj's ZooKeeper session has expired (promote refuses while its master
	// node is held by a live session).
	s.waitMasterGone("bj")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sites := []*Bundle{hf, gz}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, s := range sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Promote(ctx, false)
		}()
	}
	wg.Wait()
	var winner, loser *Bundle
	switch {
	case errs[0] == nil && errs[1] != nil:
		winner, loser = hf, gz
	case errs[1] == nil && errs[0] != nil:
		winner, loser = gz, hf
	default:
		t.Fatalf("promote at hf: %v; at gz: %v; want exactly one to succeed", errs[0], errs[1])
	}
	t.Logf("%s promoted; %s refused: %v", winner.Config().Site.Name, loser.Config().Site.Name, errors.Join(errs...))
	if loser.promotedShipper() != nil || loser.receiver() == nil || loser.receiver().Receiver() == nil {
		t.Fatalf("%s, refused, does not follow any more", loser.Config().Site.Name)
	}
	// The winner is not fenced by a second generation, and the loser follows it.
	time.Sleep(time.Second) // a few generation checks (every 100 ms at most)
	if r := winner.Broker.WriteRefusal(); r != nil {
		t.Fatalf("the new master %s refuses puts: %s", winner.Config().Site.Name, r.Reason)
	}
	s.produce(winner.Config().Site.Name, "orders", 10)
	wantFollowsByteIdentical(t, winner, loser, "orders")
}
