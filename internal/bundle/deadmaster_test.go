package bundle

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestDeadMasterNoFallBackToMetaQGet: a master killed on a live host
// (its ports refuse connections, its ZooKeeper nodes stay until its session
// expires) is not taken for a master behind a firewall: its slave keeps the
// stream receiver, which knows how far it got in the master's log (what a
// promotion and automatic failover's choice of candidate read), instead of
// switching to MetaQ's get, which cannot reach that master either.
func TestDeadMasterNoFallBackToMetaQGet(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	// bj's nodes outlive it for 20 s, long enough to watch hf decide.
	shared := strings.Replace(failoverINIZK(zk, zkRoot, ""), "zk.zkSessionTimeoutMs=5000", "zk.zkSessionTimeoutMs=20000", 1)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true,
		options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	killBundle(bj, tap)
	rc := mustComp[*receiverComponent](t, hf)
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		r := rc.Receiver()
		if r == nil {
			return errors.New("no stream receiver")
		}
		if n := r.Status().DialFailures; n < unreachableAfter {
			return fmt.Errorf("%d failed dials so far", n)
		}
		return nil
	})
	// The slave decides on its supervision ticks (every 2 s): give it two.
	time.Sleep(4500 * time.Millisecond)
	if m, why := rc.Method(); m != methodStream || rc.Receiver() == nil {
		t.Fatalf("hf copies with %q (%s), want the stream receiver kept", m, why)
	}
	if hf.appliedPos() <= 0 {
		t.Fatalf("hf's applied log position %d: unknown", hf.appliedPos())
	}
}

// killBundle stops b as a kill on a live host does, as far as other sites
// can tell: its ZooKeeper connection is cut first (its session, and with it
// its nodes, lives on until it expires), its gossip stops without a word,
// then everything closes without
// waiting for ZooKeeper (a clean Close would unregister first and keep its
// ports open meanwhile). It returns once b's ports are closed.
func killBundle(b *Bundle, zk *zktest.Tap) {
	zk.Block()
	// Gossip stops without leaving the pool: the other sites find the
	// bundle down by failure detection, as after kill -9.
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		_ = tc.Topology().Crash()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // up to a second: the close request cannot be sent
		defer wg.Done()
		if b.Registry != nil {
			b.Registry.Close()
		}
	}()
	time.Sleep(10 * time.Millisecond) // the registry refuses calls from here
	b.Close()
	wg.Wait()
}
