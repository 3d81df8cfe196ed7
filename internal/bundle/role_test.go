package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// TestRestartKeepsRunTimeRoles (ZooKeeper): after `switchover -to hf`, bj
// restarted with its unchanged master configuration comes back as hf's
// slave (it says so loudly, refuses puts, registers as slave1 and follows
// hf), and hf restarted with its `start slave` configuration comes back as
// master of generation 1 (it takes puts, registers as master and ships to
// bj). `role -clear` (ClearPersistedRole) removes the record.
func TestRestartKeepsRunTimeRoles(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bjSpec := siteSpec{name: "bj", natsListen: natsListen}
	hfSpec := siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://" + natsListen}
	bj := startSite(t, filepath.Join(root, "bj"), shared, bjSpec)
	hf := startSite(t, filepath.Join(root, "hf"), shared, hfSpec)
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bj.Switchover(ctx, "hf", ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if hf.Broker.WriteRefusal() != nil {
			return fmt.Errorf("hf refuses puts")
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	// bj, restarted as it was configured (master), comes back as hf's slave.
	bj.Close()
	var bjLog testutil.SyncBuffer
	bjSpec.logger = slog.New(slog.NewTextHandler(&bjLog, nil))
	bj = startSite(t, filepath.Join(root, "bj"), shared, bjSpec)
	if !strings.Contains(bjLog.String(), "ROLE FROM THE DATA DIRECTORY OVERRIDES THE START COMMAND") || !strings.Contains(bjLog.String(), "role -clear") {
		t.Fatalf("bj's start did not say that its persisted role overrides the command line:\n%s", bjLog.String())
	}
	if bj.Mode() != ModeSlave || bj.promotedShipper() != nil {
		t.Fatalf("bj restarted in mode %s", bj.Mode())
	}
	if r := bj.Broker.WriteRefusal(); r == nil || r.Retry {
		t.Fatalf("bj restarted: refusal %+v, want puts refused for good", r)
	}
	if s, ok := findComp[*shipperComponent](bj); ok && s.Shipper() != nil {
		t.Fatal("bj restarted ships its log as a master")
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		kids, err := zc.Children(ctx, zc.Paths().BrokerID(0))
		if err != nil {
			return err
		}
		data, _, err := zc.Get(ctx, zc.Paths().BrokerID(0)+"/master")
		if err != nil || string(data) != hf.Broker.URL() || !slices.Contains(kids, "slave1") {
			return fmt.Errorf("ids/0 holds %v, master %q %v; want hf's master node and slave1", kids, data, err)
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf-2")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	// hf, restarted with `start slave` and its async_slave.properties,
	// comes back as master of the generation it won; bj follows it.
	hf.Close()
	hf = startSite(t, filepath.Join(root, "hf"), shared, hfSpec)
	if hf.Mode() != ModeMaster {
		t.Fatalf("hf restarted in mode %s", hf.Mode())
	}
	sc := mustComp[*shipperComponent](t, hf)
	if s := sc.Shipper(); s == nil {
		t.Fatal("hf restarted does not ship its log")
	}
	id, err := hf.identity()
	if err != nil || id.Generation() != 1 {
		t.Fatalf("hf restarted: generation %d %v", id.Generation(), err)
	}
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := hf.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("hf refuses puts: %s", r.Reason)
		}
		if data, _, err := zc.Get(ctx, zc.Paths().BrokerID(0)+"/master"); err != nil || string(data) != hf.Broker.URL() {
			return fmt.Errorf("ids/0/master = %q %v, want %s", data, err, hf.Broker.URL())
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf-3")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	// The way back: clearing the record (server stopped) leaves the start
	// command in charge.
	dataPath := bj.Config().System.DataPath
	bj.Close()
	r, err := ClearPersistedRole(dataPath)
	if err != nil || r == nil || r.Name != georeplicator.RoleSlave || r.SlaveID != 1 {
		t.Fatalf("clear: %+v %v", r, err)
	}
	if r, err := PersistedRole(dataPath); err != nil || r != nil {
		t.Fatalf("after clearing: %+v %v", r, err)
	}
}

// TestRestartKeepsRunTimeRolesGossip (ZooKeeper off): bj, cut off from
// hf, acknowledges records hf never gets; hf is promoted and bj rejoins as
// its slave by gossip. bj restarted with its master configuration comes
// back as hf's slave, reaching hf at the replication address it recorded
// (its gossip seeds are gone); hf restarted with `start slave` comes back
// as master on a new replication port, which bj finds by gossip.
func TestRestartKeepsRunTimeRolesGossip(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bjGossip := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bjSpec := siteSpec{name: "bj", natsListen: natsListen, gossipBind: bjGossip}
	bj := startSite(t, filepath.Join(root, "bj"), shared, bjSpec)
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hfSpec := siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: "nats://" + natsListen, join: []string{bjGossip}}
	hf := startSite(t, filepath.Join(root, "hf"), shared, hfSpec)
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	cutLink(t, toHF, hf)
	produce(t, bj.Broker.Addr().String(), "orders", 6, "bj-unreplicated")
	// -force: gossip still has bj alive; only its replication link is cut.
	if _, err := hf.Promote(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	bj.Close()
	bj = startSite(t, filepath.Join(root, "bj"), shared, bjSpec)
	if st := bj.Status(); st.Mode != "slave" || st.SlaveID != 1 {
		t.Fatalf("bj restarted: mode %s slaveId %d, want slave 1", st.Mode, st.SlaveID)
	}
	if r := bj.Broker.WriteRefusal(); r == nil || r.Retry {
		t.Fatalf("bj restarted: refusal %+v, want puts refused for good", r)
	}
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf-2")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	hf.Close()
	hf = startSite(t, filepath.Join(root, "hf"), shared, hfSpec)
	if st := hf.Status(); st.Mode != "master" || st.SlaveID != -1 {
		t.Fatalf("hf restarted: mode %s slaveId %d, want master", st.Mode, st.SlaveID)
	}
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := hf.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("hf refuses puts: %s", r.Reason)
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf-3")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	tails, err := georeplicator.ListTails(filepath.Join(root, "bj", "data", "replication", "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	saved := 0
	for _, f := range tails {
		saved += f.Records
	}
	if saved != 6 {
		t.Fatalf("bj saved %d records aside, want the 6 hf never got", saved)
	}
}

// TestStatusDuringSwitchover: /status and the dashboard's snapshot are read
// in a loop on both sites while `switchover -to hf` turns bj into a slave
// and hf into the master (run with -race: the role is read while it
// changes), and afterwards both report the new roles.
func TestStatusDuringSwitchover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: "nats://" + natsListen})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	type view struct {
		SlaveID int    `json:"slaveId"`
		Mode    string `json:"mode"`
	}
	read := func(b *Bundle) (view, string) {
		var v view
		var snap struct {
			Role string `json:"role"`
		}
		getJSON(t, "http://"+b.AdminAddr()+"/status", &v)
		getJSON(t, "http://"+mustComp[*dashboardComponent](t, b).Addr()+"/api/snapshot", &snap)
		return v, snap.Role
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var reads atomic.Int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, b := range []*Bundle{bj, hf} {
				// What /status and the dashboard's snapshot answer.
				b.Status()
				snapshot(context.Background(), b)
			}
			reads.Add(1)
		}
	}()
	toNewMaster := wanProxy(t, "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := bj.Switchover(ctx, "hf", toNewMaster.Addr())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
		if hf.promotedShipper() == nil {
			return errors.New("hf has not taken over yet")
		}
		return nil
	})
	toNewMaster.SetTarget(hf.promotedShipper().Addr())
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if reads.Load() < 20 {
			return fmt.Errorf("%d status reads so far", reads.Load())
		}
		return nil
	})
	close(stop)
	<-done
	if v, role := read(bj); v.SlaveID != 1 || role != "slave" {
		t.Fatalf("bj after the switchover: status %+v, dashboard role %q; want slave 1 (report %+v)", v, role, rep)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if v, role := read(hf); v.SlaveID != -1 || role != "master" {
			return fmt.Errorf("hf after the switchover: status %+v, dashboard role %q; want master", v, role)
		}
		return nil
	})
}
