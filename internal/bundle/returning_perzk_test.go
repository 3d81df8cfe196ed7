package bundle

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestReturningMasterChecksTheOtherEnsembles: one ZooKeeper per site, and
// bj's site cut off from the others (hf and gz cannot reach bj's ensemble)
// when bj is killed and gz is promoted: the new generation reaches hf's and
// gz's ensembles, not bj's. bj, restarted by its unit's unchanged command
// (master role in its files), reads its own ensemble's generation (still
// the old one) and the other sites' ensembles its last run recorded: it
// starts as a slave, writes no master node in its own ensemble and takes no
// puts; once the cut heals it follows gz.
func TestReturningMasterChecksTheOtherEnsembles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	bj := s.site("bj")
	// bj's last run recorded the other sites' ensembles (gossip named them).
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		list, err := readEnsembles(ensemblesFile(bj.Config().System.DataPath))
		if err != nil || len(list) != 2 {
			return fmt.Errorf("bj recorded %v (%v), want hf's and gz's ensembles", list, err)
		}
		return nil
	})
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, bj, s.site("gz"), "orders", 20*time.Second)

	s.cutEnsemble("bj")
	s.kill("bj")
	rep := s.promote("gz", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zc := zkClient(t, &testEnv{zk: s.zks["bj"], root: s.zkRoot})
	// bj's ensemble missed the promotion: the old generation, and gz is
	// registered in hf's ensemble.
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		hz := zkClient(t, &testEnv{zk: s.zks["hf"], root: s.zkRoot})
		if g, err := hz.Generation(ctx, 0); err != nil || g != rep.Generation {
			return fmt.Errorf("hf's ensemble has generation %d (%v), want %d", g, err, rep.Generation)
		}
		return nil
	})
	if g, err := zc.Generation(ctx, 0); err != nil || g >= rep.Generation {
		t.Fatalf("bj's ensemble has generation %d (%v); the test needs it to have missed %d", g, err, rep.Generation)
	}

	s.restart("bj")
	bj = s.site("bj")
	if r := bj.Role(); r.Role != siterole.Slave {
		t.Fatalf("bj restarted as %v, want a slave: the other sites' ensembles have generation %d", r, rep.Generation)
	}
	if bj.Broker.WriteRefusal() == nil {
		t.Fatal("bj takes puts")
	}
	if data, _, err := zc.Get(ctx, zc.Paths().Broker(0, -1)); err == nil && string(data) == bj.Broker.URL() {
		t.Fatalf("bj registered itself as master in its own ensemble (%s)", data)
	}
	if _, err := os.Stat(ensemblesFile(bj.Config().System.DataPath)); err != nil {
		t.Fatal(err)
	}

	s.healEnsemble("bj")
	s.produce("gz", "orders", 10)
	if m := s.converged("orders"); m != "gz" {
		t.Fatalf("converged with %s as master, want gz", m)
	}
}
