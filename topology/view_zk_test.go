package topology_test

// This external test wires topology to the registry's SiteView the way cmd
// does, against real gossip and a real ZooKeeper. It lives in package
// topology_test because topology itself imports nothing from broker except
// the client's Router types.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/testutil"
	"metaq/topology"
)

type lagBox struct {
	mu sync.Mutex
	g  []georeplicator.GroupLag
}

func (l *lagBox) Lag() []georeplicator.GroupLag {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]georeplicator.GroupLag(nil), l.g...)
}

func (l *lagBox) set(behind time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.g = []georeplicator.GroupLag{{Group: "g-hf", SlaveID: 0, Connected: true,
		Partitions: []georeplicator.PartitionLag{{Topic: "t", Partition: 0, Behind: behind}}}}
}

func gossipNode(t *testing.T, o topology.Options) *topology.Topology {
	t.Helper()
	o.Key, o.Label, o.Timing = []byte("0123456789abcdef"), "metaq-test", topology.FastTiming()
	o.RefreshInterval = 50 * time.Millisecond
	if o.Bind == "" {
		o.Bind = "127.0.0.1:0"
	}
	tp, err := topology.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

func TestJavaViewFlipsWithSiteHealth(t *testing.T) {
	zkAddr := testutil.ZooKeeper(t)
	b := make([]byte, 6)
	rand.Read(b)
	root := "/metaq-test-" + hex.EncodeToString(b)
	viewRoot := root + "-view-hf"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	newReg := func(o registry.Options) *registry.Registry {
		o.Connect, o.Root, o.SessionTimeout, o.ConnectionTimeout, o.SyncTime = zkAddr, root, 4*time.Second, 10*time.Second, 10*time.Millisecond
		o.Host = "127.0.0.1"
		r, err := registry.New(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	tool := newReg(registry.Options{})
	t.Cleanup(func() {
		tool.DeleteTree(context.Background(), root)
		tool.DeleteTree(context.Background(), viewRoot)
	})
	// The real root: broker 1's master in bj and its slave in hf.
	for _, o := range []registry.Options{{BrokerID: 1, Port: 18123}, {BrokerID: 1, Slave: true, SlaveID: 0, Port: 28123}} {
		r := newReg(o)
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "t", 2, true, true); err != nil {
			t.Fatal(err)
		}
	}

	lag := &lagBox{}
	lag.set(0)
	bj := gossipNode(t, topology.Options{Site: "bj", Role: topology.RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123", Lag: lag, LaggingAfter: time.Second})
	hfOpts := topology.Options{Site: "hf", Role: topology.RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123", Join: []string{bj.Addr()}}
	hf := gossipNode(t, hfOpts)

	// bj keeps hf's view (hf's own bundle would be the keeper while it is
	// up; here bj writes throughout, as it must while hf is down).
	sv, err := registry.NewSiteView(tool, registry.SiteViewOptions{ViewRoot: viewRoot})
	if err != nil {
		t.Fatal(err)
	}
	w := topology.ViewWriterFunc(func(ctx context.Context, targets map[int]string) error {
		// Let an Apply in flight finish when the test ends: the registry's
		// calls must not be abandoned mid-way (see the report on
		// Registry.call and cancelled contexts).
		_, err := sv.Apply(context.WithoutCancel(ctx), targets)
		return err
	})
	done := make(chan error, 1)
	go func() {
		done <- bj.RunView(ctx, w, topology.ViewOptions{Site: "hf", Resync: 100 * time.Millisecond, Always: true})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunView: %v", err)
		}
	}()

	masterOf := func(want string) func() error {
		return func() error {
			got, _, err := tool.Get(ctx, viewRoot+"/brokers/ids/1/master")
			if err != nil {
				return err
			}
			if string(got) != want {
				return fmt.Errorf("view ids/1/master = %s, want %s", got, want)
			}
			return nil
		}
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, masterOf("meta://127.0.0.1:28123"))
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		js, _, err := tool.Get(ctx, viewRoot+"/brokers/topics-sub/t/1-m")
		if err != nil || string(js) != `{"numParts":2,"broker":"1-m"}` {
			return fmt.Errorf("view topics-sub/t/1-m = %s %v", js, err)
		}
		return nil
	})

	// hf's bundle goes away: the view points at the real master.
	hf.Close()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, masterOf("meta://127.0.0.1:18123"))

	// It returns: back to hf.
	hfOpts.Bind = ""
	hf = gossipNode(t, hfOpts)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, masterOf("meta://127.0.0.1:28123"))

	// hf falls behind more than LaggingAfter: master; catches up: hf.
	lag.set(3 * time.Second)
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, masterOf("meta://127.0.0.1:18123"))
	lag.set(0)
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, masterOf("meta://127.0.0.1:28123"))

	// Keeper: hf's own bundle keeps its view while alive.
	if !hf.IsViewKeeper("hf") || bj.IsViewKeeper("hf") {
		t.Fatalf("keeper of hf: hf=%v bj=%v", hf.IsViewKeeper("hf"), bj.IsViewKeeper("hf"))
	}
}
