package bundle

import (
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/dashboard"
	"metaq/internal/testutil"
)

// TestDashboardCountsHeldMessagesOnSlaves: a slave restarted after it
// replicated shows in its dashboard's topic table every message it holds,
// not only those replicated since its restart.
func TestDashboardCountsHeldMessagesOnSlaves(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	shared := sharedINI("", "", "[topic=orders]\nnumPartitions=1\n")
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	spec := siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: bj.ReplicationAddr(), natsURL: bj.NATSURL()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, spec)
	repeated := produce(t, bj.Broker.Addr().String(), "orders", 10, "x")
	waitCaughtUp(t, bj, hf, "orders", 10*time.Second)
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}
	hf = startSite(t, filepath.Join(root, "hf"), shared, spec)
	maps.Copy(repeated, produce(t, bj.Broker.Addr().String(), "orders", 5, "y"))
	waitCaughtUp(t, bj, hf, "orders", 10*time.Second)
	// A put stored but not acknowledged was sent again and may be there
	// twice: hf's dashboard counts what hf holds, the 15 sent and those.
	held := storedBodies(t, hf, "orders")
	checkBodies(t, "hf's orders", held, append(sentBodies("x", 10), sentBodies("y", 5)...), repeated)
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		var snap dashboard.Snapshot
		getJSON(t, "http://"+mustComp[*dashboardComponent](t, hf).Addr()+"/api/snapshot", &snap)
		if len(snap.Topics) != 1 || len(snap.Topics[0].Partitions) != 1 {
			return fmt.Errorf("topics %+v", snap.Topics)
		}
		if got := snap.Topics[0].Partitions[0].Messages; got != int64(len(held)) {
			return fmt.Errorf("hf's dashboard shows %d messages in orders-0, want the %d hf holds", got, len(held))
		}
		return nil
	})
}
