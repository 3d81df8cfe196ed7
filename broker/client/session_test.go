package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// TestConsumerSessionExpiry cuts the consumer off ZooKeeper until its
// session expires, then checks that it registers again, owns its partitions
// again and keeps consuming.
func TestConsumerSessionExpiry(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"exp": 2})
	admin := newTestClient(t, zk, root)
	px, err := netproxy.New(zk)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := New(cctx, Config{ZKServers: []string{px.Addr()}, ZKRoot: root, ZKSessionTimeout: 4 * time.Second,
		ZKSyncTime: 200 * time.Millisecond, RequestTimeout: 2 * time.Second, Logger: testutil.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rcv := newReceived()
	cs, _ := NewConsumer(c, "eg", WithConsumerID("x"), WithMaxFetchDelay(50*time.Millisecond), WithCommitInterval(100*time.Millisecond))
	cs.Subscribe("exp", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	ownedByX := func() error {
		o := owners(t, admin, "eg", "exp")
		if o["0-0"] != "eg_x" || o["0-1"] != "eg_x" {
			return fmt.Errorf("owners %v", o)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, ownedByX)

	// Cut ZooKeeper off until the server expires the session.
	px.SetRefuse(true)
	px.CutAll()
	testutil.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		if kids, _ := admin.zk.children(ctx, root+"/consumers/eg/ids"); len(kids) != 0 {
			return fmt.Errorf("ids still %v", kids)
		}
		return nil
	})
	px.SetRefuse(false)
	testutil.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		kids, _ := admin.zk.children(ctx, root+"/consumers/eg/ids")
		if len(kids) != 1 || kids[0] != "eg_x" {
			return fmt.Errorf("ids %v", kids)
		}
		return ownedByX()
	})
	prod, _ := NewProducer(admin)
	defer prod.Close(ctx)
	r, err := prod.Send(ctx, &Message{Topic: "exp", Payload: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv.has([]int64{r.ID}) })
}

// TestReadsFromSlaveWhileMasterAbsent checks the default choice without a
// Router (Cluster.getBrokerRandom): the master while it is registered, a
// slave of the same broker id once the master is gone.
func TestReadsFromSlaveWhileMasterAbsent(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	master := newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"fo": 1})
	slave := newTestBroker(t, 0, "", "", 1<<20, map[string]int{"fo": 1})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	send := func(addr, payload string) SendResult {
		sc, err := New(ctx, Config{Brokers: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		p, _ := NewProducer(sc)
		defer p.Close(ctx)
		r, err := p.Send(ctx, &Message{Topic: "fo", Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Same record sizes on both, different payloads, so the reader shows
	// where it read from; a real slave holds byte-identical records.
	m1 := send(master.addr, "master-1")
	send(slave.addr, "slave--1")
	s2 := send(slave.addr, "slave--2")
	// Register the slave as an async slave would (see ZooKeeper layout in broker/wire/doc.go).
	if err := c.zk.createEphemeral(ctx, root+"/brokers/ids/0/slave0", []byte("meta://"+slave.addr)); err != nil {
		t.Fatal(err)
	}
	if err := c.zk.createEphemeral(ctx, root+"/brokers/topics-sub/fo/0-s0", []byte(`{"numParts":1,"broker":"0-s0"}`)); err != nil {
		t.Fatal(err)
	}
	rcv := newReceived()
	cs, _ := NewConsumer(c, "fog", WithMaxFetchDelay(50*time.Millisecond))
	cs.Subscribe("fo", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv.has([]int64{m1.ID}) })
	master.Stop()
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error { return rcv.has([]int64{s2.ID}) })
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, m := range rcv.msgs {
		if string(m.Payload) == "slave--1" {
			t.Fatal("read the slave while the master was up")
		}
	}
}

// TestGroupChurn starts four members at once and stops two at once while
// messages flow; the owners must settle on exactly what Assign gives each
// member, and nothing sent may be missed.
func TestGroupChurn(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"churn": 4})
	newTestBroker(t, 1, zk, root, 1<<20, map[string]int{"churn": 3})
	admin := newTestClient(t, zk, root)
	ctx := context.Background()
	prod, _ := NewProducer(admin)
	defer prod.Close(ctx)
	var mu sync.Mutex
	var sent []int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if r, err := prod.Send(ctx, &Message{Topic: "churn", Payload: []byte(fmt.Sprint(i))}); err == nil {
				mu.Lock()
				sent = append(sent, r.ID)
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	rcv := newReceived()
	names := []string{"m1", "m2", "m3", "m4"}
	members := map[string]*Consumer{}
	var wg sync.WaitGroup
	for _, n := range names {
		c := newTestClient(t, zk, root)
		cs, _ := NewConsumer(c, "cg", WithConsumerID(n), WithStrategy(StrategyConsist),
			WithMaxFetchDelay(50*time.Millisecond), WithCommitInterval(100*time.Millisecond))
		cs.Subscribe("churn", rcv.handler)
		members[n] = cs
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cs.Start(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	all := []string{"0-0", "0-1", "0-2", "0-3", "1-0", "1-1", "1-2"}
	settled := func(live []string) func() error {
		return func() error {
			o := owners(t, admin, "cg", "churn")
			var ids []string
			for _, n := range live {
				ids = append(ids, "cg_"+n)
			}
			want := map[string]string{}
			for _, id := range ids {
				for _, p := range Assign(StrategyConsist, id, ids, all) {
					want[p] = id
				}
			}
			if len(o) != len(want) {
				return fmt.Errorf("owners %v, want %v", o, want)
			}
			for p, id := range want {
				if o[p] != id {
					return fmt.Errorf("owners %v, want %v", o, want)
				}
			}
			return nil
		}
	}
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, settled(names))
	for _, n := range []string{"m2", "m3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[n].Close(ctx)
		}()
	}
	wg.Wait()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, settled([]string{"m1", "m4"}))
	time.Sleep(100 * time.Millisecond)
	close(stop)
	<-done
	mu.Lock()
	ids := append([]int64(nil), sent...)
	mu.Unlock()
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error { return rcv.has(ids) })
	members["m1"].Close(ctx)
	members["m4"].Close(ctx)
}
