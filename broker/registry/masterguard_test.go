package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestMasterGuardWritesNothing: a master whose MasterGuard says another
// master took over writes neither its master node nor its topics' master
// entries (at registration, at a new topic, at Reassert), and does so once
// the guard lets it; a slave is never asked.
func TestMasterGuardWritesNothing(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	var superseded atomic.Bool
	superseded.Store(true)
	asked := atomic.Int32{}
	o := testOptions(t, root)
	o.SlaveID = -1
	o.MasterGuard = func(context.Context) error {
		asked.Add(1)
		if superseded.Load() {
			return fmt.Errorf("%w: generation 2 in ZooKeeper, this master 1", ErrNotCurrentMaster)
		}
		return nil
	}
	r := newRegistry(t, o)
	if err := r.RegisterBroker(ctx); !errors.Is(err, ErrNotCurrentMaster) {
		t.Fatalf("RegisterBroker = %v, want ErrNotCurrentMaster", err)
	}
	if err := r.RegisterTopic(ctx, "orders", 2, true, true); !errors.Is(err, ErrNotCurrentMaster) {
		t.Fatalf("RegisterTopic = %v, want ErrNotCurrentMaster", err)
	}
	if err := r.Reassert(ctx); !errors.Is(err, ErrNotCurrentMaster) {
		t.Fatalf("Reassert = %v, want ErrNotCurrentMaster", err)
	}
	for _, p := range []string{r.Paths().Broker(0, -1), root + "/brokers/topics-pub/orders/0-m"} {
		if ok, _, err := r.Exists(ctx, p); err != nil || ok {
			t.Fatalf("%s written by a superseded master (%v)", p, err)
		}
	}
	superseded.Store(false)
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Reassert(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Owns(ctx, root+"/brokers/topics-pub/orders/0-m"); err != nil || !ok {
		t.Fatalf("the topic's master entry after the guard let it: %v %v", ok, err)
	}
	if ok, err := r.Owns(ctx, r.Paths().Broker(0, -1)); err != nil || !ok {
		t.Fatalf("master node after the guard let it: %v %v", ok, err)
	}

	s := testOptions(t, root)
	s.Slave, s.SlaveID = true, 1
	s.MasterGuard = func(context.Context) error { t.Error("a slave asked the master guard"); return nil }
	sl := newRegistry(t, s)
	if err := sl.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if asked.Load() == 0 {
		t.Fatal("the guard was never asked")
	}
}
