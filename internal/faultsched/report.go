package faultsched

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"time"
)

// Totals add up many runs for a soak report.
type Totals struct {
	Schedules  int
	SetupErrs  []string
	Faults     map[Kind]int
	Puts       map[string]int
	Violations map[string]int
	Converge   []time.Duration
	ForcedLoss int
	Failed     []string // one line per failing run, with its seed
	Wall       time.Duration
}

// NewTotals returns empty totals.
func NewTotals() *Totals {
	return &Totals{Faults: map[Kind]int{}, Puts: map[string]int{}, Violations: map[string]int{}}
}

// Add counts one run (res may be partial when err is set).
func (t *Totals) Add(res *Result, err error) {
	if err != nil {
		seed := uint64(0)
		if res != nil {
			seed = res.Seed
		}
		t.SetupErrs = append(t.SetupErrs, fmt.Sprintf("seed %d: %v", seed, err))
		return
	}
	t.Schedules++
	for k, n := range res.Faults {
		t.Faults[k] += n
	}
	for k, n := range res.Puts {
		t.Puts[k] += n
	}
	for _, v := range res.Violations {
		t.Violations[v.Kind]++
	}
	t.ForcedLoss += res.ForcedLoss
	if res.Converged {
		t.Converge = append(t.Converge, res.ConvergeTime)
	}
	if res.Failed() {
		t.Failed = append(t.Failed, res.Summary())
	}
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// Write prints the report.
func (t *Totals) Write(w io.Writer) {
	fmt.Fprintf(w, "schedules run: %d (setup failures: %d), wall time %v\n", t.Schedules, len(t.SetupErrs), t.Wall.Round(time.Second))
	fmt.Fprintf(w, "\nfaults injected, by kind:\n")
	total := 0
	for _, k := range sortedKeys(t.Faults) {
		fmt.Fprintf(w, "  %-14s %6d\n", k, t.Faults[k])
		total += t.Faults[k]
	}
	fmt.Fprintf(w, "  %-14s %6d\n", "total", total)
	fmt.Fprintf(w, "\nputs, by outcome:\n")
	for _, k := range sortedKeys(t.Puts) {
		fmt.Fprintf(w, "  %-14s %8d\n", k, t.Puts[k])
	}
	fmt.Fprintf(w, "  acknowledged synchronous puts lost to a promote -force (saved aside; not violations): %d\n", t.ForcedLoss)
	fmt.Fprintf(w, "\nviolations, by kind:\n")
	if len(t.Violations) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for _, k := range sortedKeys(t.Violations) {
		fmt.Fprintf(w, "  %-22s %6d\n", k, t.Violations[k])
	}
	fmt.Fprintf(w, "\nconvergence after the last fault's heal (%d converged runs): p50 %v, p90 %v, p99 %v, max %v\n",
		len(t.Converge), pct(t.Converge, 0.5).Round(time.Millisecond), pct(t.Converge, 0.9).Round(time.Millisecond),
		pct(t.Converge, 0.99).Round(time.Millisecond), pct(t.Converge, 1).Round(time.Millisecond))
	if len(t.Failed) > 0 {
		fmt.Fprintf(w, "\nfailing runs:\n")
		for _, f := range t.Failed {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if len(t.SetupErrs) > 0 {
		fmt.Fprintf(w, "\nsetup failures:\n")
		for _, e := range t.SetupErrs {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
