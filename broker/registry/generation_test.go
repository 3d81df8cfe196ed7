package registry

import (
	"context"
	"sync"
	"testing"
)

// TestRaiseGenerationIsACompareAndSet: sites raising the generation at the
// same time each get a different number, all above what they knew.
func TestRaiseGenerationIsACompareAndSet(t *testing.T) {
	root := testRoot(t)
	opts := testOptions(t, root)
	cleanupRoot(t, root)
	r := newRegistry(t, opts)
	ctx := context.Background()
	if g, err := r.Generation(ctx, 3); err != nil || g != 0 {
		t.Fatalf("generation before any raise = %d, %v", g, err)
	}
	if g, err := r.RaiseGeneration(ctx, 3, 4); err != nil || g != 5 {
		t.Fatalf("first raise = %d, %v; want 5", g, err)
	}
	const n = 8
	got := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := r.RaiseGeneration(ctx, 3, 1)
			if err != nil {
				t.Error(err)
			}
			got[i] = g
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for _, g := range got {
		if g <= 5 || seen[g] {
			t.Fatalf("raises returned %v: want distinct generations above 5", got)
		}
		seen[g] = true
	}
	if g, _ := r.Generation(ctx, 3); g != 5+n {
		t.Fatalf("generation = %d, want %d", g, 5+n)
	}
}
