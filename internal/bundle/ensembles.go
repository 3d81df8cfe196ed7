package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"metaq/broker/registry"
	"metaq/internal/atomicfile"
	"metaq/internal/siterole"
	"metaq/topology"
)

// With one ZooKeeper ensemble per site (deploy/'s layout), a master whose
// site was cut off may find its own ensemble without the generation
// another site's promotion raised (the new master mirrors it into every
// ensemble it reaches, which did not include this one). Before such a
// master writes any znode or acknowledges a put, it reads the generation
// in the other sites' ensembles it can reach too:
//
//   - at start (supersededMaster), from the ensembles recorded in
//     <dataPath>/replication/ensembles.json, which the running bundle
//     keeps to the ensembles gossip named (gossip is not running yet);
//   - while it runs, through the sessions siteViews holds to them
//     (guardMaster before a registration, watchGeneration before a
//     confirmation lets it acknowledge).

// ensemblesFile is where a bundle records the other sites' ensembles.
func ensemblesFile(dataPath string) string {
	return filepath.Join(dataPath, "replication", "ensembles.json")
}

// recordedEnsemble is one other site's ensemble as recorded.
type recordedEnsemble struct {
	Site    string `json:"site"`
	Connect string `json:"zk"`
	Root    string `json:"root"`
}

// recordEnsembles adds the other sites' ensembles gossip names to those
// file holds (a site gossip names anew replaces its entry; a site gossip
// does not name now keeps its own), writing the file only when that
// changes it, atomically: a reader at start sees the old or the new list.
func recordEnsembles(file string, ens map[string]topology.Ensemble) error {
	old, _ := readEnsembles(file)
	merged := map[string]recordedEnsemble{}
	for _, e := range old {
		merged[e.Site] = e
	}
	for site, e := range ens {
		merged[site] = recordedEnsemble{Site: site, Connect: e.Connect, Root: e.Root}
	}
	list := make([]recordedEnsemble, 0, len(merged))
	for _, e := range merged {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Site < list[j].Site })
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(file); err == nil && string(old) == string(data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("record the other sites' ensembles: %w", err)
	}
	if err := atomicfile.WriteFile(file, data, 0o644); err != nil {
		return fmt.Errorf("record the other sites' ensembles in %s: %w", file, err)
	}
	return nil
}

// readEnsembles reads what recordEnsembles wrote; none when there is no
// file.
func readEnsembles(file string) ([]recordedEnsemble, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []recordedEnsemble
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return list, nil
}

// recordedGenerations reads the brokerId's generation, and the slaveIds
// its slaves use, in each recorded ensemble of another site it reaches
// within the context, with short-lived sessions that register nothing.
// An ensemble it cannot reach is skipped (and logged): the site may be the
// one cut off.
func (b *Bundle) recordedGenerations(ctx context.Context) (gen uint64, from string, used map[int]bool) {
	cfg := b.Config()
	list, err := readEnsembles(ensemblesFile(cfg.System.DataPath))
	if err != nil {
		b.log.Warn("FAILOVER: cannot read the other sites' ensembles recorded by the last run", "err", err)
	}
	used = map[int]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, e := range list {
		if e.Connect == cfg.ZooKeeper.Connect && e.Root == cfg.ZooKeeper.Root {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := registry.New(ctx, registry.Options{Connect: e.Connect, Root: e.Root,
				SessionTimeout: cfg.ZooKeeper.SessionTimeout, ConnectionTimeout: 5 * time.Second,
				Dialer: b.opts.ZooKeeperDialer, Logger: b.log})
			if err != nil {
				b.log.Warn("FAILOVER: cannot reach another site's ZooKeeper to read the generation", "site", e.Site, "zk", e.Connect, "err", err)
				return
			}
			defer r.Close()
			g, err := r.Generation(ctx, cfg.System.BrokerID)
			if err != nil {
				b.log.Warn("FAILOVER: cannot read the generation in another site's ZooKeeper", "site", e.Site, "zk", e.Connect, "err", err)
				return
			}
			kids, _ := r.Children(ctx, r.Paths().BrokerID(cfg.System.BrokerID))
			mu.Lock()
			defer mu.Unlock()
			if g > gen {
				gen, from = g, e.Site
			}
			for id := range usedSlaveIDs(kids) {
				used[id] = true
			}
		}()
	}
	wg.Wait()
	return gen, from, used
}

// otherGenerations is the highest generation of the brokerId in the other
// sites' ensembles this bundle holds a session to (siteViews), and the
// site it was read in; 0 without any.
func (b *Bundle) otherGenerations(ctx context.Context) (uint64, string) {
	tc := compOf[*topologyComponent](b)
	if tc == nil {
		return 0, ""
	}
	tc.mu.Lock()
	v := tc.views
	tc.mu.Unlock()
	if v == nil {
		return 0, ""
	}
	return v.generations(ctx, b.Config().System.BrokerID)
}

