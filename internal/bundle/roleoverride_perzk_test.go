package bundle

import (
	"os"
	"testing"
	"time"
)

// TestPerSiteZKRestartedMasterSeesNewerGenerationElsewhere: one ZooKeeper
// per site, [replication] sites=bj,gz,hf. hf, started as a slave site and
// master of generation 1 after a switchover, is killed; with hf's ensemble
// out of the other sites' reach, bj is promoted, winning the next
// generation in bj's and gz's ensembles (2 of 3) but not in hf's. hf is
// restarted with its unit's unchanged command (`start slave`). On the code
// before, the role from its data directory (master of generation 1) was
// checked against hf's own ensemble alone, which still said 1: hf started
// as master of generation 1 and acknowledged puts at the offsets bj was
// acknowledging until its fence read the newer generation in another
// site's ensemble (soak seed 941021: 1.7 s of puts at hf, the same offsets
// acknowledged twice, then hf promoted later from a log without bj's).
// Now the other sites' ensembles it reaches are read too: hf starts as the
// slave its command says, follows bj, and every site converges to bj's log.
func TestPerSiteZKRestartedMasterSeesNewerGenerationElsewhere(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true, replication: "sites=bj,gz,hf\n"})
	s.switchover("bj", "hf")
	s.produce("hf", "orders", 10)
	hf, bj, gz := s.site("hf"), s.site("bj"), s.site("gz")
	waitCaughtUp(t, hf, bj, "orders", 30*time.Second)
	waitCaughtUp(t, hf, gz, "orders", 30*time.Second)
	s.reachesAllEnsembles("hf")
	if _, err := os.Stat(ensemblesFile(hf.Config().System.DataPath)); err != nil {
		t.Fatalf("hf recorded no other site's ensemble: %v", err)
	}

	s.kill("hf")
	s.waitMasterGone("hf")
	s.cutEnsemble("hf")
	rep := s.promote("bj", false)
	if rep.Generation <= 1 {
		t.Fatalf("bj promoted to generation %d, want above hf's 1", rep.Generation)
	}
	s.produce("bj", "orders", 10)

	// hf reaches every ensemble; only its own missed bj's generation.
	s.restart("hf")
	hf = s.site("hf")
	if hf.opts.Mode != ModeSlave {
		t.Fatalf("hf, master of generation 1, restarted as %v with generation %d in bj's and gz's ensembles: "+
			"a second master acknowledging puts in an old generation", hf.opts.Mode, rep.Generation)
	}
	if hf.Role().IsMaster() {
		t.Fatalf("hf restarted as master: %+v", hf.Role())
	}

	s.healEnsembles()
	s.produce("bj", "orders", 10)
	if m := s.converged("orders"); m != "bj" {
		t.Fatalf("converged with %s as master, want bj (generation %d)", m, rep.Generation)
	}
}
