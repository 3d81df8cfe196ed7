package registry

import (
	"context"
	"slices"
	"testing"
)

// TestSwitchoverChangesTopicsPubOnce replays a switchover's registry
// writes (the slave that takes over removes the old master's node and
// becomes master, the old master becomes the slave it leaves) and checks
// that the children of topics-pub/<topic> change in one step: the new
// master's <id>-m replacing the old master's, one delete and one create
// in one transaction. MetaQ 1.4.6's Java producer closes its connection to
// every master it knows on each change of those children (whatever the
// child), failing the put in flight there; a slave's <id>-s<n> entry,
// which it ignores otherwise, made two more changes (the new master's
// removed, the old master's added), each dropping the producers'
// connection to the new master.
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
	kids, before := children()
	if !slices.Equal(kids, []string{"0-m"}) {
		t.Errorf("topics-pub/orders = %v before the switchover, want only the master's 0-m (slaves write none there)", kids)
	}
	for _, tree := range []string{"topics-sub", "topics"} {
		for _, s := range []string{"0-s1", "0-s2"} {
			if ok, _, err := bj.Exists(ctx, root+"/brokers/"+tree+"/orders/"+s); err != nil || !ok {
				t.Errorf("%s/orders/%s: exists %v %v, want the slave's entry", tree, s, ok, err)
			}
		}
	}

	// hf takes over: the old master's node goes, hf registers as master;
	// then bj becomes slave 1.
	if taken, err := hf.TakeMasterNode(ctx, bj.SessionID()); err != nil || !taken {
		t.Fatalf("TakeMasterNode = %v %v", taken, err)
	}
	if err := hf.BecomeMaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bj.BecomeSlave(ctx, 1); err != nil {
		t.Fatal(err)
	}

	kids, after := children()
	if !slices.Equal(kids, []string{"0-m"}) {
		t.Errorf("topics-pub/orders = %v after the switchover, want only 0-m", kids)
	}
	if ok, err := hf.Owns(ctx, pub+"/0-m"); err != nil || !ok {
		t.Errorf("topics-pub/orders/0-m is not the new master's: %v %v", ok, err)
	}
	if after-before != 2 {
		t.Errorf("topics-pub/orders children changed %d times (cversion %d -> %d), want 2: one delete and one create, in one step", after-before, before, after)
	}
	if ok, _, err := bj.Exists(ctx, root+"/brokers/topics-sub/orders/0-s1"); err != nil || !ok {
		t.Errorf("topics-sub/orders/0-s1 (the old master as slave 1): exists %v %v", ok, err)
	}
}
