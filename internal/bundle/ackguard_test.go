package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/client"
	"metaq/broker/registry/zktest"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestMasterThatCannotConfirmItsGenerationAcknowledgesNothing: bj, the
// master (no fenceSites lease: the recommended deployment's default), loses
// its ZooKeeper while a producer writes to it, as a paused or cut-off
// master does; hf is promoted meanwhile. From the moment bj's last
// confirmation of its generation is older than the bound, it acknowledges
// no put (503, retriable), and none after hf's promotion.
func TestMasterThatCannotConfirmItsGenerationAcknowledgesNothing(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "", noConfigSync)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	loop := startPutLoop(t, bj.Broker.Addr().String(), "orders")
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if loop.count() == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	tap.Block()
	bound := ackBound(5 * time.Second)
	time.Sleep(bound + 500*time.Millisecond)
	ackedAtBound := loop.count()
	r := bj.Broker.WriteRefusal()
	if r == nil || !r.Retry || !strings.Contains(r.Reason, "could not confirm its generation") {
		t.Fatalf("bj's refusal %v after %v without ZooKeeper, want a retriable one naming the generation", r, bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := hf.Promote(ctx, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	loop.halt()
	if n := loop.count() - ackedAtBound; n > 1 {
		t.Fatalf("bj acknowledged %d puts after it could not confirm its generation for %v (a put in flight may finish: at most 1)", n, bound)
	}
	t.Logf("bj acknowledged %d puts before it lost ZooKeeper, none after the bound of %v", ackedAtBound, bound)

	// bj reaches ZooKeeper again: it reads the newer generation, registers
	// nothing as master and becomes hf's slave promptly.
	tap.Unblock()
	start := time.Now()
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Role(); r.Role != siterole.Slave {
			return fmt.Errorf("bj is %v", r)
		}
		return nil
	})
	t.Logf("bj became hf's slave %v after it reached ZooKeeper again", time.Since(start))
	wantFollowsByteIdentical(t, hf, bj, "orders")
}

// TestStandaloneMasterKeepsServingWithoutZooKeeper: a master no slave site
// ever followed (a plain MetaQ broker with ZooKeeper) could not have been
// replaced: it keeps taking puts while its ZooKeeper is away, as MetaQ's
// broker does.
func TestStandaloneMasterKeepsServingWithoutZooKeeper(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "", noConfigSync)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	produce(t, bj.Broker.Addr().String(), "orders", 5, "before")
	tap.Block()
	time.Sleep(ackBound(5*time.Second) + 500*time.Millisecond)
	if r := bj.Broker.WriteRefusal(); r != nil {
		t.Fatalf("a standalone master refuses puts without ZooKeeper: %v", r)
	}
	c, err := dialMeta(bj.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.put("orders", 0, []byte("during")); err != nil {
		t.Fatalf("put to a standalone master without ZooKeeper: %v", err)
	}
	tap.Unblock()
}

// TestStaleConfirmationRoundKeepsHeldPuts: bj, the master, cannot reach
// its ZooKeeper past the acknowledgement bound and holds a put sent
// meanwhile by a producer without client retries ([replication]
// handoverHoldMs=20000). Then a round of reads begun longer than the bound
// ago (on a loaded machine, or with a slow ensemble, a read takes that
// long) confirms bj's generation: the confirmation dates from the round's
// start, so it is stale already, and ending the hold on it refused the
// held put at once (503, not stored: the failed sends of producers at load
// 40-70). The hold keeps the put; once bj's ZooKeeper is back a round
// within the bound confirms it and the put is acknowledged.
func TestStaleConfirmationRoundKeepsHeldPuts(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "handoverHoldMs=20000\n", noConfigSync)
	tap := &zktest.Tap{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, options: func(o *Options) { o.ZooKeeperDialer = tap.Dial }})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	sc := mustComp[*shipperComponent](t, bj)
	g := sc.guard

	tap.Block()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if !g.returning(time.Now()) {
			return errors.New("bj's last confirmation is within the bound yet")
		}
		return nil
	})
	p, closeP := noRetryProducer(t, bj.Broker.Addr().String())
	defer closeP()
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		defer cancel()
		_, err := p.Send(ctx, &client.Message{Topic: "orders", Payload: []byte("held while unconfirmed")})
		errc <- err
	}()
	var h *broker.Hold
	testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
		if h = g.hold.Load(); h == nil || h.Stats().Held == 0 {
			return errors.New("bj holds no put yet")
		}
		return nil
	})

	// A round begun twice the bound ago confirms bj's generation.
	bj.confirmGeneration(g, sc.gen, map[string]uint64{bj.Config().Site.Name: sc.gen}, time.Now().Add(-2*g.bound))
	if h.Ended() {
		select {
		case err := <-errc:
			t.Fatalf("a round older than the bound ended bj's hold; the held put was answered: %v", err)
		case <-time.After(sendTimeout):
			t.Fatal("a round older than the bound ended bj's hold")
		}
	}

	tap.Unblock()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("the held put, once bj confirmed its generation within the bound: %v, want it acknowledged", err)
		}
	case <-time.After(2 * sendTimeout):
		t.Fatal("the held put was not answered")
	}
	if st := h.Stats(); st.Expired != 0 {
		t.Fatalf("hold stats %+v: a put was refused", st)
	}
}
