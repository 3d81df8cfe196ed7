package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestPerSiteZKForcedRaiseFailsOnItsOwnEnsemble: deploy/'s layout, one
// ZooKeeper per site, bj master. `promote -force gz` reads every
// ensemble, then gz loses its ZooKeeper connections just as it writes the
// generation into its own ensemble (the soak's seed 941025: gz's own
// ensemble went away during the raise). The promotion fails, and it must
// leave nothing behind: no ensemble holds its number, bj stays master at
// its generation, and after gz's ZooKeeper comes back the deployment has
// exactly one master. On the code before, the raise wrote bj's ensemble
// first (in site order), could not give it back there, and bj stepped
// down for a generation nobody was master of.
func TestPerSiteZKForcedRaiseFailsOnItsOwnEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	old := raiseTimeout
	raiseTimeout = 3 * time.Second
	t.Cleanup(func() { raiseTimeout = old })
	s := newSites(t, autoFailoverDeploy())
	stop := s.watchMasters()
	defer stop()
	s.reachesAllEnsembles("gz")
	regs := s.ensembleClients()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	known := s.site("bj").Role().Generation

	s.mu.Lock()
	gzZK := s.zks["gz"]
	s.mu.Unlock()
	s.tapOf("gz").BlockBeforeWrite(gzZK, "/generation")
	rep, err := s.site("gz").Promote(ctx, true)
	if err == nil {
		t.Fatalf("gz's forced promotion succeeded (generation %d) without its own ZooKeeper", rep.Generation)
	}
	t.Logf("gz's forced promotion failed: %v", err)
	for name, zc := range regs {
		g, by, err := zc.GenerationRaiser(ctx, 0)
		if err != nil || g != known {
			t.Errorf("%s's ensemble: generation %d raised by %+v (%v) after the failed promotion, want %d", name, g, by, err, known)
		}
	}
	if r := s.site("bj").Role(); !r.IsMaster() || r.SteppedDown || r.Generation != known {
		t.Errorf("bj is %+v after gz's failed promotion, want master of generation %d", r, known)
	}
	s.healZK("gz")

	healed := time.Now()
	testutil.Eventually(t, 45*time.Second, 50*time.Millisecond, func() error {
		var masters []string
		for _, n := range s.running() {
			if r := s.site(n).Role(); r.IsMaster() && !r.SteppedDown {
				masters = append(masters, n)
			}
		}
		if len(masters) != 1 {
			return fmt.Errorf("masters %v %v after gz's ZooKeeper came back, want exactly one", masters, time.Since(healed).Round(time.Millisecond))
		}
		return nil
	})
	m := s.master()
	s.produce(m, "orders", 5)
	if c := s.converged("orders"); c != m {
		t.Fatalf("converged on %s, want the master %s", c, m)
	}
}
