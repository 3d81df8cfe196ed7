package bundle

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// zkWithFastKeeper returns the tests' ZooKeeper (skipping without one) and
// makes masters check their registrations every 300 ms until the test ends;
// the interval is restored after the bundles the test starts are closed
// (cleanups run last first): a shipper started meanwhile reads it.
func zkWithFastKeeper(t *testing.T) string {
	t.Helper()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	old := keepPublishedEvery
	keepPublishedEvery = 300 * time.Millisecond
	t.Cleanup(func() { keepPublishedEvery = old })
	return zk
}

// TestMasterRestoresItsRegistrations: a master whose replication address
// and master node vanish from ZooKeeper (a returning old master wrote them
// under its own session, then stepped down and deleted them) publishes
// them again by itself, so its slaves keep finding it; status reads the
// registration instead of remembering it, so it never reports a node that
// is gone.
func TestMasterRestoresItsRegistrations(t *testing.T) {
	zk := zkWithFastKeeper(t)
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
	waitRegistered(t, zc, bj, addr, 10*time.Second)
}

// waitRegistered waits until ids/0/replication holds the master's
// replication address addr and ids/0/master its URL, and its status
// reports the master node registered.
func waitRegistered(t *testing.T, zc *registry.Registry, bj *Bundle, addr string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	ids := zc.Paths().BrokerID(0)
	testutil.Eventually(t, timeout, 50*time.Millisecond, func() error {
		data, _, err := zc.Get(ctx, ids+"/replication")
		if err != nil || string(data) != addr {
			return fmt.Errorf("ids/0/replication = %q (%v), want %s", data, err, addr)
		}
		data, _, err = zc.Get(ctx, ids+"/master")
		if err != nil || string(data) != bj.Broker.URL() {
			return fmt.Errorf("ids/0/master = %q (%v), want %s", data, err, bj.Broker.URL())
		}
		if st := bj.Status(); st.ZooKeeper == nil || !st.ZooKeeper.BrokerRegistered {
			return errors.New("status does not report the master node registered")
		}
		return nil
	})
}

// TestMasterStartsWhenPublishingFails: a master whose replication address
// cannot be written in ZooKeeper when it starts (its ensemble lost the
// session, or refuses the write) starts anyway and publishes the address
// once ZooKeeper takes it. It used to exit ("bundle: start
// replication-master: replication: publish address: zk: connection
// closed"): a bundle restarted by the unit's command during a ZooKeeper
// outage died (fault schedules, internal/faultsched: seed 920283). Here the
// write is refused by an ACL on ids/0 that lets nobody create under it,
// then allowed (read and admin only: no create).
func TestMasterStartsWhenPublishingFails(t *testing.T) {
	zkAddr := zkWithFastKeeper(t)
	zkRoot := multiSiteRoot(t, []string{zkAddr})
	zc := zkClient(t, &testEnv{zk: zkAddr, root: zkRoot})
	ids := zc.Paths().BrokerID(0)
	ctx := context.Background()
	if err := zc.EnsurePath(ctx, path.Dir(ids)); err != nil {
		t.Fatal(err)
	}
	raw, _, err := zk.Connect([]string{zkAddr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	if _, err := raw.Create(ids, nil, 0, zk.WorldACL(zk.PermRead|zk.PermAdmin)); err != nil {
		t.Fatalf("create %s read-only: %v", ids, err)
	}
	allow := func() {
		if _, err := raw.SetACL(ids, zk.WorldACL(zk.PermAll), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("open %s again: %v", ids, err)
		}
	}
	t.Cleanup(allow) // so that the root can be removed

	bj := startSite(t, filepath.Join(t.TempDir(), "bj"), failoverINIZK(zkAddr, zkRoot, ""), siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	addr := mustComp[*shipperComponent](t, bj).Addr()
	if ok, _, _ := zc.Exists(ctx, ids+"/replication"); ok {
		t.Fatal("the replication address was written under a read-only node")
	}
	allow()
	waitRegistered(t, zc, bj, addr, 20*time.Second)
}

// TestSlaveStartsWhenZooKeeperCannotBeRead: a slave site started while the
// master's entries in ZooKeeper cannot be read (a site restarted by its
// unit during a ZooKeeper outage; the soak's seed 941075 ended there with
// "start replication-slave: replication: read /meta/brokers/ids/1: zk:
// could not connect to a server") starts and waits, and follows its master
// once the entries can be read.
func TestSlaveStartsWhenZooKeeperCannotBeRead(t *testing.T) {
	zkAddr := zkWithFastKeeper(t)
	zkRoot := multiSiteRoot(t, []string{zkAddr})
	zc := zkClient(t, &testEnv{zk: zkAddr, root: zkRoot})
	ids := zc.Paths().BrokerID(0)
	root := t.TempDir()
	shared := failoverINIZK(zkAddr, zkRoot, "")
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	ctx := context.Background()
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, _, err := zc.Get(ctx, ids+"/replication")
		return err
	})

	raw, _, err := zk.Connect([]string{zkAddr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	// Nobody may list the master's entries (ADMIN kept, to give READ back).
	if _, err := raw.SetACL(ids, zk.WorldACL(zk.PermAdmin), -1); err != nil {
		t.Fatalf("make %s unreadable: %v", ids, err)
	}
	allow := func() {
		if _, err := raw.SetACL(ids, zk.WorldACL(zk.PermAll), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("open %s again: %v", ids, err)
		}
	}
	t.Cleanup(allow)

	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: mustComp[*configSyncComponent](t, bj).NATSURL()})
	rc := mustComp[*receiverComponent](t, hf)
	allow()
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		if r := rc.Receiver(); r == nil || !r.Status().Connected {
			return fmt.Errorf("hf does not follow bj: %+v", rc.SlaveStatus())
		}
		return nil
	})
}

// TestMasterRestoresATopicEntryOnItsWatch: a master's entry under
// topics-pub, deleted by another session (an old master stepping down
// late), is written again promptly although the keeper's periodic check
// is an hour apart: the keeper reads its registrations when a ZooKeeper
// watch on them fires, not once a second. Deleted three times: the watch
// is armed again after each restoration.
func TestMasterRestoresATopicEntryOnItsWatch(t *testing.T) {
	zk := zkWithFastKeeper(t)
	old := keepPublishedBackstop
	keepPublishedBackstop = time.Hour
	t.Cleanup(func() { keepPublishedBackstop = old }) // after the bundle closed
	zkRoot := multiSiteRoot(t, []string{zk})
	bj := startSite(t, filepath.Join(t.TempDir(), "bj"), failoverINIZK(zk, zkRoot, ""), siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	addr := mustComp[*shipperComponent](t, bj).Addr()
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	waitRegistered(t, zc, bj, addr, 20*time.Second)
	ctx := context.Background()
	pub := zc.Paths().TopicsPub() + "/orders/0-m"
	for i := range 3 {
		testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
			if ok, err := bj.Registry.Owns(ctx, pub); err != nil || !ok {
				return fmt.Errorf("round %d: %s is not bj's (%v)", i, pub, err)
			}
			return nil
		})
		if err := zc.Delete(ctx, pub); err != nil {
			t.Fatalf("round %d: delete %s: %v", i, pub, err)
		}
	}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if ok, err := bj.Registry.Owns(ctx, pub); err != nil || !ok {
			return fmt.Errorf("after the last deletion: %s is not bj's (%v)", pub, err)
		}
		return nil
	})
}
