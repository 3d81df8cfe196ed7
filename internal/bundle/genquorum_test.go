package bundle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestPerSiteZKTwoPromotionsOneGeneration: one ZooKeeper per site, bj (the
// master) killed, then hf and gz promoted at the same moment, neither
// forced. Each raises the generation in its own ensemble and in the others
// it reaches; exactly one wins a majority of the three ensembles and
// becomes master, the other gets an error, sets back its raise and follows
// the winner. No two sites are ever master of one generation, and every
// ensemble, the loser's own included, ends with the winner's generation
// and the winner as its raiser.
func TestPerSiteZKTwoPromotionsOneGeneration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	stop := s.watchMasters()
	defer stop()
	hf, gz := s.site("hf"), s.site("gz")
	known := hf.Role().Generation
	// Both must reach every other site's ensemble before bj goes.
	s.reachesAllEnsembles("hf", "gz")
	s.kill("bj")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	regs := s.ensembleClients()
	s.waitMasterGone("bj")

	sites := []*Bundle{hf, gz}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i, b := range sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			_, errs[i] = b.Promote(ctx, false)
		}()
	}
	close(begin)
	wg.Wait()
	var winner, loser *Bundle
	switch {
	case errs[0] == nil && errs[1] != nil:
		winner, loser = hf, gz
	case errs[1] == nil && errs[0] != nil:
		winner, loser = gz, hf
	default:
		t.Fatalf("promote at hf: %v; at gz: %v; want exactly one to succeed", errs[0], errs[1])
	}
	wname, lname := winner.Config().Site.Name, loser.Config().Site.Name
	lerr := errs[0]
	if loser == gz {
		lerr = errs[1]
	}
	t.Logf("%s promoted; %s refused: %v", wname, lname, lerr)
	if !errors.Is(lerr, registry.ErrGenerationMoved) {
		t.Fatalf("%s's promotion failed with %v, want ErrGenerationMoved", lname, lerr)
	}
	gen := winner.Role().Generation
	if gen != known+1 {
		t.Fatalf("%s is master of generation %d, want %d", wname, gen, known+1)
	}
	if r := loser.Role(); r.Role == siterole.Master || loser.promotedShipper() != nil {
		t.Fatalf("%s, refused, is %v", lname, r)
	}
	// Every ensemble, the loser's own included, ends with the winner's
	// generation and raiser.
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		for name, zc := range regs {
			g, by, err := zc.GenerationRaiser(ctx, 0)
			if err != nil || g != gen || by.Site != wname || by.Abandoned {
				return fmt.Errorf("%s's ensemble has generation %d raised by %+v (%v), want %d raised by %s", name, g, by, err, gen, wname)
			}
		}
		return nil
	})
	if r := winner.Broker.WriteRefusal(); r != nil {
		t.Fatalf("the new master %s refuses puts: %s", wname, r.Reason)
	}
	s.produce(wname, "orders", 10)
	wantFollowsByteIdentical(t, winner, loser, "orders")
	if r := loser.Role(); r.Role == siterole.Master {
		t.Fatalf("%s became master: %v", lname, r)
	}
}
