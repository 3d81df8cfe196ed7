package topology_test

// End to end with asynchronous geo-replication: bj's master ships its log to
// hf's slave with the georeplicator; the master's lag figures (the
// Shipper's) are gossiped, must match a backlog of known size, and drive
// where a pinned consumer in hf reads.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/testutil"
	"metaq/topology"
)

// shipperLag is the shipper sh returns (nil before it starts) as a
// LagSource.
func shipperLag(sh func() *georeplicator.Shipper) topology.LagSource {
	return topology.LagFunc(func() []georeplicator.GroupLag {
		if s := sh(); s != nil {
			return s.Lag()
		}
		return nil
	})
}

func TestE2EGeoReplicatedLagAndRouting(t *testing.T) {
	zkAddr, root := e2eRoot(t, "geo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	replAddr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	var mu sync.Mutex
	var shipper *georeplicator.Shipper
	var receiver *georeplicator.Receiver
	bj := newSite(t, 1, zkAddr, root, true)
	bj.attach = func(st *store.Store) func() {
		s, err := georeplicator.NewShipper(georeplicator.ShipperOptions{Listen: replAddr, BrokerID: 1, Source: st,
			StuckAfter: 3 * time.Second, Keepalive: 200 * time.Millisecond, DefaultMaxDelay: 50 * time.Millisecond,
			CongestionControl: "system"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		shipper = s
		mu.Unlock()
		return func() { s.Close() }
	}
	hf := newSite(t, 1, zkAddr, root, false) // an async slave outside ZooKeeper, reached through gossip
	startReceiver := func(st *store.Store) *georeplicator.Receiver {
		r, err := georeplicator.NewReceiver(georeplicator.ReceiverOptions{Sink: st, Resolver: georeplicator.StaticResolver(replAddr),
			BrokerID: 1, SlaveID: 0, Group: "g-hf", MaxDelay: 50 * time.Millisecond,
			CheckpointFile: filepath.Join(hf.dir, "repl.ckpt"), BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var hfStore *store.Store
	hf.attach = func(st *store.Store) func() {
		r := startReceiver(st)
		mu.Lock()
		receiver, hfStore = r, st
		mu.Unlock()
		return func() {
			mu.Lock()
			cur := receiver
			receiver = nil
			mu.Unlock()
			if cur != nil {
				cur.Close()
			}
		}
	}
	sh := newSite(t, 2, zkAddr, root, true)
	bj.start(t)
	hf.start(t)
	sh.start(t)
	defer sh.stop()
	defer hf.stop()
	defer bj.stop()

	gBJ := startGossip(t, ctx, topology.Options{Site: "bj", Role: topology.RoleMaster, BrokerID: 1, ServeURL: "meta://" + bj.addr(), ReplAddr: replAddr,
		Lag: shipperLag(func() *georeplicator.Shipper { mu.Lock(); defer mu.Unlock(); return shipper }), LaggingAfter: time.Second})
	gSH := startGossip(t, ctx, topology.Options{Site: "sh", Role: topology.RoleMaster, BrokerID: 2, ServeURL: "meta://" + sh.addr(), Join: []string{gBJ.Addr()}})
	hfHealth := topology.HealthFunc(func() topology.Health {
		mu.Lock()
		defer mu.Unlock()
		return topology.Health{StorageOK: hfStore != nil && hfStore.Health() == nil, ReplicationOK: receiver != nil && receiver.Status().Connected}
	})
	hfOpts := topology.Options{Site: "hf", Role: topology.RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://" + hf.addr(),
		Join: []string{gBJ.Addr()}, Health: hfHealth}
	gHF := startGossip(t, ctx, hfOpts)
	hfOpts.Bind = gHF.Addr()

	report := func(tp *topology.Topology) (topology.Report, bool) {
		for _, r := range tp.Reports() {
			if r.SlaveGroup == "g-hf" {
				return r, true
			}
		}
		return topology.Report{}, false
	}

	prod := zkProducer(t, ctx, zkAddr, root)
	sent := map[string]bool{}
	var b1Bytes, b1Msgs int64
	produce := func(prefix string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			body := fmt.Sprintf("%s-%05d", prefix, i)
			r, err := prod.Send(ctx, &client.Message{Topic: "t", Payload: []byte(body)})
			if err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			sent[body] = true
			if r.Partition.BrokerID == 1 {
				b1Bytes += int64(20 + len(body)) // MetaQ record: 20-byte header + body (see Records in broker/wire/doc.go)
				b1Msgs++
			}
		}
	}

	// Caught up: the master has made durable and shipped every record it
	// acknowledged and has the slave's acks for all of them, and the group is
	// ok with no backlog as seen from sh. The gossiped report alone is not
	// enough: it can be a moment old and say 0 while the last records are
	// still on their way, and those would then count in the backlog below.
	produce("a", 300)
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if err := shippedAll(bj, func() *georeplicator.Shipper { mu.Lock(); defer mu.Unlock(); return shipper }, "g-hf"); err != nil {
			return err
		}
		r, ok := report(gSH)
		if !ok || r.State != topology.LagOK || r.Bytes != 0 || r.Messages != 0 || r.Site != "hf" {
			return fmt.Errorf("g-hf at sh: %+v (found %v)", r, ok)
		}
		return nil
	})

	// A known backlog: hf's replication stops, brokerId 1 gets exactly
	// b1Msgs records of b1Bytes; the master's figures, gossiped, match them.
	hf.mu.Lock()
	receiver.Close()
	hf.mu.Unlock()
	mu.Lock()
	receiver = nil
	mu.Unlock()
	b1Bytes, b1Msgs = 0, 0
	produce("b", 120)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		r, ok := report(gSH)
		if !ok || r.Bytes != b1Bytes || r.Messages != b1Msgs || r.State != topology.LagDown {
			return fmt.Errorf("g-hf at sh: %+v, want %d bytes %d messages down", r, b1Bytes, b1Msgs)
		}
		return nil
	})
	t.Logf("backlog while hf's link is down: %d bytes, %d messages (gossiped figures match)", b1Bytes, b1Msgs)

	// A consumer in hf pinned to its replica with a 1s lag limit: hf is not
	// usable (link down), so it reads from the master.
	router := &answers{r: topology.NewRouter(gSH)}
	var cmu sync.Mutex
	got := map[string]int{}
	cons := pinnedConsumer(t, ctx, zkAddr, root, "geo-pinned", router, 100*time.Millisecond)
	cons.Subscribe("t", func(ctx context.Context, m *client.Message) error {
		cmu.Lock()
		got[string(m.Payload)]++
		cmu.Unlock()
		return nil
	})
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	routedTo := func(want string) func() error {
		return func() error {
			if last, seq := router.last(); last != want {
				return fmt.Errorf("routed to %q (answers %v), want %s", last, seq, want)
			}
			return nil
		}
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, routedTo(bj.addr()))

	// Replication resumes from hf's checkpoint and catches up: the consumer
	// moves to hf.
	mu.Lock()
	receiver = startReceiver(hfStore)
	mu.Unlock()
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		r, ok := report(gSH)
		if !ok || r.State != topology.LagOK || r.Bytes != 0 {
			return fmt.Errorf("g-hf at sh: %+v", r)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, routedTo(hf.addr()))

	// hf's whole site dies: back to the master within the detection time.
	died := time.Now()
	hf.stop()
	gHF.Crash()
	testutil.Eventually(t, gSH.DetectionTime()+2*time.Second, 10*time.Millisecond, routedTo(bj.addr()))
	t.Logf("routed to the master %v after hf died", time.Since(died))
	produce("c", 100)

	// hf returns with its data and checkpoint, catches up, and the consumer
	// returns to it.
	hf.start(t)
	startGossip(t, ctx, hfOpts)
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, routedTo(hf.addr()))
	produce("d", 100)

	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		cmu.Lock()
		defer cmu.Unlock()
		for body := range sent {
			if got[body] == 0 {
				return fmt.Errorf("%s not consumed yet (%d of %d)", body, len(got), len(sent))
			}
		}
		return nil
	})
	cmu.Lock()
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	cmu.Unlock()
	if dups > 40 {
		t.Errorf("%d duplicates", dups)
	}
	_, seq := router.last()
	t.Logf("consumed all %d messages, %d duplicates; router answers for broker 1: %v", len(sent), dups, seq)
}

