package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/broker/registry/zktest"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestKilledMasterRestartedByUnitCommandJoinsAsSlave: bj, the master, is
// killed; gz is promoted (-force, README "Losing a site" step 2); bj comes
// back with its unit's unchanged command (`start -f server.ini`, master
// role, no role recorded: it never stepped down). It reads the generation
// before it touches a znode and starts as a slave of gz: at no time does
// ZooKeeper name bj master, lose gz's replication address, or list the
// topic without partitions; gz keeps its replica (bj follows it byte for
// byte) and bj's start does not wait for a session.
func TestKilledMasterRestartedByUnitCommandJoinsAsSlave(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "", noConfigSync)
	tap := &zktest.Tap{}
	bjDir := filepath.Join(root, "bj")
	bj := startSite(t, bjDir, shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 40, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	killBundle(bj, tap)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := gz.Promote(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	gzRepl := gz.promotedShipper().Addr()
	produce(t, gz.Broker.Addr().String(), "orders", 20, "gz")

	// Watch ZooKeeper while bj comes back.
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	ids := zc.Paths().BrokerID(0)
	var (
		mu  sync.Mutex
		bad []string
	)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			note := func(s string) {
				mu.Lock()
				if len(bad) < 10 {
					bad = append(bad, s)
				}
				mu.Unlock()
			}
			if data, _, err := zc.Get(ctx, ids+"/master"); err != nil || string(data) != gz.Broker.URL() {
				note(fmt.Sprintf("ids/0/master = %q (%v), want gz's %s", data, err, gz.Broker.URL()))
			}
			if data, _, err := zc.Get(ctx, ids+"/replication"); err != nil || string(data) != gzRepl {
				note(fmt.Sprintf("ids/0/replication = %q (%v), want gz's %s", data, err, gzRepl))
			}
			if tb, err := zc.TopicBrokers(ctx, registry.TreeTopicsPub, "orders"); err != nil || len(tb) == 0 {
				note(fmt.Sprintf("topics-pub/orders lists %d brokers (%v)", len(tb), err))
			}
		}
	}()
	start := time.Now()
	bj = startSite(t, bjDir, shared, siteSpec{name: "bj", noNATS: true})
	took := time.Since(start)
	if r := bj.Role(); r.Role != siterole.Slave || r.Generation != rep.Generation {
		t.Fatalf("bj restarted as master: role %v, want a slave of generation %d", r, rep.Generation)
	}
	// Generous for a loaded machine; a start that waits for a live
	// session's node waits the whole session timeout (5 s here) on top.
	if took > 15*time.Second {
		t.Errorf("bj's start took %v: it waited for a session", took)
	}
	wantFollowsByteIdentical(t, gz, bj, "orders")
	wantFollowsByteIdentical(t, gz, hf, "orders")
	time.Sleep(500 * time.Millisecond) // what bj may still do after it caught up
	close(stop)
	<-watched
	for _, b := range bad {
		t.Error(b)
	}
	if r := bj.Broker.WriteRefusal(); r == nil || r.Retry {
		t.Fatalf("bj as gz's slave: refusal %+v, want a final one", r)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		n := 0
		for _, g := range gz.promotedShipper().Shipper().Lag() {
			if g.Connected {
				n++
			}
		}
		if n != 2 {
			return errors.New("gz's shipper does not serve both bj and hf")
		}
		return nil
	})
	t.Logf("bj restarted as gz's slave in %v", took)
}
