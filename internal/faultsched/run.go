package faultsched

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"metaq/internal/clock"
)

// Options configure one run of a schedule.
type Options struct {
	Seed     uint64
	Duration time.Duration // of the schedule (faults and workload)
	Kinds    []Kind        // default AllKinds
	Bin      string        // holds metaq-server and configsync
	Repo     string        // the repository: deploy/ and .ci/ scripts
	Dir      string        // the run writes under Dir/seed-<seed>
	// ConvergeBound is how long the sites may take, after the heal, to
	// serve identical bytes; default 60 s.
	ConvergeBound time.Duration
	// MasterBound is how long, once the sites have converged (or the
	// convergence bound passed), the checker asks the sites' status for a
	// master before it reports no-master; default 30 s.
	MasterBound time.Duration
	// Keep keeps the run's directory when it found no violation.
	Keep bool
	// Every is the pause between two puts of one producer (default 20 ms).
	Every time.Duration
}

// Result is what one run found.
type Result struct {
	Seed       uint64         `json:"seed"`
	Dir        string         `json:"dir"`
	Schedule   string         `json:"schedule"`
	Violations []Violation    `json:"violations"`
	Puts       map[string]int `json:"puts"`   // by outcome
	Faults     map[Kind]int   `json:"faults"` // injected, by kind (heals not counted)
	// ForcedLoss counts acknowledged synchronous puts lost to a forced
	// promotion (saved aside), which are not violations.
	ForcedLoss int  `json:"forcedLoss"`
	Converged  bool `json:"converged"`
	// ConvergeTime is from the heal of the last fault to identical bytes
	// at every site.
	ConvergeTime time.Duration `json:"convergeTime"`
	// ReadPasses counts the checker's reads of every site's partitions
	// after the heal (one pass reads the sites one after the other; passes
	// repeat until the sites converge or the bound passes). LastReadAt is
	// when the last pass began, from the heal, and LastRead how long it
	// took: under load a pass takes seconds, and a site read early in the
	// last pass may have changed before it ended.
	ReadPasses int           `json:"readPasses"`
	LastReadAt time.Duration `json:"lastReadAt"`
	LastRead   time.Duration `json:"lastRead"`
	Took       time.Duration `json:"took"`
}

// Failed reports whether the run found a violation.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Summary is one line about the run, with its seed.
func (r *Result) Summary() string {
	kinds := map[string]int{}
	for _, v := range r.Violations {
		kinds[v.Kind]++
	}
	return fmt.Sprintf("seed %d: puts %v, faults %v, converged %t in %v, read passes %d (the last began %v after the heal and took %v), sync acks lost to promote -force %d, violations %v (took %v, files %s)",
		r.Seed, r.Puts, r.Faults, r.Converged, r.ConvergeTime.Round(time.Millisecond), r.ReadPasses, r.LastReadAt.Round(time.Millisecond),
		r.LastRead.Round(time.Millisecond), r.ForcedLoss, kinds, r.Took.Round(time.Second), r.Dir)
}

