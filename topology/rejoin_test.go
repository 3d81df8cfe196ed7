package topology

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestPartitionLongerThanGossipToTheDeadHeals: two sites cut off from each
// other long enough that each declares the other down and stops gossiping
// to it (memberlist gossips to the dead only for GossipToTheDeadTime, and
// probes and push-pulls only the alive) find each other again once the
// link heals. Without the rejoin loop they stayed apart for good: a WAN
// partition of a minute split the pool until a restart.
func TestPartitionLongerThanGossipToTheDeadHeals(t *testing.T) {
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	tr := newPausableTransport(t)
	hf, err := New(Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Key: testKey, Label: "metaq-test", Timing: FastTiming(), RefreshInterval: 50 * time.Millisecond,
		Logger: testutil.Logger(t, slog.LevelInfo), transport: tr, Join: []string{bj.t.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer hf.close(false)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return wantAlive(bj.t, "bj-1-m", "hf-1-s0") })

	tr.paused.Store(true)
	down := func(tp *Topology, name string) error {
		if m, ok := memberOf(tp, name); !ok || m.State != StateDown {
			return fmt.Errorf("%s sees %s as %v", tp.Name(), name, m.State)
		}
		return nil
	}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := down(bj.t, "hf-1-s0"); err != nil {
			return err
		}
		return down(hf, "bj-1-m")
	})
	// Well past GossipToTheDeadTime (30 gossip intervals: 600 ms here).
	time.Sleep(3 * time.Second)
	tr.paused.Store(false)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := wantAlive(bj.t, "hf-1-s0"); err != nil {
			return err
		}
		return wantAlive(hf, "bj-1-m")
	})
}

// TestSeedsDownAtStartJoinLater: a bundle whose every seed was down when it
// started joins them once one comes up (it stayed alone before).
func TestSeedsDownAtStartJoinLater(t *testing.T) {
	bjAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Join: []string{bjAddr}})
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123", Bind: bjAddr})
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := wantAlive(bj.t, "hf-1-s0"); err != nil {
			return err
		}
		return wantAlive(hf.t, "bj-1-m")
	})
}
