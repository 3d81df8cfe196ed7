package faultsched

import (
	"strings"
	"testing"
	"time"
)

// TestSummaryTimesTheReadPass: a run's line says how many times the
// checker read the sites after the heal, when its last pass began and
// how long that pass took (a slow pass can read a site before a repair
// that lands before the pass ends: SOAK.md finding 33).
func TestSummaryTimesTheReadPass(t *testing.T) {
	r := &Result{Seed: 7, Converged: true, ConvergeTime: 4 * time.Second,
		ReadPasses: 3, LastReadAt: 2500 * time.Millisecond, LastRead: 1200 * time.Millisecond}
	got := r.Summary()
	want := "converged true in 4s, read passes 3 (the last began 2.5s after the heal and took 1.2s)"
	if !strings.Contains(got, want) {
		t.Fatalf("summary %q\nwant it to hold %q", got, want)
	}
}
