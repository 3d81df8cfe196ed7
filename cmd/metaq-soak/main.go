// Command metaq-soak runs seeded fault schedules (internal/faultsched)
// against three metaq-server processes in deploy/'s layout, one after the
// other, until stopped or for -duration, and writes a report: schedules
// run, faults by kind, puts by outcome, violations by kind, convergence
// time percentiles. A failing run prints its seed; -seed replays one.
//
//	metaq-soak -duration 20m -schedule 30s -report SOAK-REPORT.txt
//	metaq-soak -seed 1234 -schedule 30s     (replay one schedule)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"metaq/internal/cli"
	"metaq/internal/faultsched"
)

func main() {
	fs := flag.NewFlagSet("metaq-soak", flag.ContinueOnError)
	var (
		seed     = fs.Uint64("seed", 0, "run this one seed only (replay); 0 runs seeds from -first-seed on")
		first    = fs.Uint64("first-seed", 0, "first seed of a soak (default: drawn at random, printed)")
		schedule = fs.Duration("schedule", envDuration("SOAK_SCHEDULE_SECONDS", 30*time.Second), "length of one schedule (env SOAK_SCHEDULE_SECONDS, in seconds)")
		duration = fs.Duration("duration", envDuration("SOAK_DURATION", 0), "stop starting schedules after this long; 0 runs until interrupted (env SOAK_DURATION, e.g. 20m)")
		kinds    = fs.String("kinds", "all", "fault kinds, a comma list: "+kindList())
		dir      = fs.String("dir", "soak-runs", "where each run writes its files (kept for failing runs)")
		report   = fs.String("report", "", "write the report to this file too")
		repo     = fs.String("repo", ".", "the repository (deploy/ and .ci/ scripts)")
		bin      = fs.String("bin", "", "directory holding metaq-server, configsync and nats-server (default: built into -dir/bin)")
		converge = fs.Duration("converge", 90*time.Second, "how long the sites may take to converge after the heal")
		keep     = fs.Bool("keep", false, "keep the files of clean runs too")
		parallel = fs.Int("parallel", 1, "schedules run at once, each with its own three sites, ZooKeepers and ports")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: metaq-soak [flags]\n\nRuns seeded fault schedules against three metaq-server processes (deploy/'s layout) and checks each.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if len(os.Args) > 1 && cli.IsHelp(os.Args[1]) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return
	}
	if err := cli.Parse(fs, os.Args[1:], false, os.Stdout, os.Stderr); err != nil {
		os.Exit(cli.ExitCode(err))
	}
	if *parallel < 1 {
		fmt.Fprintf(os.Stderr, "metaq-soak: -parallel %d: want at least 1\n", *parallel)
		os.Exit(2)
	}
	ks, err := faultsched.ParseKinds(*kinds)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	out, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	if *bin == "" {
		*bin = filepath.Join(out, "bin")
		if err := faultsched.BuildBin(root, *bin); err != nil {
			log.Fatalf("metaq-soak: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	seeds := func(yield func(uint64) bool) {
		if *seed != 0 {
			yield(*seed)
			return
		}
		s := *first
		if s == 0 {
			s = rand.Uint64N(1 << 31)
		}
		fmt.Printf("metaq-soak: first seed %d\n", s)
		for ; ; s++ {
			if !yield(s) {
				return
			}
		}
	}
	built := commitOf(root) // before the schedules: the work tree may move meanwhile
	tot := faultsched.NewTotals()
	t0 := time.Now()
	var (
		mu     sync.Mutex // tot, failed and the printed lines of one run
		failed bool
		wg     sync.WaitGroup
	)
	next := make(chan uint64)
	for range *parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				res, err := faultsched.Run(ctx, faultsched.Options{Seed: s, Duration: *schedule, Kinds: ks, Bin: *bin, Repo: root,
					Dir: out, ConvergeBound: *converge, Keep: *keep})
				if ctx.Err() != nil {
					return // interrupted: the run is not counted
				}
				mu.Lock()
				tot.Add(res, err)
				if err == nil && res.Failed() {
					failed = true
				}
				printRun(s, res, err)
				mu.Unlock()
			}
		}()
	}
	// Schedules are handed out until the duration is up; those started
	// before it run to their end.
	dispatch, stopDispatch := ctx, context.CancelFunc(func() {})
	if *duration > 0 {
		dispatch, stopDispatch = context.WithTimeout(ctx, *duration)
	}
	for s := range seeds {
		select {
		case next <- s:
			continue
		case <-dispatch.Done():
		}
		break
	}
	stopDispatch()
	close(next)
	wg.Wait()
	tot.Wall = time.Since(t0)
	var b strings.Builder
	fmt.Fprintf(&b, "command: %s %s\n", filepath.Base(os.Args[0]), strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "commit: %s\n", built)
	fmt.Fprintf(&b, "schedule length %v, fault kinds %s, convergence bound %v, %d at once\n\n", *schedule, *kinds, *converge, *parallel)
	tot.Write(&b)
	fmt.Print("\n" + b.String())
	if *report != "" {
		if err := os.WriteFile(*report, []byte(b.String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// printRun prints one run's outcome: ok, FAIL with its first violations, or
// why it could not run.
func printRun(seed uint64, res *faultsched.Result, err error) {
	switch {
	case err != nil:
		fmt.Printf("seed %d: could not run: %v\n", seed, err)
	case res.Failed():
		fmt.Printf("FAIL %s\n", res.Summary())
		for i, v := range res.Violations {
			if i == 5 {
				fmt.Printf("  ... %d more in %s/violations.txt\n", len(res.Violations)-5, res.Dir)
				break
			}
			fmt.Printf("  %s: %s\n", v.Kind, v.Detail)
		}
	default:
		fmt.Printf("ok   %s\n", res.Summary())
	}
}

// commitOf names the commit the soak's binaries were built from, and says
// when the work tree differs from it.
func commitOf(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

func kindList() string {
	var s []string
	for _, k := range faultsched.AllKinds {
		s = append(s, string(k))
	}
	var extra []string
	for _, k := range faultsched.ExtraKinds {
		extra = append(extra, string(k))
	}
	return "all (" + strings.Join(s, ",") + "), and " + strings.Join(extra, ",") + " (each named on its own: all,push,client-cut)"
}

// envDuration reads a duration from the environment: a Go duration, or a
// plain number of seconds.
func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err == nil {
		return time.Duration(n) * time.Second
	}
	log.Fatalf("metaq-soak: %s=%q is neither a duration nor seconds", name, v)
	return 0
}
