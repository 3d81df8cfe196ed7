package broker

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeyTable: the table routePuts groups a read's puts with finds every
// key added to it and no other, as slices.Index would, including past its
// size, where it falls back to a scan.
func TestKeyTable(t *testing.T) {
	var tab keyTable
	var keys []queueKey
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 600; i++ {
		k := queueKey{topic: []string{"a", "b"}[r.IntN(2)], partition: int32(r.IntN(700)) - 1, sync: r.IntN(5) == 0}
		got, want := tab.find(keys, k), slices.Index(keys, k)
		if got != want {
			t.Fatalf("key %d %+v: found at %d, is at %d", i, k, got, want)
		}
		if got < 0 {
			keys = append(keys, k)
			tab.add(k, len(keys)-1)
		}
	}
	if len(keys) <= keySlots/2 {
		t.Fatalf("only %d keys: the scan past the table's size was not reached", len(keys))
	}
}
