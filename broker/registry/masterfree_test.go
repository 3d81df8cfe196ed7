package registry

import (
	"context"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
)

// TestBecomeMasterWaitsBeforeItChangesANode: a slave promoted while the lost
// master's session still holds its nodes (the master crashed; its session
// has not expired yet) leaves every node of its own as it is until the
// master node is free, then registers as master.
func TestBecomeMasterWaitsBeforeItChangesANode(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()

	tap := &zktest.Tap{}
	mo := testOptions(t, root)
	mo.SessionTimeout = 2 * time.Second
	mo.Dialer = tap.Dial
	master := newRegistry(t, mo)
	so := testOptions(t, root)
	so.Slave, so.SlaveID = true, 1
	so.Host = "127.0.0.2"
	slave := newRegistry(t, so)
	for _, r := range []*Registry{master, slave} {
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
			t.Fatal(err)
		}
	}
	slaveNodes := []string{root + "/brokers/ids/0/slave1", root + "/brokers/topics/orders/0-s1"}

	tap.Block() // the master crashes: its session expires after 2 s
	done := make(chan error, 1)
	go func() { done <- slave.BecomeMaster(ctx) }()
	crashed := time.Now()
	for time.Since(crashed) < time.Second {
		for _, p := range slaveNodes {
			if ok, _, err := slave.Exists(ctx, p); err != nil || !ok {
				t.Fatalf("%s gone %v after the crash, while the master's session lives (%v)", p, time.Since(crashed), err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("BecomeMaster still waits 30 s after the crash")
	}
	_, st, err := slave.Get(ctx, root+"/brokers/ids/0/master")
	if err != nil || st.EphemeralOwner != slave.SessionID() {
		t.Fatalf("master node owner 0x%x, want 0x%x (%v)", st.EphemeralOwner, slave.SessionID(), err)
	}
	for _, p := range slaveNodes {
		if ok, _, _ := slave.Exists(ctx, p); ok {
			t.Fatalf("%s still there after the promotion", p)
		}
	}
}
