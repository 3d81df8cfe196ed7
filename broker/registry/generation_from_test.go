package registry

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestRaiseGenerationFromOnlyOnce: of several sites raising the generation
// at once from the one they all followed, exactly one gets the next; the
// others get ErrGenerationMoved (another site was promoted). A site that
// knows a generation above the stored one may still raise it.
func TestRaiseGenerationFromOnlyOnce(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	r := newRegistry(t, testOptions(t, root))
	ctx := context.Background()
	for _, known := range []uint64{0, 1} { // the node missing, then present
		const n = 8
		var (
			wg           sync.WaitGroup
			mu           sync.Mutex
			won, lost    int
			unexpectedEr error
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := r.RaiseGenerationFrom(ctx, 3, known)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && g == known+1:
					won++
				case errors.Is(err, ErrGenerationMoved):
					lost++
				default:
					unexpectedEr = errors.Join(unexpectedEr, err)
				}
			}()
		}
		wg.Wait()
		if won != 1 || lost != n-1 || unexpectedEr != nil {
			t.Fatalf("from %d: %d raised, %d refused, errors %v; want exactly one raise", known, won, lost, unexpectedEr)
		}
		if g, err := r.Generation(ctx, 3); err != nil || g != known+1 {
			t.Fatalf("generation %d %v, want %d", g, err, known+1)
		}
	}
	if g, err := r.RaiseGenerationFrom(ctx, 3, 7); err != nil || g != 8 {
		t.Fatalf("raise from 7 above the stored 2: %d %v, want 8", g, err)
	}
}
