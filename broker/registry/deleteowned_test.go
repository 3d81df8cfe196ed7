package registry

import (
	"context"
	"testing"
)

// TestDeleteOwnedLeavesAnotherSessionsNode: DeleteOwned removes a node of
// its own session and a persistent one, and leaves an ephemeral node that
// another session created at the same path (a new master's replication
// address, published while the old master was still stopping).
func TestDeleteOwnedLeavesAnotherSessionsNode(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	a := newRegistry(t, testOptions(t, root))
	b := newRegistry(t, testOptions(t, root))
	path := root + "/brokers/ids/0/replication"
	if err := a.EnsurePath(ctx, root+"/brokers/ids/0"); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateEphemeral(ctx, path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	// The new master replaces the old master's node, as publish does.
	if err := b.Delete(ctx, path); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateEphemeral(ctx, path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteOwned(ctx, path); err != nil {
		t.Fatal(err)
	}
	if data, st, err := b.Get(ctx, path); err != nil || string(data) != "new" || st.EphemeralOwner != b.SessionID() {
		t.Fatalf("after the old owner's DeleteOwned: %q owner 0x%x %v, want the new master's node", data, st.EphemeralOwner, err)
	}
	if err := b.DeleteOwned(ctx, path); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := b.Exists(ctx, path); err != nil || ok {
		t.Fatalf("after its owner's DeleteOwned: exists %v, err %v", ok, err)
	}
	if err := a.DeleteOwned(ctx, path); err != nil {
		t.Fatalf("DeleteOwned of a missing node: %v", err)
	}
	persistent := root + "/persistent"
	if err := b.SetPersistent(ctx, persistent, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteOwned(ctx, persistent); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.Exists(ctx, persistent); err != nil || ok {
		t.Fatalf("a persistent node after DeleteOwned: exists %v, err %v", ok, err)
	}
}

// TestBecomeSlaveLeavesNewMastersNodes: a master that steps down after the
// new master of its brokerId has registered (a switchover: both change
// role at once) removes none of the new master's nodes: ids/<id>/master
// and the topics' <id>-m entries stay, owned by the new master's session,
// so clients that follow ZooKeeper keep finding it.
func TestBecomeSlaveLeavesNewMastersNodes(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	old := newRegistry(t, testOptions(t, root))
	old.SetURL("meta://127.0.0.1:8123")
	if err := old.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	nopts := testOptions(t, root)
	nopts.Port = 8124
	nm := newRegistry(t, nopts)
	nm.SetURL("meta://127.0.0.1:8124")
	master := root + "/brokers/ids/0/master"
	// The old master's node goes first (it hands over), then the new
	// master registers, before the old one has finished stepping down.
	if err := nm.Delete(ctx, master); err != nil {
		t.Fatal(err)
	}
	if err := nm.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nm.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	if err := old.BecomeSlave(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{master, root + "/brokers/topics-pub/orders/0-m", root + "/brokers/topics/orders/0-m"} {
		if _, st, err := nm.Get(ctx, p); err != nil || st.EphemeralOwner != nm.SessionID() {
			t.Errorf("%s after the old master stepped down: owner 0x%x %v, want the new master's 0x%x", p, st.EphemeralOwner, err, nm.SessionID())
		}
	}
	if ok, _, err := nm.Exists(ctx, root+"/brokers/ids/0/slave1"); err != nil || !ok {
		t.Fatalf("the old master is not registered as slave 1: %v %v", ok, err)
	}
}
