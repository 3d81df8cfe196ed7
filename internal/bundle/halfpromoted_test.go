package bundle

import (
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestHalfPromotedSiteRejoins: a forced promotion at hf that fails after it
// started shipping (its ZooKeeper goes away while it waits for the old
// master's node) leaves hf a slave by role with a running shipper and no
// receiver. When gz is then promoted, hf's shipper steps down at the newer
// generation and hf must rejoin as gz's slave: before the fix, its
// demotion was refused ("already a slave") and hf followed no one, for
// ever (found by the fault schedules, internal/faultsched).
func TestHalfPromotedSiteRejoins(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 10)
	// Asynchronous puts: bj answers before its slave sites hold them, and
	// gz's forced promotion below keeps only what gz holds (the documented
	// RPO). Start from sites that hold all of bj's log.
	for _, n := range []string{"hf", "gz"} {
		waitCaughtUp(t, s.site("bj"), s.site(n), "orders", 30*time.Second)
	}
	// bj's session stays in ZooKeeper while its connection is blocked:
	// hf's promotion waits for bj's master node to be free.
	hf := s.site("hf")
	t.Logf("hf's promotion failed half way, as wanted: %v", s.promoteHalfWay("hf", "bj"))
	s.healZK("hf")
	if r := hf.Role(); r.Role != siterole.Slave || hf.promotedShipper() == nil {
		t.Fatalf("hf: role %+v, promoted shipper %v: not the half-promoted state this test is about", r, hf.promotedShipper() != nil)
	}
	// gz takes over at a newer generation once bj's session expired.
	s.kill("bj")
	s.promote("gz", true)
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if r := hf.Role(); r.Role != siterole.Slave || hf.demotedReceiver() == nil {
			return fmt.Errorf("hf: role %+v, following: %v", r, hf.demotedReceiver() != nil)
		}
		return nil
	})
	s.produce("gz", "orders", 10)
	s.restart("bj")
	if m := s.converged("orders"); m != "gz" {
		t.Fatalf("master %s, want gz", m)
	}
}
