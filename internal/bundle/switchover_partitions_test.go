package bundle

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestSwitchoverKeepsTopicPartitionsListed: throughout `switchover -to
// hf`, ZooKeeper lists the topic with a master's partitions (bj's, then
// hf's): hf replaces bj's entries in one step as bj hands over, and bj,
// stepping down, removes only its own. A producer that reads the topic
// at any moment finds partitions to send to.
func TestSwitchoverKeepsTopicPartitionsListed(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "", noConfigSync)
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		empty []string
		reads int
	)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			tb, err := zc.TopicBrokers(ctx, registry.TreeTopicsPub, "orders")
			mu.Lock()
			reads++
			if err == nil && len(tb) == 0 && len(empty) < 5 {
				empty = append(empty, time.Now().Format("15:04:05.000"))
			}
			mu.Unlock()
		}
	}()
	rep, err := bj.Switchover(ctx, "hf", "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if hf.Broker.WriteRefusal() != nil {
			return fmt.Errorf("hf refuses puts: %v", hf.Broker.WriteRefusal())
		}
		if bj.demotedReceiver() == nil {
			return fmt.Errorf("bj has not become a slave")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if len(empty) > 0 {
		t.Fatalf("during the switchover ZooKeeper listed orders with no partitions at %v (%d reads)", empty, reads)
	}
	t.Logf("switchover to %s: %d reads of topics-pub/orders, never empty", rep.To, reads)
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
}
