package bundle

import (
	"context"
	"errors"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestSwitchoverAfterTheOldSessionEndedListsTheMasterInOneStep: bj's
// ZooKeeper session ends (cut off, then expired from outside) before it
// hands over to hf, so its master node and its topics' entries are gone
// when hf registers, and ZooKeeper lists no master until hf's <id>-m
// entry is there. Before, hf registered node by node: its master node,
// then (after more reads and writes, each slow on a loaded machine) its
// topics' entries; in TestSwitchoverPassesHeldPutsOnWithoutZooKeeper at
// load 50 the listing stayed empty for 4.7 s. hf now creates its master
// node and its topics' master entries in one multi, first of all: the
// entry is created by the same ZooKeeper transaction as the node (the
// same czxid), which the test reads instead of timing the machine.
func TestSwitchoverAfterTheOldSessionEndedListsTheMasterInOneStep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{replication: switchoverTestHold})
	bj, hf := s.site("bj"), s.site("hf")
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, bj, hf, "orders", 30*time.Second)
	zc := zkClient(t, &testEnv{zk: s.zks["hf"], root: s.zkRoot})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master := zc.Paths().Broker(0, -1)
	pub := zc.Paths().TopicsPub() + "/orders/0-m"

	session, passwd := s.tapOf("bj").Credentials()
	s.cutZK("bj")
	if err := zktest.ExpireSession(s.zks["bj"], session, passwd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if ok, _, err := zc.Exists(ctx, master); err != nil || ok {
			return errors.New("bj's master node is still there")
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := bj.Switchover(ctx, "hf", "")
		done <- err
	}()
	testutil.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
		if !hf.Registry.Registration().Master() {
			return errors.New("hf has not registered as master yet")
		}
		return nil
	})
	_, mst, err := zc.Get(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	_, pst, err := zc.Get(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if mst.EphemeralOwner != hf.Registry.SessionID() || pst.EphemeralOwner != hf.Registry.SessionID() {
		t.Fatalf("master node owned by 0x%x, %s by 0x%x; hf's session is 0x%x", mst.EphemeralOwner, pub, pst.EphemeralOwner, hf.Registry.SessionID())
	}
	if mst.Czxid != pst.Czxid {
		t.Errorf("hf's master node was created at zxid 0x%x and %s at 0x%x: ZooKeeper named hf master before it listed its partitions", mst.Czxid, pub, pst.Czxid)
	}
	s.healZK("bj")
	select {
	case err := <-done:
		t.Logf("switchover with bj's session ended: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the switchover did not return")
	}
	s.produce("gz", "orders", 10)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("converged on %s, want hf", m)
	}
}
