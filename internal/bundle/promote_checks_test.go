package bundle

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/internal/testutil"
)

// produceBig sends n messages of size random (incompressible) bytes each
// to topic at addr.
func produceBig(t *testing.T, addr, topic string, n, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := client.NewProducer(c)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range n {
		body := make([]byte, size)
		rand.Read(body)
		if _, err := p.Send(ctx, &client.Message{Topic: topic, Payload: body}); err != nil {
			t.Fatalf("send #%d: %v", i, err)
		}
	}
}

// TestPromoteRefusedWhileGossipHasMaster: hf's replication link to bj is
// down, but gossip still has bj's bundle alive: promote refuses and says
// so. Once bj is gone, promote succeeds, and its report carries the last
// lag report bj sent over the link: how many bytes and messages each
// partition was behind (hf was held back by a bandwidth cap).
func TestPromoteRefusedWhileGossipHasMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	// One byte a second after the first frames (the token bucket's burst,
	// about 260 KB a connection): hf falls behind and stays there. The
	// stream then waits for tokens, sends no keepalive, and hf reconnects
	// after its idle timeout: each connection starts with a keepalive and
	// the lag report.
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(),
		natsURL: "nats://" + natsListen, join: seed, slaveExtra: "bandwidthBytesPerSec=1\n"})
	rc := mustComp[*receiverComponent](t, hf)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !rc.Connected() {
			return errors.New("hf not connected")
		}
		return nil
	})
	produceBig(t, bj.Broker.Addr().String(), "orders", 60, 10<<10)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		lr, ok := rc.Receiver().LastLagReport()
		if !ok || lr.Lagging == 0 {
			return errors.New("no lag report showing hf behind yet")
		}
		return nil
	})
	toHF.SetRefuse(true)
	toHF.CutAll()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if rc.Connected() {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	_, err := hf.Promote(context.Background(), false)
	if !errors.Is(err, ErrMasterReachable) || !strings.Contains(err.Error(), "gossip has the master's bundle") ||
		strings.Contains(err.Error(), "link to the master") {
		t.Fatalf("promote with bj alive in gossip: %v", err)
	}
	bj.Close()
	var rep PromoteReport
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		rep, err = hf.Promote(context.Background(), false)
		return err
	})
	lr := rep.LagReport
	if lr == nil || len(lr.Partitions) == 0 {
		t.Fatalf("promote report without per-partition lag: %+v", rep)
	}
	var bytes, msgs int64
	for _, p := range lr.Partitions {
		if p.Topic != "orders" || p.Bytes <= 0 || p.Messages <= 0 {
			t.Fatalf("partition lag %+v", p)
		}
		bytes += p.Bytes
		msgs += p.Messages
	}
	if msgs > 60 || bytes != lr.Bytes || msgs != lr.Messages {
		t.Fatalf("lag report %+v: partitions sum to %d bytes, %d messages", lr, bytes, msgs)
	}
	t.Logf("hf was %d bytes, %d messages behind in %d partitions", lr.Bytes, lr.Messages, lr.Lagging)
}

// TestPromoteRefusedWhileZooKeeperHasMaster: hf has never reached a
// master and gossip knows none, but its ZooKeeper holds the brokerId's
// master node in a live session that is not hf's: promote refuses and
// names the node. Once the node is gone, promote succeeds.
func TestPromoteRefusedWhileZooKeeperHasMaster(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := zc.Paths().Broker(0, -1)
	if err := zc.EnsurePath(ctx, zc.Paths().BrokerID(0)); err != nil {
		t.Fatal(err)
	}
	if err := zc.CreateEphemeral(ctx, node, []byte("meta://127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: "127.0.0.1:1", natsURL: "nats://127.0.0.1:1"})
	_, err := hf.Promote(ctx, false)
	if !errors.Is(err, ErrMasterReachable) || !strings.Contains(err.Error(), "ZooKeeper has the master node "+node) ||
		strings.Contains(err.Error(), "gossip has the master") || strings.Contains(err.Error(), "link to the master (") {
		t.Fatalf("promote with the master node in ZooKeeper: %v", err)
	}
	if err := zc.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	rep, err := hf.Promote(ctx, false)
	if err != nil || rep.Generation != 1 || rep.Forced {
		t.Fatalf("promote once the master node is gone: %+v %v", rep, err)
	}
}
