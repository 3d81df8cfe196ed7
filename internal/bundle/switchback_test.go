package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// TestRejoinAfterSwitchoverBack: bj hands over to hf and takes mastership
// back (so bj keeps a slave checkpoint in hf's log from the time it
// followed hf), takes puts hf never gets while cut off, and hf is promoted.
// bj, demoted to follow hf, must resume by partition ends, not at the
// stale checkpoint: it cuts and saves aside exactly the records hf lacks
// and then follows hf byte for byte.
func TestRejoinAfterSwitchoverBack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	ctx := context.Background()
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	natsURL := "nats://" + natsListen
	toBJ := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toBJ.Addr(), natsURL: natsURL})
	produce(t, bj.Broker.Addr().String(), "orders", 40, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	toHF := wanProxy(t, "127.0.0.1:1") // hf's shipper once it ships
	switchover(t, bj, hf, "hf", toHF)
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	switchover(t, hf, bj, "bj", toBJ)
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj-again")
	wantFollowsByteIdentical(t, bj, hf, "orders")

	toBJ.SetRefuse(true)
	toBJ.CutAll()
	produce(t, bj.Broker.Addr().String(), "orders", 15, "bj-unreplicated")
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := hf.Promote(ctx, false)
		return err
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf-promoted")

	if err := bj.Demote(ctx, Demotion{SlaveID: 1, MasterAddress: hf.promotedShipper().Addr(), NewMaster: "hf"}); err != nil {
		t.Fatal(err)
	}
	wantFollowsByteIdentical(t, hf, bj, "orders")
	tails, err := georeplicator.ListTails(filepath.Join(root, "bj", "data", "replication", "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	saved := 0
	for _, f := range tails {
		saved += f.Records
	}
	if saved != 15 {
		t.Fatalf("bj saved %d records aside (%+v), want the 15 hf never got", saved, tails)
	}
}

// switchover hands from's mastership to the slave named to, which from
// then follows through relay (aimed at to's shipper once it ships), and
// waits until to takes puts.
func switchover(t *testing.T, from, to *Bundle, name string, relay interface {
	Addr() string
	SetTarget(string)
}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := from.Switchover(ctx, name, relay.Addr())
		done <- err
	}()
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if sc := to.promotedShipper(); sc != nil {
			relay.SetTarget(sc.Addr())
		}
		if to.promotedShipper() == nil || to.Broker.WriteRefusal() != nil {
			return errors.New(name + " does not take puts yet")
		}
		return nil
	})
	if err := <-done; err != nil {
		t.Fatalf("switchover to %s: %v", name, err)
	}
}
