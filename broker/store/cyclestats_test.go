package store

import (
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// With the debug switch set, group commits are counted with their parts
// and logged every interval; Close stops the logger.
func TestCycleStatsCountGroupCommits(t *testing.T) {
	t.Setenv(cycleStatsEnv, "20ms")
	var out testutil.SyncBuffer
	s := openT(t, Options{Logger: out.Logger()})
	if s.cs == nil {
		t.Fatalf("%s set, but no cycle stats", cycleStatsEnv)
	}
	for i := 0; i < 20; i++ {
		mustAppend(t, s, "t", i%3, "a", "b")
	}
	if n := s.cs.commits.Load(); n == 0 || s.cs.taken.Load() < 20 || s.cs.syncNs.Load() <= 0 {
		t.Fatalf("commits %d, requests %d, fdatasync ns %d after 20 synced appends", n, s.cs.taken.Load(), s.cs.syncNs.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "STORE: cycle stats") {
		if time.Now().After(deadline) {
			t.Fatalf("no cycle stats logged within 10 s; log:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Off (the default) no clock is read for the stats.
func TestCycleStatsOffByDefault(t *testing.T) {
	t.Setenv(cycleStatsEnv, "")
	s := openT(t, Options{})
	if s.cs != nil || !s.cycleNow().IsZero() {
		t.Fatalf("cycle stats on without %s", cycleStatsEnv)
	}
	mustAppend(t, s, "t", 0, "a")
}

func TestHistDelta(t *testing.T) {
	a := hist{counts: []uint64{0, 0, 0, 0}, buckets: []float64{0, 1, 2, 3, 4}}
	b := hist{counts: []uint64{10, 80, 9, 1}, buckets: a.buckets}
	p50, p99, n := histDelta(a, b)
	if p50 != 2 || p99 != 4 || n != 100 {
		t.Fatalf("p50 %v p99 %v n %d, want 2 4 100", p50, p99, n)
	}
	if _, _, n := histDelta(b, b); n != 0 {
		t.Fatalf("no change counted %d", n)
	}
}
