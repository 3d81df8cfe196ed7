package registry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestBecomeMasterRetryWritesWhatFailed: a promotion whose registration as
// master failed half way (its write met "zk: connection closed" after the
// registry had taken the master's role) is retried by the promotion's
// finisher. Before the fix the retry found the registry a master already
// and returned at once: the topics' master entries were never written,
// and once the old master's went, producers found no partition for good.
// The retry writes the whole registration again, and so does a
// BecomeMasterFrom retry.
func TestBecomeMasterRetryWritesWhatFailed(t *testing.T) {
	for _, from := range []bool{false, true} {
		name := "BecomeMaster"
		if from {
			name = "BecomeMasterFrom"
		}
		t.Run(name, func(t *testing.T) {
			root := testRoot(t)
			cleanupRoot(t, root)
			ctx := context.Background()
			var fail atomic.Bool
			o := testOptions(t, root)
			o.Slave, o.SlaveID = true, 1
			o.MasterGuard = func(context.Context) error {
				if fail.Load() {
					return errors.New("zk: connection closed")
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
			become := r.BecomeMaster
			if from {
				become = func(ctx context.Context) error { return r.BecomeMasterFrom(ctx, 0) }
			}
			fail.Store(true)
			if err := become(ctx); err == nil {
				t.Fatal("the first registration as master succeeded although its writes failed")
			}
			fail.Store(false)
			if err := become(ctx); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			for _, p := range []string{r.Paths().Broker(0, -1), root + "/brokers/topics-pub/orders/0-m", root + "/brokers/topics/orders/0-m"} {
				if ok, err := r.Owns(ctx, p); err != nil || !ok {
					t.Errorf("%s after the retried registration as master: owned %v (%v)", p, ok, err)
				}
			}
		})
	}
}

// TestUnlistedNamesAMissingEntry: Unlisted names a topics-pub entry of this
// registry's that is gone or another session's, and nothing otherwise.
func TestUnlistedNamesAMissingEntry(t *testing.T) {
	root := testRoot(t)
	ctx := context.Background()
	r := masterWithTopics(t, root, "orders")
	if p, err := r.Unlisted(ctx); err != nil || p != "" {
		t.Fatalf("Unlisted = %q, %v with every entry written", p, err)
	}
	pub := root + "/brokers/topics-pub/orders/0-m"
	other := newRegistry(t, testOptions(t, root))
	if err := other.Delete(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Unlisted(ctx); err != nil || p != pub {
		t.Fatalf("Unlisted = %q, %v after %s was deleted", p, err, pub)
	}
	if err := r.Reassert(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Unlisted(ctx); err != nil || p != "" {
		t.Fatalf("Unlisted = %q, %v after Reassert", p, err)
	}
}

// TestUnlistedWFiresWhenAnEntryGoes: UnlistedW's watch fires when another
// session deletes one of the registry's topics-pub entries.
func TestUnlistedWFiresWhenAnEntryGoes(t *testing.T) {
	root := testRoot(t)
	ctx := context.Background()
	r := masterWithTopics(t, root, "orders", "audit")
	p, w, err := r.UnlistedW(ctx)
	if err != nil || p != "" {
		t.Fatalf("UnlistedW = %q, %v with every entry written", p, err)
	}
	select {
	case <-w:
		t.Fatal("the watch fired with nothing changed")
	default:
	}
	pub := root + "/brokers/topics-pub/audit/0-m"
	other := newRegistry(t, testOptions(t, root))
	if err := other.Delete(ctx, pub); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w:
	case <-time.After(30 * time.Second):
		t.Fatalf("the watch did not fire after %s was deleted", pub)
	}
	if p, _, err := r.UnlistedW(ctx); err != nil || p != pub {
		t.Fatalf("UnlistedW = %q, %v after %s was deleted", p, err, pub)
	}
}

// masterWithTopics registers a master (slaveId -1) under a clean root with
// the topics, two partitions each, published.
func masterWithTopics(t *testing.T, root string, topics ...string) *Registry {
	t.Helper()
	cleanupRoot(t, root)
	o := testOptions(t, root)
	o.SlaveID = -1
	r := newRegistry(t, o)
	ctx := context.Background()
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if err := r.RegisterTopic(ctx, topic, 2, true, true); err != nil {
			t.Fatal(err)
		}
	}
	return r
}
