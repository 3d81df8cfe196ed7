package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
	"metaq/topology"
)

// TestPromoteRefusedWhileAnotherSiteIsAhead: hf lost bj earlier than gz,
// so gz holds records hf never got (with minSyncSites=1 such a record may
// have been acknowledged because gz had it). Once bj is lost, promote at hf
// is refused naming gz, which would otherwise cut those records when it
// follows hf (POST /promote answers 409); promote at gz succeeds.
func TestPromoteRefusedWhileAnotherSiteIsAhead(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), noNATS: true, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), noNATS: true, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "both")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	toHF.SetRefuse(true)
	toHF.CutAll()
	produce(t, bj.Broker.Addr().String(), "orders", 10, "gz-only")
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)
	bj.Close()
	// hf learns by gossip that gz lost bj too, and how far gz got.
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, m := range mustComp[*topologyComponent](t, hf).Topology().Members() {
			if m.Meta.Site == "gz" && m.State == topology.StateAlive && !m.Meta.Health.ReplicationOK && m.Meta.LogPos > hf.appliedPos() {
				return nil
			}
		}
		return errors.New("hf does not know yet that gz lost bj ahead of it")
	})
	ctx := context.Background()
	_, err := hf.Promote(ctx, false)
	if !errors.Is(err, ErrSiblingAhead) || !strings.Contains(err.Error(), "gz") {
		t.Fatalf("promote at hf, behind gz: %v, want ErrSiblingAhead naming gz", err)
	}
	if code, body := testutil.HTTPDo(t, "POST", "http://"+hf.AdminAddr()+"/promote", ""); code != 409 {
		t.Fatalf("POST /promote at hf: %d %s, want 409", code, body)
	}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		_, err := gz.Promote(ctx, false)
		if err != nil {
			return fmt.Errorf("promote at gz: %w", err)
		}
		return nil
	})
	if hf.promotedShipper() != nil {
		t.Fatal("hf was promoted too")
	}
}
