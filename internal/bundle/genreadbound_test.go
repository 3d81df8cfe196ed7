package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestPerSiteZKStalledOwnEnsembleStillSeesANewerGeneration: the master's
// own ZooKeeper ensemble stops answering (its session stays connected,
// requests wait) while another site's promotion raised the generation in
// the other two ensembles. The master's read of its own ensemble is
// bounded like its reads of the others, and a round whose own read failed
// still reads the others: the master steps down for the newer generation.
// On the code before, the own read waited unbounded and a failed one
// skipped the other ensembles, so the master never saw it while the stall
// lasted.
func TestPerSiteZKStalledOwnEnsembleStillSeesANewerGeneration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true, sessionTimeout: 30 * time.Second, replication: "sites=bj,gz,hf\n"})
	s.reachesAllEnsembles("bj")
	bj := s.site("bj")
	waitConfirmed(t, bj)
	brokerID := bj.Config().System.BrokerID
	known := bj.Role().Generation
	regs := s.ensembleClients()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s.stallEnsembleFrom("bj", "bj")
	defer s.unstallEnsembles()
	token, err := registry.NewRaiseToken()
	if err != nil {
		t.Fatal(err)
	}
	gen := known + 1
	for _, n := range []string{"hf", "gz"} {
		if _, err := regs[n].RaiseGenerationFromToAs(ctx, brokerID, known, gen, registry.Raiser{Generation: gen, Site: "hf", Token: token}); err != nil {
			t.Fatalf("raise generation %d in %s's ensemble: %v", gen, n, err)
		}
	}
	stalled := time.Now()
	// Longer than a read waits with the bound (a third of the 3-s
	// acknowledgement bound) and a round's other reads, shorter than the
	// session's 20-s receive timeout that would fail the stalled read on
	// the code before.
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		if r := bj.Role(); r.IsMaster() && !r.SteppedDown {
			return fmt.Errorf("bj is still %v %v after generation %d was raised in hf's and gz's ensembles (bj's own stalled)",
				r, time.Since(stalled).Round(time.Millisecond), gen)
		}
		return nil
	})
	t.Logf("bj stepped down %v after the raise, its own ensemble stalled", time.Since(stalled).Round(time.Millisecond))
}
