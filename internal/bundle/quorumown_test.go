package bundle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestPerSiteZKQuorumRaiseWritesNoOtherEnsembleWithoutItsOwn: soak seed
// 942159. gz, a slave site, raised the generation for an automatic
// promotion while its own ensemble could not be read and hf's was out of
// its reach: the raise won in bj's ensemble alone, lost the majority and
// was given back, but bj, the master, had read the number in its own
// ensemble and stepped down for it. A quorum raise must try its own
// ensemble first and write no other site's unless it won there.
func TestPerSiteZKQuorumRaiseWritesNoOtherEnsembleWithoutItsOwn(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true})
	bj, gz := s.site("bj"), s.site("gz")
	brokerID := bj.Config().System.BrokerID
	known := gz.Role().Generation
	s.reachesAllEnsembles("gz")
	regs := s.ensembleClients()

	// gz reaches bj's ensemble and its own, not hf's.
	s.cutEnsembleFrom("hf", "gz")
	var total int
	var ens []raiseEnsemble
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		total, ens = gz.raiseEnsembles()
		var names []string
		for _, e := range ens {
			names = append(names, e.site)
		}
		if total != 3 || len(ens) != 2 {
			return fmt.Errorf("gz's raise would try %v of %d ensembles, want gz's and bj's of 3", names, total)
		}
		return nil
	})

	// Watch bj's ensemble for any number above the one it holds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu      sync.Mutex
		highest uint64
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watchCtx.Err() == nil {
			if g, err := regs["bj"].Generation(watchCtx, brokerID); err == nil {
				mu.Lock()
				highest = max(highest, g)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// gz's own ensemble stops answering it: its raise cannot win there.
	s.stallEnsembleFrom("gz", "gz")
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	gen, err := gz.quorumRaise(rctx, total, ens, known, known)
	rcancel()
	s.unstallEnsembles()
	stopWatch()
	wg.Wait()
	if err == nil {
		t.Fatalf("gz raised generation %d without its own ensemble", gen)
	}
	t.Logf("gz's raise: %v", err)
	if !errors.Is(err, registry.ErrGenerationMoved) {
		t.Errorf("gz's raise failed with %v, want ErrGenerationMoved (a lost raise)", err)
	}
	mu.Lock()
	seen := highest
	mu.Unlock()
	if seen != known {
		t.Errorf("bj's ensemble held generation %d during gz's raise, want only the %d it held", seen, known)
	}
	if g, err := regs["bj"].Generation(ctx, brokerID); err != nil || g != known {
		t.Errorf("bj's ensemble holds generation %d (%v) after gz's raise, want %d", g, err, known)
	}
	// bj never stepped down: it is master of the generation it held.
	time.Sleep(500 * time.Millisecond)
	if r := bj.Role(); !r.IsMaster() || r.SteppedDown || r.Generation != known {
		t.Fatalf("bj is %v after gz's raise, want master of generation %d", r, known)
	}
	if r := bj.Broker.WriteRefusal(); r != nil {
		t.Fatalf("bj refuses puts after gz's raise: %s", r.Reason)
	}
}

// TestDescribeLostRaise: a lost quorum raise names a site as having raised
// first only where the compare-and-set lost to its number or a newer one.
// Soak seed 942159 logged "site bj raised generation 7 first" for gz's
// raise of 7, whose own ensemble could not be read and held bj's 5.
func TestDescribeLostRaise(t *testing.T) {
	t.Parallel()
	closed := errors.New("zk: connection closed")
	moved := fmt.Errorf("%w: /meta/brokers/ids/1/generation is 8, not the 5 this site knows", registry.ErrGenerationMoved)
	movedLow := fmt.Errorf("%w: /meta/brokers/ids/1/generation is 6, not the 5 this site knows", registry.ErrGenerationMoved)
	for _, tc := range []struct {
		name    string
		res     []raiseResult
		untried int
		want    []string
		notWant []string
	}{
		{name: "own ensemble unreadable (942159)",
			res:     []raiseResult{{raiseEnsemble: raiseEnsemble{site: "gz"}, err: closed, held: 5, heldBy: registry.Raiser{Generation: 5, Site: "bj"}}},
			untried: 1,
			want:    []string{"gz's ensemble (not written: zk: connection closed; it holds generation 5 raised by bj)", "1 other ensembles not tried"},
			notWant: []string{"raised generation 7"}},
		{name: "lost to a newer number",
			res: []raiseResult{{raiseEnsemble: raiseEnsemble{site: "gz"}, won: true},
				{raiseEnsemble: raiseEnsemble{site: "hf"}, err: moved, held: 8, heldBy: registry.Raiser{Generation: 8, Site: "hf"}},
				{raiseEnsemble: raiseEnsemble{site: "bj"}, err: closed}},
			want: []string{"site hf raised generation 7 or a newer one first", "hf's ensemble (generation 8 raised by hf", "bj's ensemble (not written"}},
		{name: "lost to a lower number",
			res: []raiseResult{{raiseEnsemble: raiseEnsemble{site: "gz"}, won: true},
				{raiseEnsemble: raiseEnsemble{site: "hf"}, err: movedLow, held: 6, heldBy: registry.Raiser{Generation: 6, Site: "bj"}}},
			want:    []string{"hf's ensemble (generation 6 raised by bj"},
			notWant: []string{"first"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := describeLostRaise(7, "won the generation in 1 of 3 ZooKeeper ensembles (2 reached); 2 make a majority", tc.res, tc.untried)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("%q has %q", msg, w)
				}
			}
		})
	}
}
