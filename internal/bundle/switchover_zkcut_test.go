package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestSwitchoverTakesOverPutsHeldForConfirmation: bj, cut off from its
// ZooKeeper, holds the puts that reach it while it cannot confirm its
// generation (ackguard.go) when `switchover -to hf` begins. The
// switchover's hold takes them over and passes them on to hf, and the
// answers of puts stored at bj that waited for the confirmation are given
// once hf holds them: no send fails (before, the switchover ended that hold
// first, and its puts were refused by the stopped writes, 503 "could not
// confirm its generation 0", or 500 "stored here, but not acknowledged").
func TestSwitchoverTakesOverPutsHeldForConfirmation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{replication: switchoverTestHold})
	prods, stop := startProducers(t, s, "bj", "orders", "p1", "p2")
	waitAcked(t, prods, time.Time{}, 20)
	bj, hf := s.site("bj"), s.site("hf")
	s.cutZK("bj")
	// bj's confirmation lapses and it holds the puts that reach it.
	testutil.Eventually(t, time.Minute, 5*time.Millisecond, func() error {
		if !bj.Broker.Holding() {
			return errors.New("bj holds no puts yet")
		}
		return nil
	})
	if err := switchoverWhileZKCut(t, s, prods, "bj", "hf"); err != nil {
		t.Errorf("switchover with bj's ZooKeeper cut off: %v", err)
	}
	stop()
	total := checkAcksAt(t, prods, hf, "hf")
	t.Logf("%d puts acknowledged in all, %d failed", total, len(prods[0].errs)+len(prods[1].errs))
}

// TestSwitchoverStepsDownOnceZooKeeperIsBack: bj hands over to hf while
// its ZooKeeper is cut off, and is still cut off when it registers as a
// slave. It tries again until its ZooKeeper is back, and then is hf's
// slave, registered as such, and follows hf (before, the demotion gave up
// on the first failed connect, `register as slave 1 in ZooKeeper: zk:
// could not connect to a server`, and left bj neither master nor slave).
func TestSwitchoverStepsDownOnceZooKeeperIsBack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	bjLog := newLineLog(t)
	s := newSites(t, sitesSpec{
		loggers: map[string]*slog.Logger{"bj": slog.New(slog.NewTextHandler(bjLog, &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	s.produce("bj", "orders", 20)
	bj, hf := s.site("bj"), s.site("hf")
	s.cutZK("bj")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := bj.Switchover(ctx, "hf", "")
		done <- err
	}()
	// bj reaches its registration as a slave with its ZooKeeper still cut.
	const retrying = "ZooKeeper is out of reach while registering as slave; trying again"
	testutil.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("the switchover returned with bj's ZooKeeper cut off: %v", err)
		default:
		}
		for _, line := range bjLog.since(0) {
			if strings.Contains(line, retrying) {
				return nil
			}
		}
		return errors.New("bj has not tried to register as a slave yet")
	})
	s.healZK("bj")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("switchover once bj's ZooKeeper was back: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the switchover did not return")
	}
	if hf.promotedShipper() == nil {
		t.Fatal("hf is not master")
	}
	if r := bj.Role(); r.Role != siterole.Slave {
		t.Fatalf("bj is %v after the switchover", r)
	}
	zc := zkClient(t, &testEnv{zk: s.zks["bj"], root: s.zkRoot})
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		data, _, err := zc.Get(context.Background(), s.zkRoot+"/brokers/ids/0/slave1")
		if err != nil || string(data) != bj.Broker.URL() {
			return fmt.Errorf("ids/0/slave1 is %q (%v), not bj's %s", data, err, bj.Broker.URL())
		}
		return nil
	})
	s.produce("bj", "orders", 20)
	s.converged("orders")
}

// TestRegisterAsSlaveGivesUpWhileZooKeeperIsOut: the rejoin loop demotes
// with a context that never ends, so a registration as slave that meets
// ZooKeeper out of reach must give up by itself after
// slaveRegisterPatience, naming what it waited for and how long, and the
// next attempt starts afresh once ZooKeeper is back (before, it retried
// for as long as the context lasted: for ever from the rejoin loop).
func TestRegisterAsSlaveGivesUpWhileZooKeeperIsOut(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	old := slaveRegisterPatience
	slaveRegisterPatience = 2 * time.Second
	t.Cleanup(func() { slaveRegisterPatience = old })
	s := newSites(t, sitesSpec{sites: []string{"bj"}})
	bj := s.site("bj")
	s.cutZK("bj")
	done := make(chan error, 1)
	go func() { done <- bj.registerAsSlave(context.Background(), 1) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		s.healZK("bj")
		t.Fatalf("registering as slave with ZooKeeper cut off did not give up within a minute (patience %v)", slaveRegisterPatience)
	}
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for ZooKeeper to register as slave 1: out of reach for") {
		t.Fatalf("registering as slave with ZooKeeper cut off: %v, want the wait given up and named", err)
	}
	t.Logf("gave up: %v", err)
	s.healZK("bj")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bj.registerAsSlave(ctx, 1); err != nil {
		t.Fatalf("registering as slave once ZooKeeper is back: %v", err)
	}
}
