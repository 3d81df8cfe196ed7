package bundle

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestPromoteFencesADeadMastersSession: with deploy/'s
// zk.zkSessionTimeoutMs=30000, bj is killed (its ZooKeeper session, and
// its master node, outlive it for 30 s). `promote` without -force at hf
// succeeds well before the session expires (goal: 10 s), keeping its checks: the link is down,
// gossip declared bj down and bj has been silent for longer than a master
// acknowledges without confirming its generation, so the session is a dead
// master's: the generation is raised and the node taken instead of waited
// for. hf then takes puts and ZooKeeper names it master; its listing of
// the topic never names a master without a master node (before, the node
// was removed one ackBound, 3 s, before hf registered).
func TestPromoteFencesADeadMastersSession(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := strings.Replace(failoverINIZK(zk, zkRoot, "", noConfigSync), "zk.zkSessionTimeoutMs=5000", "zk.zkSessionTimeoutMs=30000", 1)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	join := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true, join: join})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, noNATS: true, join: join})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	w := &listingWatch{zc: zc, topic: "orders"}
	stopWatch := w.start(context.Background(), func(string, bool) {}, 0)
	defer stopWatch()
	killed := time.Now()
	killBundle(bj, tap)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		rep     PromoteReport
		err     error
		lastErr string
	)
	for time.Since(killed) < 25*time.Second {
		if rep, err = hf.Promote(ctx, false); err == nil {
			break
		}
		if err.Error() != lastErr {
			t.Logf("%v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
			lastErr = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("promote without -force still refused %v after the kill: %v", time.Since(killed), err)
	}
	took := time.Since(killed)
	t.Logf("hf promoted %v after bj's kill (fenced session %s, waited %v)", took, rep.FencedSession, rep.Waited)
	if rep.FencedSession == "" {
		t.Errorf("the promotion did not take the dead master's node (waited %v)", rep.Waited)
	}
	// The goal is 10 s; the bound leaves room for a loaded machine, where
	// gossip's probes stretch. Waiting for the session takes 30 s.
	if took > 15*time.Second {
		t.Errorf("hf was promoted %v after the kill, want well within the 30 s session timeout (goal: 10 s)", took)
	}
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	// The dead master's entry under topics-pub outlives it with its
	// session; its master node must too, until hf's replace both.
	stopWatch()
	if reads, gaps := w.result(); len(gaps) > 0 {
		t.Errorf("during the promotion ZooKeeper listed no master of orders: %s (%d reads)", strings.Join(gaps, "; "), reads)
	} else {
		t.Logf("%d reads of the listing during the promotion, a master in every one", reads)
	}
	if data, _, err := zc.Get(ctx, zc.Paths().BrokerID(0)+"/master"); err != nil || string(data) != hf.Broker.URL() {
		t.Fatalf("ids/0/master = %q (%v), want hf's %s", data, err, hf.Broker.URL())
	}
	wantFollowsByteIdentical(t, hf, gz, "orders")
}

// TestPromoteWaitWaitsForTheSession: without gossip nothing but the
// session's expiry tells that a killed master is gone: promote refuses and
// says so, and promote -wait waits for the session and reports how long.
func TestPromoteWaitWaitsForTheSession(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "", noConfigSync)
	shared = strings.Replace(shared, "[gossip]\n", "[gossip]\nenable=false\n", 1)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	killBundle(bj, tap)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Connected() {
			return context.DeadlineExceeded
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := hf.Promote(ctx, false); err == nil || !strings.Contains(err.Error(), "gossip is off") || !strings.Contains(err.Error(), "promote -wait") {
		t.Fatalf("promote without gossip while the session lives: %v, want a refusal naming gossip and -wait", err)
	}
	rep, err := hf.PromoteWith(ctx, PromoteOptions{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Waited < time.Second || rep.FencedSession != "" {
		t.Fatalf("promote -wait waited %v (fenced %q), want it to wait for the session", rep.Waited, rep.FencedSession)
	}
	t.Logf("promote -wait waited %v for the killed master's session", rep.Waited)
	produce(t, hf.Broker.Addr().String(), "orders", 5, "hf")
}
