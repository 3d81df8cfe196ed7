package registry

import (
	"context"
	"testing"
	"time"
)

// TestBecomeMasterFromReplacesInOneStep: a slave that takes over from a
// master handing over replaces the old master's node and its topics'
// <id>-m entries under topics-pub in one multi (they share the
// transaction that created them), so a client listing a topic never finds
// them missing, and nothing of the listing goes when the old master's
// session ends afterwards.
func TestBecomeMasterFromReplacesInOneStep(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	old := newRegistry(t, testOptions(t, root))
	old.SetURL("meta://127.0.0.1:8123")
	if err := old.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	topics := []string{"orders", "events"}
	for _, topic := range topics {
		if err := old.RegisterTopic(ctx, topic, 2, true, true); err != nil {
			t.Fatal(err)
		}
	}
	sopts := testOptions(t, root)
	sopts.Port, sopts.Slave, sopts.SlaveID = 8124, true, 1
	nm := newRegistry(t, sopts)
	nm.SetURL("meta://127.0.0.1:8124")
	if err := nm.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if err := nm.RegisterTopic(ctx, topic, 2, true, true); err != nil {
			t.Fatal(err)
		}
	}

	if err := nm.BecomeMasterFrom(ctx, old.SessionID()); err != nil {
		t.Fatal(err)
	}
	master := root + "/brokers/ids/0/master"
	data, mst, err := nm.Get(ctx, master)
	if err != nil || string(data) != "meta://127.0.0.1:8124" || mst.EphemeralOwner != nm.SessionID() {
		t.Fatalf("master node %q owner 0x%x %v, want the new master's", data, mst.EphemeralOwner, err)
	}
	for _, topic := range topics {
		pub := root + "/brokers/topics-pub/" + topic + "/0-m"
		_, st, err := nm.Get(ctx, pub)
		if err != nil || st.EphemeralOwner != nm.SessionID() {
			t.Fatalf("%s owner 0x%x %v, want the new master's", pub, st.EphemeralOwner, err)
		}
		if st.Czxid != mst.Czxid {
			t.Errorf("%s was created in transaction 0x%x, the master node in 0x%x: not in one step", pub, st.Czxid, mst.Czxid)
		}
	}
	if !nm.Registration().Master() {
		t.Fatal("the registration is not a master's")
	}

	// The old master's session ends: the listing stays.
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		for _, p := range []string{master, root + "/brokers/topics-pub/" + topic + "/0-m", root + "/brokers/topics-sub/" + topic + "/0-m",
			root + "/brokers/topics-pub/" + topic + "/0-s1"} {
			if _, st, err := nm.Get(ctx, p); err != nil || st.EphemeralOwner != nm.SessionID() {
				t.Errorf("%s after the old master's session ended: owner 0x%x %v, want the new master's 0x%x", p, st.EphemeralOwner, err, nm.SessionID())
			}
		}
	}
}

// TestBecomeMasterFromRetriesWhenAnEntryMoved: when a whole site is lost
// and its brokerIds are promoted together, another brokerId's new master
// may delete the old master's topics-pub entries (superseded) between the
// take-over's reads and its multi, which then fails. The take-over reads
// again and takes the master node at once, instead of waiting for the old
// master's session to expire (30 s in deploy/: seen as a 27 s promotion).
func TestBecomeMasterFromRetriesWhenAnEntryMoved(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	old, _ := registerWithTopic(t, testOptions(t, root), "orders")
	sopts := testOptions(t, root)
	sopts.Port, sopts.Slave, sopts.SlaveID = 8124, true, 1
	nm, _ := registerWithTopic(t, sopts, "orders")
	pub := root + "/brokers/topics-pub/orders/0-m"
	tool := newRegistry(t, testOptions(t, root))
	hooked := false
	testHookTakeOverMulti = func() {
		if hooked {
			return
		}
		hooked = true
		if err := tool.Delete(ctx, pub); err != nil {
			t.Errorf("delete %s between the take-over's reads and its multi: %v", pub, err)
		}
	}
	t.Cleanup(func() { testHookTakeOverMulti = nil })

	began := time.Now()
	if err := nm.BecomeMasterFrom(ctx, old.SessionID()); err != nil {
		t.Fatalf("after %v: %v", time.Since(began).Round(time.Millisecond), err)
	}
	if !hooked {
		t.Fatal("the take-over made no multi")
	}
	master := root + "/brokers/ids/0/master"
	data, mst, err := nm.Get(ctx, master)
	if err != nil || string(data) != "meta://127.0.0.1:8124" || mst.EphemeralOwner != nm.SessionID() {
		t.Fatalf("master node %q owner 0x%x %v, want the new master's", data, mst.EphemeralOwner, err)
	}
	if _, st, err := nm.Get(ctx, pub); err != nil || st.Czxid != mst.Czxid {
		t.Fatalf("%s: %v (created in 0x%x, the master node in 0x%x), want it created with the master node", pub, err, st.Czxid, mst.Czxid)
	}
}
