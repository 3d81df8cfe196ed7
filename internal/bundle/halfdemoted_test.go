package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestHalfDemotedSiteRejoins: hf, started as a slave site and master after
// a switchover, hands over to gz with its ZooKeeper cut: its demotion stops
// its shipper, then cannot register as a slave. Once its ZooKeeper is back
// it must follow gz: before the fix every retry was refused as "demote:
// this site is already a slave", since with neither a promotion's shipper
// nor a demotion's receiver the receiver hf was started with (stopped at
// its promotion) was taken for a running one, and hf followed no one for
// ever (found by the fault schedules, internal/faultsched, seed 900008).
func TestHalfDemotedSiteRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.switchover("bj", "hf")
	s.produce("hf", "orders", 10)
	hf, gz := s.site("hf"), s.site("gz")
	waitCaughtUp(t, hf, gz, "orders", 30*time.Second)

	s.cutZK("hf")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, err := hf.Switchover(ctx, "gz", "")
	cancel()
	t.Logf("switchover hf -> gz with hf's ZooKeeper cut: %v", err)
	if hf.demotedReceiver() != nil || hf.promotedShipper() != nil {
		t.Fatalf("hf: receiver %v, shipper %v: not the half-demoted state this test is about (err %v)",
			hf.demotedReceiver() != nil, hf.promotedShipper() != nil, err)
	}
	s.healZK("hf")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if r := hf.Role(); r.Role != siterole.Slave || hf.demotedReceiver() == nil {
			return fmt.Errorf("hf: role %+v, following: %v", r, hf.demotedReceiver() != nil)
		}
		return nil
	})
	s.produce("gz", "orders", 10)
	if m := s.converged("orders"); m != "gz" {
		t.Fatalf("master %s, want gz", m)
	}
}
