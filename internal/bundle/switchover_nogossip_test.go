package bundle

import (
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSwitchoverPerSiteZKWithoutGossip: deploy/'s layout (one ZooKeeper
// per site, secret and mutual TLS on the links) with gossip off. The old
// master reads no other site's ensemble (it has no site views), so it
// learns the new generation, and where the new master ships, from the new
// master itself over the replication link the handover ran on. Before,
// the switchover failed ("generation 1 was not seen ... within 15s") and
// bj took puts again at its own generation while hf was master of the
// next one.
func TestSwitchoverPerSiteZKWithoutGossip(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true, noGossip: true, deploy: true})
	stop := s.watchMasters()
	defer stop()
	rep := s.switchover("bj", "hf")
	if !rep.Following || rep.Generation != 1 {
		t.Fatalf("switchover: %+v, want bj following hf at generation 1", rep)
	}
	s.steppedDown("bj")
	// The switchover answers once bj follows; hf records its role a moment
	// after it took over.
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if r := s.site("hf").Role(); !r.IsMaster() || r.Generation != 1 {
			return fmt.Errorf("hf: %v, want master of generation 1", r)
		}
		return nil
	})
	s.produce("hf", "orders", 10)
	wantFollowsByteIdentical(t, s.site("hf"), s.site("bj"), "orders")
	if r := s.site("bj").Role(); r.IsMaster() {
		t.Fatalf("bj after the switchover: %v", r)
	}
}
