package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestTwoSitesPromoteAtOnce: bj is killed and both slave sites, equally
// caught up, are promoted at the same moment (two operators, or automatic
// failover deciding on both sides at once). Exactly one becomes master and
// keeps taking puts; the other is refused, keeps following and follows the
// new master. A second promotion must not raise the generation again: the
// first master would step down for it while the second could not register.
func TestTwoSitesPromoteAtOnce(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true,
		options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, noNATS: true, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	killBundle(bj, tap)
	// Both have lost bj and know the other has too, at the same position;
	// bj's ZooKeeper session has expired (promote refuses while its master
	// node is held by a live session).
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if held, _, err := zc.Exists(context.Background(), zc.Paths().Broker(0, -1)); err != nil || held {
			return fmt.Errorf("bj's master node is still in ZooKeeper (%v)", err)
		}
		for _, s := range []*Bundle{hf, gz} {
			if s.receiver().Connected() {
				return fmt.Errorf("%s still follows bj", s.Config().Site.Name)
			}
			if why := s.siblingAhead(s.appliedPos()); why != "" {
				return fmt.Errorf("%s: %s", s.Config().Site.Name, why)
			}
		}
		return nil
	})
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
	produce(t, winner.Broker.Addr().String(), "orders", 10, "new")
	wantFollowsByteIdentical(t, winner, loser, "orders")
}
