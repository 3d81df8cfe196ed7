package registry

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSwitchoverChangesTopicsPubOnce replays a switchover's registry
// writes, there and back (the slave that takes over removes the old
// master's node and becomes master, the old master becomes the slave it
// leaves), and checks that the children of topics-pub/<topic> change in
// one step each time: the new master's <id>-m replacing the old master's,
// one delete and one create in one transaction. MetaQ 1.4.6's Java
// producer closes its connection to every master it knows on each change
// of those children (whatever the child), failing the put in flight
// there; the slaves' <id>-s<n> entries, which it ignores otherwise, made
// two more changes (the new master's removed, the old master's added),
// each dropping the producers' connection to the new master.
func TestSwitchoverChangesTopicsPubOnce(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	reg := func(slaveID, port int) *Registry {
		o := testOptions(t, root)
		o.Slave, o.SlaveID, o.Port = slaveID >= 0, slaveID, port
		r := newRegistry(t, o)
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
			t.Fatal(err)
		}
		return r
	}
	bj, hf := reg(-1, 8123), reg(1, 8124)
	reg(2, 8125) // gz, a slave site that stays one
	pub := root + "/brokers/topics-pub/orders"
	children := func() ([]string, int32) {
		t.Helper()
		kids, err := bj.Children(ctx, pub)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := bj.Get(ctx, pub)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(kids)
		return kids, st.Cversion
	}
	all := []string{"0-m", "0-s1", "0-s2"}
	switchover := func(from, to *Registry, name string) {
		t.Helper()
		kids, before := children()
		if !slices.Equal(kids, all) {
			t.Fatalf("topics-pub/orders = %v before the switchover to %s, want %v", kids, name, all)
		}
		if taken, err := to.TakeMasterNode(ctx, from.SessionID()); err != nil || !taken {
			t.Fatalf("TakeMasterNode = %v %v", taken, err)
		}
		if err := to.BecomeMaster(ctx); err != nil {
			t.Fatal(err)
		}
		if err := from.BecomeSlave(ctx, 1); err != nil {
			t.Fatal(err)
		}
		kids, after := children()
		if !slices.Equal(kids, all) {
			t.Errorf("topics-pub/orders = %v after the switchover to %s, want %v", kids, name, all)
		}
		if after-before != 2 {
			t.Errorf("switchover to %s: topics-pub/orders children changed %d times (cversion %d -> %d), want 2: one delete and one create, in one step", name, after-before, before, after)
		}
		if ok, err := to.Owns(ctx, pub+"/0-m"); err != nil || !ok {
			t.Errorf("switchover to %s: topics-pub/orders/0-m is not the new master's: %v %v", name, ok, err)
		}
		// The old master is slave 1 in the trees consumers read.
		for _, tree := range []string{"topics-sub", "topics"} {
			if ok, err := from.Owns(ctx, root+"/brokers/"+tree+"/orders/0-s1"); err != nil || !ok {
				t.Errorf("switchover to %s: %s/orders/0-s1 is not the old master's: %v %v", name, tree, ok, err)
			}
		}
	}
	switchover(bj, hf, "hf")
	switchover(hf, bj, "bj")
	// Back where it started: hf's slave entry is its own again.
	if ok, err := hf.Owns(ctx, pub+"/0-s1"); err != nil || !ok {
		t.Errorf("topics-pub/orders/0-s1 is not hf's after switching back: %v %v", ok, err)
	}

	// A topic removed at a master that kept its slave entry loses that
	// one too.
	switchover(bj, hf, "hf")
	if err := hf.UnregisterTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := bj.UnregisterTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if kids, _ := children(); !slices.Equal(kids, []string{"0-s2"}) {
		t.Errorf("topics-pub/orders = %v after the topic was removed at hf and bj, want gz's 0-s2 only", kids)
	}
}

// TestSwitchoverSlaveEntryBecomesOwn: after a switchover the old master's
// slave entry under topics-pub is the node the new master left for it
// (replacing it then would change the topic's children a second time).
// When the new master's session ends, the old master writes its own entry
// at once; before the fix it was gone until the old master's next session.
func TestSwitchoverSlaveEntryBecomesOwn(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	reg := func(slaveID, port int) *Registry {
		o := testOptions(t, root)
		o.Slave, o.SlaveID, o.Port = slaveID >= 0, slaveID, port
		r := newRegistry(t, o)
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
			t.Fatal(err)
		}
		return r
	}
	bj, hf := reg(-1, 8123), reg(1, 8124)
	if taken, err := hf.TakeMasterNode(ctx, bj.SessionID()); err != nil || !taken {
		t.Fatalf("TakeMasterNode = %v %v", taken, err)
	}
	if err := hf.BecomeMaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bj.BecomeSlave(ctx, 1); err != nil {
		t.Fatal(err)
	}
	entry := root + "/brokers/topics-pub/orders/0-s1"
	if ok, err := hf.Owns(ctx, entry); err != nil || !ok {
		t.Fatalf("%s right after the switchover is not the new master's node: %v %v (the case this test is about)", entry, ok, err)
	}
	hf.Close() // its session ends: its nodes go
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if ok, err := bj.Owns(ctx, entry); err != nil || !ok {
			return fmt.Errorf("%s is not bj's: %v %v", entry, ok, err)
		}
		return nil
	})
	data, _, err := bj.Get(ctx, entry)
	if err != nil || string(data) != TopicJSON(2, "0-s1") {
		t.Fatalf("%s = %q %v, want %q", entry, data, err, TopicJSON(2, "0-s1"))
	}
}
