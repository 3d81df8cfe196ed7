package client

import (
	"context"
	"fmt"
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
		ZKSyncTime: 200 * time.Millisecond, RequestTimeout: 2 * time.Second, Logger: testLogger(t)})
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
