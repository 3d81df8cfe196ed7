package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/netproxy"
	"metaq/internal/testutil"
	"metaq/topology"
)

// autoFailoverSites starts bj (master) and the slave sites hf and gz with
// [replication] autoFailover=true, autoFailoverAfterMs=500, ZooKeeper on,
// gossip joined at bj with 1-s probes and each slave's replication link to
// bj through its own proxy; hf and gz hold bj's log when it returns.
func autoFailoverSites(t *testing.T, zk string) (bj, hf, gz *Bundle, toHF, toGZ *netproxy.Proxy, zkRoot string) {
	t.Helper()
	root := t.TempDir()
	zkRoot = multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "autoFailover=true\nautoFailoverAfterMs=500\n")
	// deploy/'s gossip timing (1 s probes, WAN suspicion), not the tests'
	// 100 ms: these tests assert what a slave site does while gossip shows
	// its sibling alive and following, and 50-ms probe timeouts declare a
	// live bundle down within a second on a loaded machine (hf then
	// promotes with gz's position not final, by the rules). They never
	// wait for gossip to detect a crash: bj leaves the pool.
	shared = strings.Replace(shared, "probeIntervalMs=100", "probeIntervalMs=1000", 1)
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj = startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ = wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf = startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL, join: seed})
	gz = startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)
	// Before anything is cut, gossip at hf says every site is alive and
	// both slave sites replicate.
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		ok := 0
		for _, m := range mustComp[*topologyComponent](t, hf).Topology().Members() {
			if m.State == topology.StateAlive && (m.Meta.Role == topology.RoleMaster || m.Meta.Health.ReplicationOK) {
				ok++
			}
		}
		if ok != 3 {
			return fmt.Errorf("hf's gossip shows %d of 3 sites alive and replicating", ok)
		}
		return nil
	})
	return bj, hf, gz, toHF, toGZ, zkRoot
}

// cutLink refuses new connections through p, cuts the open ones, and waits
// until slave s has noticed.
func cutLink(t *testing.T, p *netproxy.Proxy, s *Bundle) {
	t.Helper()
	p.SetRefuse(true)
	p.CutAll()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, s).Connected() {
			return errors.New("still connected to bj")
		}
		return nil
	})
}

// wantNoPromotion checks, for four times autoFailoverAfterMs, that hf's
// view of the master (masterLost) says why it is not lost, and that hf is
// not promoted.
func wantNoPromotion(t *testing.T, hf *Bundle, why string) {
	t.Helper()
	topo := mustComp[*topologyComponent](t, hf).Topology()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if lost, reason := hf.masterLost(context.Background(), topo); lost || !strings.Contains(reason, why) {
			var members []string
			for _, m := range topo.Members() {
				members = append(members, fmt.Sprintf("%s %s %s replicationOK=%t", m.Meta.Site, m.Meta.Role, m.State, m.Meta.Health.ReplicationOK))
			}
			t.Fatalf("hf: master lost %t (%s), want not lost because %q; gossip: %v", lost, reason, why, members)
		}
	}
	if hf.promotedShipper() != nil {
		t.Fatal("hf promoted itself")
	}
}

// wantPromoted waits until s is master and takes puts; on a timeout it
// reports how each of sites sees the failover (failoverView).
func wantPromoted(t *testing.T, s *Bundle, sites ...*Bundle) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.promotedShipper() == nil || s.Broker.WriteRefusal() != nil {
		if time.Now().After(deadline) {
			var views []string
			for _, b := range sites {
				views = append(views, failoverView(b))
			}
			t.Fatalf("%s is not master after 30s; %s", s.Config().Site.Name, strings.Join(views, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failoverView is what automatic failover at b sees: its role and
// transition, whether the master is lost and why, the candidate, a
// sibling ahead, and its gossip of the brokerId.
func failoverView(b *Bundle) string {
	name := b.Config().Site.Name
	st := b.Role()
	v := fmt.Sprintf("%s: role %s gen %d busy %s promoted %t applied %d", name, st.Role, st.Generation, b.failover.role.Busy(), b.promotedShipper() != nil, b.appliedPos())
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return v + " (no gossip)"
	}
	topo := tc.Topology()
	lost, why := b.masterLost(context.Background(), topo)
	cand, _ := b.failoverCandidate(topo)
	v += fmt.Sprintf(", master lost %t (%s), candidate %s, sibling ahead %q, down sibling ahead %q, gossip [", lost, why, cand,
		b.siblingAhead(b.appliedPos()), b.downSiblingAhead(topo))
	for i, p := range gossipPeers(topo, b.Config().System.BrokerID) {
		if i > 0 {
			v += ", "
		}
		v += fmt.Sprintf("%s %s alive=%t suspect=%t downFor=%v gen=%d follows=%t logPos=%d", p.Site, p.Role, p.Alive, p.Suspect, p.DownFor.Round(time.Millisecond), p.Generation, p.Follows, p.LogPos)
	}
	v += "]"
	if p := b.pendingPromotion(); p != nil {
		v += fmt.Sprintf(", pending promotion %+v", *p)
	}
	return v
}

// TestAutoFailoverWaitsWhileASiteFollows: gossip loses bj (bj leaves the
// gossip pool) and hf's replication link to bj is cut, while bj still holds
// ids/0/master in ZooKeeper with a live session and gz still replicates
// from it. hf takes that session for a dead master's (link down, gossip
// declared bj down, silent for longer than a master acknowledges without
// confirming its generation), as promote without -force does, so its
// ZooKeeper no longer holds it back; but gz still follows bj, so gz's
// position is not final and hf does not promote itself (the candidate
// rule: a slave site promotes only when every live sibling's position is
// final and none is ahead). Once bj stops (gz loses it too), a slave site
// promotes itself, once.
func TestAutoFailoverWaitsWhileASiteFollows(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	bj, hf, gz, toHF, _, _ := autoFailoverSites(t, zk)
	if err := mustComp[*topologyComponent](t, bj).Close(); err != nil {
		t.Fatal(err)
	}
	cutLink(t, toHF, hf)
	topo := mustComp[*topologyComponent](t, hf).Topology()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if lost, why := hf.masterLost(context.Background(), topo); !lost || !strings.Contains(why, "held by a dead master's session") {
			return fmt.Errorf("hf: master lost %t: %s", lost, why)
		}
		return nil
	})
	// Four times autoFailoverAfterMs: hf stays a slave, and says why.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if hf.promotedShipper() != nil {
			t.Fatal("hf promoted itself while gz still follows bj")
		}
	}
	if _, err := hf.Promote(context.Background(), false); !errors.Is(err, ErrSiblingAhead) || !strings.Contains(err.Error(), "gz still follows") {
		t.Fatalf("promote at hf while gz follows bj: %v, want ErrSiblingAhead naming gz", err)
	}

	// Both slave sites hold all of bj's log: the candidate rule (ties to
	// the lowest site name) picks gz, and hf follows it.
	bj.Close()
	wantPromoted(t, gz, gz, hf)
	if hf.promotedShipper() != nil {
		t.Fatal("hf promoted itself too")
	}
	produce(t, gz.Broker.Addr().String(), "orders", 10, "gz")
	wantFollowsByteIdentical(t, gz, hf, "orders")
}

