package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestPromoteMovesConsumerOffsetsBackToItsEnds: a consumer group that read
// records of bj that never reached hf has committed an offset beyond hf's
// end; when hf is promoted that offset is set back to hf's end (where hf
// stores its own records from now on), and an offset within what hf holds,
// or of another brokerId, stays as it was.
func TestPromoteMovesConsumerOffsetsBackToItsEnds(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: "nats://" + natsListen})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "replicated")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	toHF.SetRefuse(true)
	toHF.CutAll()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Receiver().Status().Connected {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "lost")
	hfEnd, err := hf.Store.Partition("orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	bjEnd, err := bj.Store.Partition("orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if bjEnd.Max <= hfEnd.Max {
		t.Fatalf("bj holds nothing hf lacks in orders-0 (bj %d, hf %d)", bjEnd.Max, hfEnd.Max)
	}

	ctx := context.Background()
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	commits := []struct {
		group     string
		brokerID  int
		msgID, at int64
	}{
		{"read-past", 0, 7, bjEnd.Max},  // read bj's unreplicated records
		{"behind", 0, 5, hfEnd.Max / 2}, // within what hf holds
		{"other", 1, 9, bjEnd.Max},      // another brokerId's partition
	}
	for _, c := range commits {
		if err := zc.CommitOffset(ctx, c.group, "orders", c.brokerID, 0, c.msgID, c.at); err != nil {
			t.Fatal(err)
		}
	}
	bj.Close()
	if _, err := hf.Promote(ctx, false); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"read-past": registry.FormatOffset(-1, hfEnd.Max),
		"behind":    registry.FormatOffset(5, hfEnd.Max/2),
		"other":     registry.FormatOffset(9, bjEnd.Max),
	}
	for _, c := range commits {
		path := fmt.Sprintf("%s/%d-0", zc.Paths().ConsumerOffsets(c.group, "orders"), c.brokerID)
		data, _, err := zc.Get(ctx, path)
		if err != nil || string(data) != want[c.group] {
			t.Errorf("%s = %q %v, want %q", path, data, err, want[c.group])
		}
	}
}
