package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestMasterRestoresItsRegistrations: a master whose replication address
// and master node vanish from ZooKeeper (a returning old master wrote them
// under its own session, then stepped down and deleted them) publishes
// them again by itself, so its slaves keep finding it; status reads the
// registration instead of remembering it, so it never reports a node that
// is gone.
func TestMasterRestoresItsRegistrations(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	old := keepPublishedEvery
	keepPublishedEvery = 300 * time.Millisecond
	// Restored after the bundles the test starts are closed (cleanups run last
	// first): a shipper started meanwhile reads it.
	t.Cleanup(func() { keepPublishedEvery = old })
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	bj := startSite(t, filepath.Join(root, "bj"), failoverINIZK(zk, zkRoot, ""), siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	addr := mustComp[*shipperComponent](t, bj).Addr()
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	ctx := context.Background()
	ids := zc.Paths().BrokerID(0)
	if st := bj.Status(); st.ZooKeeper == nil || !st.ZooKeeper.BrokerRegistered {
		t.Fatalf("status before: %+v", st.ZooKeeper)
	}
	if err := zc.Delete(ctx, ids+"/replication"); err != nil {
		t.Fatal(err)
	}
	if err := zc.Delete(ctx, ids+"/master"); err != nil {
		t.Fatal(err)
	}
	if st := bj.Status(); st.ZooKeeper.BrokerRegistered {
		// The keeper may already have put it back: then it is there.
		if ok, _, _ := zc.Exists(ctx, ids+"/master"); !ok {
			t.Fatal("status reports the master node registered while it is missing")
		}
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		data, _, err := zc.Get(ctx, ids+"/replication")
		if err != nil || string(data) != addr {
			return fmt.Errorf("ids/0/replication = %q (%v), want %s", data, err, addr)
		}
		data, _, err = zc.Get(ctx, ids+"/master")
		if err != nil || string(data) != bj.Broker.URL() {
			return fmt.Errorf("ids/0/master = %q (%v), want %s", data, err, bj.Broker.URL())
		}
		if st := bj.Status(); !st.ZooKeeper.BrokerRegistered {
			return errors.New("status does not report the master node registered again")
		}
		return nil
	})
}
