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

// TestSwitchoverStepsDownOnceZooKeeperIsBack: bj hands over to hf while
// its ZooKeeper is cut off, and is still cut off when it registers as a
// slave. It tries again until its ZooKeeper is back, and then is hf's
// slave, registered as such, and follows hf (before, the demotion gave up
// on the first failed connect, `register as slave 1 in ZooKeeper: zk:
// could not connect to a server`, and left bj neither master nor slave).
func TestSwitchoverStepsDownOnceZooKeeperIsBack(t *testing.T) {
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
	const retrying = "registering as slave in ZooKeeper failed; trying again"
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