// Run sets up the three sites, runs the seeded schedule with the workload,
// heals every fault, waits for the sites to converge and checks. An error
// means the run could not be carried out (setup); what the checker found
// is in the Result. The history (history.jsonl), the fault log
// (faults.log), the schedule and the violations are written under the
// run's directory, which is removed after a clean run unless Keep is set.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.ConvergeBound == 0 {
		o.ConvergeBound = 60 * time.Second
	}
	if o.MasterBound == 0 {
		o.MasterBound = defaultMasterBound
	}
	t0 := time.Now()
	dir := filepath.Join(o.Dir, fmt.Sprintf("seed-%d", o.Seed))
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("faultsched: %w", err)
	}
	sched := NewSchedule(o.Seed, o.Duration, o.Kinds)
	res := &Result{Seed: o.Seed, Dir: dir, Schedule: sched.String(), Puts: map[string]int{}, Faults: map[Kind]int{}}
	if err := os.WriteFile(filepath.Join(dir, "schedule.txt"), []byte(res.Schedule), 0o644); err != nil {
		return nil, fmt.Errorf("faultsched: %w", err)
	}
	l, err := WriteLayout(ctx, o.Repo, o.Bin, filepath.Join(dir, "sites"), LayoutOptions{ConfigSync: slices.Contains(sched.Kinds, KindPush)})
	if err != nil {
		return res, err
	}
	c := NewCluster(l, o.Bin, o.Repo)
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	flog, err := os.Create(filepath.Join(dir, "faults.log"))
	if err != nil {
		return res, fmt.Errorf("faultsched: %w", err)
	}
	defer flog.Close()
	start := time.Now()
	fmt.Fprintf(flog, "%s", res.Schedule)
	fmt.Fprintf(flog, "---- applied (times since the start of the schedule)\n")
	n := &Nemesis{C: c, Start: start, Log: flog}
	w := &Workload{L: l, Start: start, Seed: o.Seed, Every: o.Every}
	wctx, stopWorkload := context.WithCancel(ctx)
	w.Run(wctx)
	n.Run(ctx, sched)
	n.HealAll(ctx)
	healed := time.Now()
	// The producers go on for a moment after the heal, then stop.
	clock.Sleep(ctx, time.Second)
	stopWorkload()
	w.Wait()

	f := &Final{}
	for _, s := range Sites {
		if err := c.WaitUp(ctx, s, 30*time.Second); err != nil {
			// Its goroutines' stacks, taken now, say where it waits (it
			// may answer again later, as hf did in seed 943055, when
			// the later look that dumps them with SIGQUIT finds nothing).
			msg := err.Error()
			if log, serr := c.Stacks(s); serr == nil {
				msg += "; its goroutines' stacks (SIGUSR1, taken then) are in " + log
			}
			f.NoAnswer = append(f.NoAnswer, msg)
		}
	}
	deadline := healed.Add(o.ConvergeBound)
	for {
		began := time.Now()
		runs, errs, holes := readSites(l)
		res.ReadPasses++
		res.LastReadAt, res.LastRead = began.Sub(healed), time.Since(began)
		f.Runs, f.ReadErrs, f.Holes = runs, errs, holes
		f.Diff = sameLogs(runs)
		if len(errs) == 0 && len(holes) == 0 && f.Diff == "" {
			f.Converged, f.ConvergeT = true, time.Since(healed)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if f.Diff == "" {
				f.Diff = fmt.Sprintf("sites could not be read: %v", errs)
			}
			break
		}
		clock.Sleep(ctx, 500*time.Millisecond)
	}
	if l.ConfigSync {
		// Every site runs the last version published: those down or cut
		// off during a push caught up.
		for {
			ok, out := c.ConfigConverged(ctx)
			if ok {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				res.Violations = append(res.Violations, Violation{Kind: VConfigNotConverged,
					Detail: fmt.Sprintf("%v after the heal the sites do not all run the desired version:\n%s", o.ConvergeBound, out)})
				break
			}
			clock.Sleep(ctx, 500*time.Millisecond)
		}
	}
	masters, statusErrs := c.AwaitMaster(ctx, o.MasterBound, 500*time.Millisecond)
	f.StatusErrs = statusErrs
	if len(masters) > 0 {
		f.Master = masters[0]
	}
	// A site that answers neither /status nor reads after the heal is
	// blocked somewhere: its goroutines' stacks, in its log, say where.
	for _, s := range Sites {
		if f.StatusErrs[s] == "" && f.ReadErrs[s] == "" || !c.Running(s) {
			continue
		}
		if log, err := c.Dump(s); err == nil {
			res.Violations = append(res.Violations, Violation{Kind: VStacksDumped,
				Detail: fmt.Sprintf("%s did not answer after the heal: its goroutines are in %s", s, log)})
		}
	}
	f.Aside = readAside(l)
	f.Exits = c.Exits()
	ops := w.Ops()
	faults := n.Records()
	vs, forced := Check(ops, faults, f)
	res.Violations, res.ForcedLoss = append(vs, res.Violations...), forced
	if len(masters) > 1 {
		res.Violations = append(res.Violations, Violation{Kind: VTwoMasters, Detail: fmt.Sprintf("after the heal %v all report mode master", masters)})
	}
	res.Converged, res.ConvergeTime = f.Converged, f.ConvergeT
	for _, op := range ops {
		res.Puts[op.Outcome]++
	}
	for _, r := range faults {
		if !r.Heal && r.Kind != "" {
			res.Faults[r.Kind]++
		}
	}
	res.Took = time.Since(t0)
	if err := writeRun(dir, ops, res); err != nil {
		return res, err
	}
	c.mu.Lock()
	c.KeepData = res.Failed() || o.Keep
	c.mu.Unlock()
	if err := c.Close(); err != nil {
		res.Violations = append(res.Violations, Violation{Kind: "teardown", Detail: err.Error()})
	}
	if !res.Failed() && !o.Keep {
		os.RemoveAll(dir)
	}
	return res, nil
}

// defaultMasterBound is Options.MasterBound's default: a forced promotion
// still being finished retries at most 10 s apart, and an automatic
// failover waits a few session timeouts (4 s in the harness) first.
const defaultMasterBound = 30 * time.Second

// AwaitMaster asks every site's /status, every interval, until at least
// one reports mode master or bound has passed, and returns the sites that
// did in the last round (more than one is the two-masters violation) and
// the errors of the sites whose status could not be read in it. Right
// after the heal a master may still be on its way (a promotion being
// finished, an automatic failover's wait): one look would report a
// deployment without a master that has one a moment later.
func (c *Cluster) AwaitMaster(ctx context.Context, bound, interval time.Duration) ([]string, map[string]string) {
	deadline := time.Now().Add(bound)
	for {
		var masters []string
		errs := map[string]string{}
		for _, s := range Sites {
			st, err := c.Status(ctx, s)
			switch {
			case err != nil:
				errs[s] = err.Error()
			case st.Mode == "master":
				masters = append(masters, s)
			}
		}
		if len(masters) > 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return masters, errs
		}
		clock.Sleep(ctx, interval)
	}
}

func writeRun(dir string, ops []Op, res *Result) error {
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return fmt.Errorf("faultsched: %w", err)
	}
	enc := json.NewEncoder(hf)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			hf.Close()
			return fmt.Errorf("faultsched: history: %w", err)
		}
	}
	if err := hf.Close(); err != nil {
		return fmt.Errorf("faultsched: history: %w", err)
	}
	var b strings.Builder
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "%s: %s\n", v.Kind, v.Detail)
	}
	if err := os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("faultsched: %w", err)
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(filepath.Join(dir, "result.json"), js, 0o644)
}
