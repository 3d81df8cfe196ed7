package bundle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestPerSiteZKForcedPromotionSkipsATakenGeneration: one ZooKeeper per
// site; gz's ensemble holds generation 1 raised by another site (a raise
// this site never saw in its own ensemble). `promote -force` at hf must
// not reuse that number: it raises generation 2, by compare-and-set, in
// every ensemble it reaches, and every ensemble ends with 2 raised by hf.
func TestPerSiteZKForcedPromotionSkipsATakenGeneration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	s.reachesAllEnsembles("hf")
	regs := s.ensembleClients()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	known := s.site("hf").Role().Generation
	taken := registry.Raiser{Site: "elsewhere", Token: "a-raise-hf-never-saw"}
	if _, err := regs["gz"].RaiseGenerationFromAs(ctx, 0, known, taken); err != nil {
		t.Fatal(err)
	}
	rep := s.promote("hf", true)
	if rep.Generation != known+2 {
		t.Fatalf("hf's forced promotion took generation %d; gz's ensemble holds %d raised elsewhere, want %d", rep.Generation, known+1, known+2)
	}
	s.steppedDown("bj")
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		for name, zc := range regs {
			g, by, err := zc.GenerationRaiser(ctx, 0)
			if err != nil || g != rep.Generation || by.Site != "hf" {
				return fmt.Errorf("%s's ensemble: generation %d raised by %+v (%v), want %d raised by hf", name, g, by, err, rep.Generation)
			}
		}
		return nil
	})
	s.produce("hf", "orders", 5)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
}

// TestPerSiteZKForcedPromotionsRace: one ZooKeeper per site, bj killed,
// then `promote -force` at hf and at gz at the same moment. Each raises in
// every ensemble it reaches, in one order, above every generation it
// sees: the two never hold one generation (on the code before, each
// raised generation 1 in its own ensemble and both became its master),
// and the deployment ends with one master that the other site follows.
func TestPerSiteZKForcedPromotionsRace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	stop := s.watchMasters()
	defer stop()
	s.reachesAllEnsembles("hf", "gz")
	s.kill("bj")
	s.waitMasterGone("bj")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := []string{"hf", "gz"}
	reps := make([]PromoteReport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i, n := range names {
		b := s.site(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			reps[i], errs[i] = b.Promote(ctx, true)
		}()
	}
	close(begin)
	wg.Wait()
	t.Logf("hf: generation %d (%v); gz: generation %d (%v)", reps[0].Generation, errs[0], reps[1].Generation, errs[1])
	if errs[0] == nil && errs[1] == nil && reps[0].Generation == reps[1].Generation {
		t.Fatalf("hf and gz were both promoted to generation %d", reps[0].Generation)
	}
	// The promotion of the lower generation, if it completed, steps down.
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		var masters []string
		for _, n := range names {
			if r := s.site(n).Role(); r.IsMaster() {
				masters = append(masters, n)
			}
		}
		if len(masters) != 1 {
			return fmt.Errorf("masters %v, want exactly one", masters)
		}
		return nil
	})
	s.produce(s.converged("orders"), "orders", 5)
	m := s.converged("orders")
	regs := s.ensembleClients()
	gen := s.site(m).Role().Generation
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		for name, zc := range regs {
			g, by, err := zc.GenerationRaiser(ctx, 0)
			if err != nil || g != gen || by.Site != m {
				return fmt.Errorf("%s's ensemble: generation %d raised by %+v (%v), want %d raised by %s", name, g, by, err, gen, m)
			}
		}
		return nil
	})
}

// TestFinisherYieldsASharedGeneration: hf's forced promotion raised its
// generation and cannot finish (its identity file cannot be written, as
// on a full disk); meanwhile gz's ensemble names gz as the raiser of that
// same generation (gz raised it there while hf could not see it; of two
// raisers that are not master yet, the lower name keeps it). hf's
// finisher gives the generation up, drops its epoch and follows, instead
// of retrying until its bound (on the code before it retried until then); gz, promoted next, is master of a newer
// generation, and every site converges on it.
func TestFinisherYieldsASharedGeneration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	s.reachesAllEnsembles("hf")
	regs := s.ensembleClients()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hf := s.site("hf")
	undo := failIdentityWrites(t, hf)
	errc := make(chan error, 1)
	go func() {
		_, err := hf.Promote(ctx, true)
		errc <- err
	}()
	var gen uint64
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		p := hf.pendingPromotion()
		if p == nil {
			return fmt.Errorf("hf has no pending promotion yet (%v)", hf.Role())
		}
		gen = p.Generation
		return nil
	})
	if err := <-errc; err == nil {
		t.Fatal("hf's promotion succeeded although its identity file cannot be written")
	}
	// gz's ensemble names gz as the raiser of hf's generation.
	if g, by, err := regs["gz"].RaiseGenerationToBy(ctx, 0, gen, registry.Raiser{Site: "gz", Token: "gz-raised-it-unseen"}, true); err != nil || g != gen || by.Site != "gz" {
		t.Fatalf("writing gz as the raiser of generation %d in gz's ensemble: %d %+v %v", gen, g, by, err)
	}
	testutil.Eventually(t, 25*time.Second, 50*time.Millisecond, func() error {
		if p := hf.pendingPromotion(); p != nil {
			return fmt.Errorf("hf still finishes its promotion to generation %d: %s", p.Generation, p.LastError)
		}
		return nil
	})
	if r := hf.Role(); r.Role == siterole.Master || hf.promotedShipper() != nil || hf.Broker.WriteRefusal() == nil {
		t.Fatalf("hf gave its generation up but is %v (shipper %v, refusal %v)", r, hf.promotedShipper() != nil, hf.Broker.WriteRefusal())
	}
	id, err := hf.identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range id.History() {
		if e.Generation == gen {
			t.Fatalf("hf's history still holds the epoch of generation %d it gave up: %+v", gen, id.History())
		}
	}
	undo()
	rep := s.promote("gz", true)
	if rep.Generation <= gen {
		t.Fatalf("gz promoted to generation %d, want above %d", rep.Generation, gen)
	}
	s.produce("gz", "orders", 5)
	if m := s.converged("orders"); m != "gz" {
		t.Fatalf("master %s, want gz", m)
	}
}