// generationReads is a round of reads of the brokerId's generation, by
// site (siterole.ConfirmFacts.Read): own, just read in this site's
// ensemble, for this site and every site whose ensemble is this site's
// (gossip or the record names it), and the generation read in each other
// site's ensemble this bundle holds a session to. Those are read
// concurrently, each for at most readTimeout, and the round ends as
// siterole.ReadRound says for a master holding generation held: with
// [replication] sites listed, once a majority of the listed sites'
// ensembles answered (the reads still out get lateReadGrace, then are
// cancelled), so that stalled ensembles do not hold up a confirmation that
// an answering majority gives.
//
// ownRead false: this site's ensemble could not be read; the round reads
// the others (a newer generation there makes the master step down) and
// has nothing for this site's ensemble (it confirms nothing).
func (b *Bundle) generationReads(ctx context.Context, own uint64, ownRead bool, held uint64, readTimeout time.Duration) map[string]uint64 {
	site := b.Config().Site.Name
	reads := map[string]uint64{}
	if ownRead {
		reads[site] = own
	}
	if b.Registry != nil && ownRead {
		ownKey := ensembleKey(b.Registry.Connect(), b.Registry.Paths().Root)
		for site, k := range b.siteEnsembleKeys() {
			if k == ownKey {
				reads[site] = own
			}
		}
	}
	tc := compOf[*topologyComponent](b)
	if tc == nil {
		return reads
	}
	tc.mu.Lock()
	v := tc.views
	tc.mu.Unlock()
	if v == nil {
		return reads
	}
	facts := siterole.ConfirmFacts{Site: site, Sites: b.Config().Replication.Sites, Generation: held, Read: reads}
	v.readGenerations(ctx, b.Config().System.BrokerID, readTimeout, reads, func(pending int) siterole.RoundState {
		return siterole.ReadRound(facts, pending)
	})
	return reads
}

// generations reads the brokerId's generation in every other site's
// ensemble this bundle holds a session to, and returns the highest and
// the site it was read in.
func (s *siteViews) generations(ctx context.Context, brokerID int) (uint64, string) {
	var best uint64
	var from string
	for site, g := range s.siteGenerations(ctx, brokerID) {
		if g > best || (g == best && g > 0 && site < from) {
			best, from = g, site
		}
	}
	return best, from
}

// siteGenerations reads the brokerId's generation in every other site's
// ensemble this bundle holds a session to, by site, concurrently, each
// for at most 2 s; an ensemble whose read fails is left out.
func (s *siteViews) siteGenerations(ctx context.Context, brokerID int) map[string]uint64 {
	out := map[string]uint64{}
	s.readGenerations(ctx, brokerID, 2*time.Second, out, func(pending int) siterole.RoundState {
		if pending == 0 {
			return siterole.RoundDone
		}
		return siterole.RoundWait
	})
	return out
}

// lateReadGrace is how long a round of generation reads that may decide
// (siterole.RoundGrace) still waits for the reads out.
const lateReadGrace = 100 * time.Millisecond

// readGenerations reads the brokerId's generation in every other site's
// ensemble this bundle holds a session to, concurrently, each for at most
// timeout, into out by site (a read that fails is left out; out is
// written by this goroutine only). After each answer, round says whether
// to wait for the reads still out (pending); the reads it does not wait
// for are cancelled, and every read's goroutine has returned when
// readGenerations does.
func (s *siteViews) readGenerations(ctx context.Context, brokerID int, timeout time.Duration, out map[string]uint64, round func(pending int) siterole.RoundState) {
	s.mu.Lock()
	regs := map[string]*registry.Registry{}
	for site, r := range s.remote {
		if r.reg != nil && r.reg.Connected() {
			regs[site] = r.reg
		}
	}
	s.mu.Unlock()
	if len(regs) == 0 {
		return
	}
	type answer struct {
		site string
		gen  uint64
		err  error
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	answers := make(chan answer, len(regs))
	var wg sync.WaitGroup
	for site, reg := range regs {
		wg.Add(1)
		go func() { // ends with its read: answered, or rctx cancelled below
			defer wg.Done()
			g, err := reg.Generation(rctx, brokerID)
			answers <- answer{site, g, err}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for pending := len(regs); ; {
		switch round(pending) {
		case siterole.RoundDone:
			return
		case siterole.RoundGrace:
			if grace == nil {
				grace = time.NewTimer(lateReadGrace)
				graceC = grace.C
			}
		}
		select {
		case a := <-answers:
			pending--
			if a.err == nil {
				out[a.site] = a.gen
			}
		case <-graceC:
			return
		}
	}
}

// abandonedRaise is who raised generation gen of brokerID and gave its
// promotion up, read in this site's ensemble and in every other site's
// ensemble this bundle holds a session to (with one ensemble per site the
// raiser marks it in its own: registry.AbandonGeneration); ok false when
// none shows gen abandoned.
func (b *Bundle) abandonedRaise(ctx context.Context, brokerID int, gen uint64) (registry.Raiser, bool) {
	regs := map[string]*registry.Registry{}
	if b.Registry != nil {
		regs[b.Config().Site.Name] = b.Registry
	}
	if tc := compOf[*topologyComponent](b); tc != nil {
		tc.mu.Lock()
		v := tc.views
		tc.mu.Unlock()
		if v != nil {
			v.mu.Lock()
			for site, r := range v.remote {
				if r.reg != nil && r.reg.Connected() {
					regs[site] = r.reg
				}
			}
			v.mu.Unlock()
		}
	}
	for _, reg := range regs {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		g, by, err := reg.GenerationRaiser(rctx, brokerID)
		cancel()
		if err == nil && g == gen && by.Abandoned {
			return by, true
		}
	}
	return registry.Raiser{}, false
}
