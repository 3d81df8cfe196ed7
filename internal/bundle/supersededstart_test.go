package bundle

import (
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestPerSiteZKFormerMasterStartedBehindGossipsTheNewerGeneration: soak
// seed 944185. gz, a slave site promoted to master, was killed; bj's
// automatic promotion raised the generation in bj's ensemble, gz came back
// with its slave command line, read that generation there and started as
// that slave; then bj's raise was given back (its outcome in another
// ensemble was not known). Every ensemble held gz's generation again, gz
// gossiped it as a slave, and the other sites took gz for a master that
// had not joined gossip yet: no site was master to the end. gz must gossip
// the generation it started behind, so that the others count it as left
// unfinished and fail over.
func TestPerSiteZKFormerMasterStartedBehindGossipsTheNewerGeneration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{deploy: true, perSiteZK: true, sessionTimeout: 30 * time.Second, probeInterval: 500 * time.Millisecond})
	stop := s.watchMasters()
	defer stop()
	waitConfirmed(t, s.site("bj"))
	s.promote("gz", true)
	gz := s.site("gz")
	brokerID := gz.Config().System.BrokerID
	known := gz.Role().Generation
	s.stop("gz")

	raise := s.raiseIn("bj", "bj", brokerID, known)
	gen := raise.gen
	s.restart("gz")
	if r := s.site("gz").Role(); r.IsMaster() {
		t.Fatalf("gz restarted as %v with generation %d in bj's ensemble, want the slave its command line says", r, gen)
	}
	raise.giveBack()

	bj := s.site("bj")
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		tc := compOf[*topologyComponent](bj)
		if tc == nil || tc.Topology() == nil {
			return fmt.Errorf("bj runs no topology")
		}
		for _, p := range gossipPeers(tc.Topology(), brokerID) {
			if p.Site == "gz" && p.Alive && p.Generation == gen {
				return nil
			}
			if p.Site == "gz" {
				return fmt.Errorf("bj sees gz (alive %t, role %v) gossip generation %d, want the %d it started behind", p.Alive, p.Role, p.Generation, gen)
			}
		}
		return fmt.Errorf("bj sees no gz in gossip")
	})
}
