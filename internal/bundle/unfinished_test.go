package bundle

import (
	"testing"
	"time"
)

// TestUnfinishedSince: the time a generation has been seen with no master
// counts from when it became the newest one seen masterless, and starts
// again at a newer generation or after a master of it was seen.
func TestUnfinishedSince(t *testing.T) {
	t.Parallel()
	var u unfinishedSince
	t0 := time.Unix(1000, 0)
	steps := []struct {
		gen        uint64
		masterless bool
		at         time.Duration
		want       time.Duration
	}{
		{6, true, 0, 0},
		{6, true, 4 * time.Second, 4 * time.Second},
		{8, true, 5 * time.Second, 0}, // a newer one: from now
		{8, true, 15 * time.Second, 10 * time.Second},
		{8, false, 16 * time.Second, 0}, // its master appeared
		{8, true, 17 * time.Second, 0},  // and went again
		{8, true, 18 * time.Second, time.Second},
	}
	for i, s := range steps {
		if got := u.observe(s.gen, s.masterless, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d (%+v): seen for %v, want %v", i, s, got, s.want)
		}
	}
}