// TestAutoFailoverWaitsForGossipMajority, the converse: bj's master node is
// gone from hf's ZooKeeper and hf's link to bj is cut, but gossip says bj
// is alive and gz still replicates from it (1 of 3 sites agree): no
// promotion. Once gz loses bj too and gossip loses bj, a slave site
// promotes itself, once, and bj, still up, rejoins as its slave.
func TestAutoFailoverWaitsForGossipMajority(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	// The test removes bj's master node by hand to stand for a ZooKeeper
	// that no longer shows it; a master puts a missing node back, so bj's
	// keeper must not look within the test.
	old := keepPublishedEvery
	keepPublishedEvery = time.Hour
	// Restored after the bundles the test starts are closed (cleanups run last
	// first): a shipper started meanwhile reads it.
	t.Cleanup(func() { keepPublishedEvery = old })
	bj, hf, gz, toHF, toGZ, zkRoot := autoFailoverSites(t, zk)
	cutLink(t, toHF, hf)
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	if err := zc.Delete(context.Background(), zc.Paths().BrokerID(0)+"/master"); err != nil {
		t.Fatal(err)
	}
	wantNoPromotion(t, hf, "1 of 3 sites agree")

	// gz loses bj too and bj leaves the gossip pool (a promotion is refused
	// while gossip has the master alive), but bj stays up. Both slave sites
	// hold all of bj's log: the candidate rule (ties to the lowest site
	// name) picks gz, once; hf follows gz, and bj steps down and rejoins as
	// gz's slave.
	if err := mustComp[*topologyComponent](t, bj).Close(); err != nil {
		t.Fatal(err)
	}
	cutLink(t, toGZ, gz)
	wantPromoted(t, gz, gz, hf, bj)
	produce(t, gz.Broker.Addr().String(), "orders", 10, "gz")
	wantFollowsByteIdentical(t, gz, hf, "orders")
	wantFollowsByteIdentical(t, gz, bj, "orders")
	if hf.promotedShipper() != nil {
		t.Fatal("hf promoted itself too")
	}
}

// TestPromotingSiteGossipsItsPosition: a slave site being promoted stops
// following its master before it starts shipping as master; meanwhile its
// gossip must carry the log position it applied, not 0 (no receiver runs):
// with 0 its sibling, holding as much of the old master's log, took itself
// for the automatic failover candidate and promoted itself against this
// site's raise. The test reads the metadata gossip would carry, as often
// as it can, while hf is promoted.
func TestPromotingSiteGossipsItsPosition(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	hf := s.site("hf")
	s.stop("bj")
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Connected() {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	// Final now: bj is gone.
	want := hf.appliedPos()
	if want <= 0 {
		t.Fatalf("hf applied %d of bj's log", want)
	}

	static := topology.Mastership{Role: topology.RoleSlave, SlaveID: 1}
	stop := make(chan struct{})
	seen := make(chan string, 1)
	go func() {
		defer close(seen)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m := hf.mastership(static); m.Role == topology.RoleSlave && m.LogPos != want {
				seen <- fmt.Sprintf("hf gossiped a slave's log position %d while promoted (busy %s), want %d", m.LogPos, hf.failover.role.Busy(), want)
				return
			}
		}
	}()
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		_, err := hf.Promote(context.Background(), false)
		return err
	})
	close(stop)
	if why, ok := <-seen; ok {
		t.Fatal(why)
	}
	if m := hf.mastership(static); m.Role != topology.RoleMaster {
		t.Fatalf("hf gossips %v after its promotion, want master", m.Role)
	}
}
