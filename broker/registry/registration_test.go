package registry

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestRegistrationDuringAStalledWrite: a registration write that waits
// (here in MasterGuard, which the bundle answers by reading ZooKeeper
// ensembles; in a soak, a write to an ensemble that did not answer) holds
// the registration lock for as long as its context allows. Registration and
// Registered, which status and the master's mirror call, answer meanwhile
// with the registration the last finished write left.
func TestRegistrationDuringAStalledWrite(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	var stall atomic.Bool
	release := make(chan struct{})
	o := testOptions(t, root)
	o.SlaveID = -1
	o.MasterGuard = func(context.Context) error {
		if stall.Load() {
			<-release
		}
		return nil
	}
	r := newRegistry(t, o)
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	reasserted := make(chan error, 1)
	go func() { reasserted <- r.Reassert(ctx) }()
	defer func() {
		close(release)
		if err := <-reasserted; err != nil {
			t.Errorf("Reassert after the stall: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // let Reassert take the lock and stall

	answered := make(chan struct{})
	var g Registration
	var broker bool
	var topics []string
	go func() {
		g = r.Registration()
		broker, topics = r.Registered()
		close(answered)
	}()
	select {
	case <-answered:
	case <-time.After(20 * time.Second): // liveness, not speed: before, they waited for the write
		t.Fatal("Registration and Registered waited for a stalled registration write")
	}
	if !g.Master() || g.Topics["orders"].NumPartitions != 2 {
		t.Fatalf("Registration during the stall = %+v, want the master of orders (2 partitions)", g)
	}
	if !broker || !slices.Equal(topics, []string{"orders"}) {
		t.Fatalf("Registered during the stall = %v %v, want true [orders]", broker, topics)
	}
}