// shippedAll reports whether the master's shipper has the slave group's acks
// for everything written to the site's store: every partition's written end
// is durable and is the group's applied end.
func shippedAll(s *site, shipper func() *georeplicator.Shipper, group string) error {
	s.mu.Lock()
	st := s.store
	s.mu.Unlock()
	sh := shipper()
	if st == nil || sh == nil {
		return fmt.Errorf("master not running")
	}
	var lag *georeplicator.GroupLag
	for _, g := range sh.Lag() {
		if g.Group == group {
			lag = &g
		}
	}
	if lag == nil {
		return fmt.Errorf("no lag figures for %s yet", group)
	}
	slaveEnd := map[string]int64{}
	for _, p := range lag.Partitions {
		slaveEnd[p.Topic+"-"+strconv.Itoa(p.Partition)] = p.SlaveEnd
	}
	for _, p := range st.Partitions() {
		key := p.Topic + "-" + strconv.Itoa(p.Partition)
		if p.Durable != p.Written {
			return fmt.Errorf("%s: written to %d, durable to %d", key, p.Written, p.Durable)
		}
		if end, ok := slaveEnd[key]; p.Written > p.Min && (!ok || end != p.Written) {
			return fmt.Errorf("%s: master at %d, %s applied to %d (known %v)", key, p.Written, group, end, ok)
		}
	}
	return nil
}
