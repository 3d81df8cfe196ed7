package store

import (
	"math/rand"
	"slices"
	"sort"
	"testing"
)

// checkSpanList compares every accessor of l with the plain slice model.
func checkSpanList(t *testing.T, l *spanList, model []segSpan, rng *rand.Rand) {
	t.Helper()
	if l.Len() != len(model) {
		t.Fatalf("Len %d, model %d", l.Len(), len(model))
	}
	for i, want := range model {
		if got := l.At(i); got != want {
			t.Fatalf("At(%d) = %+v, want %+v", i, got, want)
		}
	}
	if got := slices.Collect(l.All()); !slices.Equal(got, model) && (len(got) != 0 || len(model) != 0) {
		t.Fatalf("All = %+v, want %+v", got, model)
	}
	if len(model) > 0 && l.Last() != model[len(model)-1] {
		t.Fatalf("Last = %+v, want %+v", l.Last(), model[len(model)-1])
	}
	// Searches at every span's values, just below and just above them,
	// and at random values.
	var probes []segSpan
	for _, sp := range model {
		for d := int64(-1); d <= 1; d++ {
			probes = append(probes, segSpan{seg: sp.seg + uint32(d), off: sp.off + d, ms: sp.ms + d})
		}
	}
	for range 20 {
		probes = append(probes, segSpan{seg: uint32(rng.Intn(1 << 12)), off: rng.Int63n(1 << 30), ms: rng.Int63n(1 << 30)})
	}
	if len(probes) > 300 {
		rng.Shuffle(len(probes), func(i, j int) { probes[i], probes[j] = probes[j], probes[i] })
		probes = probes[:300]
	}
	for _, x := range probes {
		wantOff := sort.Search(len(model), func(i int) bool { return model[i].off > x.off }) - 1
		if got := l.IndexOff(x.off); got != wantOff {
			t.Fatalf("IndexOff(%d) = %d, want %d (%d spans)", x.off, got, wantOff, len(model))
		}
		wantMs := sort.Search(len(model), func(i int) bool { return model[i].ms >= x.ms })
		if got := l.Search(func(sp segSpan) bool { return sp.ms >= x.ms }); got != wantMs {
			t.Fatalf("search by time %d = %d, want %d (%d spans)", x.ms, got, wantMs, len(model))
		}
		wantSeg := sort.Search(len(model), func(i int) bool { return model[i].seg >= x.seg })
		if wantSeg == len(model) || model[wantSeg].seg != x.seg {
			wantSeg = -1
		}
		if got := l.IndexSeg(x.seg); got != wantSeg {
			t.Fatalf("IndexSeg(%d) = %d, want %d (%d spans)", x.seg, got, wantSeg, len(model))
		}
	}
}

// nextSpan returns a span after sp as the store makes them: a later
// segment, a higher offset, a time not earlier; steps of every size.
func nextSpan(rng *rand.Rand, sp segSpan, first bool) segSpan {
	step := func(max int64) int64 {
		switch rng.Intn(4) {
		case 0:
			return 1 + rng.Int63n(4)
		case 1:
			return 1 + rng.Int63n(1<<14)
		case 2:
			return 1 + rng.Int63n(max)
		}
		return 1 + rng.Int63n(1<<7)
	}
	if first {
		return segSpan{seg: uint32(1 + rng.Intn(100)), off: rng.Int63n(1 << 40), ms: 1_700_000_000_000 + rng.Int63n(1<<30)}
	}
	return segSpan{seg: sp.seg + uint32(step(1<<8)), off: sp.off + step(1<<40), ms: sp.ms + step(1<<30) - 1}
}

// A spanList behaves exactly as a plain slice of spans under random
// appends, drops from the front (retention) and cuts (fences), across
// restart points and with the skipped spans of a partly dropped group.
func TestSpanListAgainstSlice(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := range 30 {
		var l spanList
		var model []segSpan
		var last segSpan
		for op := range 80 {
			switch r := rng.Intn(10); {
			case r < 7:
				n := 1 + rng.Intn(3*spanRestartEvery)
				if round%3 == 0 {
					n = 1
				}
				for range n {
					last = nextSpan(rng, last, len(model) == 0 && op == 0)
					l.Append(last)
					model = append(model, last)
				}
			case r < 9 && len(model) > 0:
				k := rng.Intn(len(model) + 1)
				if rng.Intn(3) == 0 {
					k = rng.Intn(min(len(model), spanRestartEvery) + 1)
				}
				l.DropFront(k)
				model = model[k:]
			case len(model) > 0:
				n := rng.Intn(len(model) + 1)
				l.Cut(n)
				model = model[:n]
			}
			if len(model) == 0 {
				last = segSpan{}
			}
			checkSpanList(t, &l, model, rng)
		}
	}
}

// Spans that do not ascend (a damaged checkpoint made it past its checks)
// still round-trip: the deltas wrap.
func TestSpanListWrapsDeltas(t *testing.T) {
	var l spanList
	model := []segSpan{{seg: 5, off: 1 << 62, ms: 1 << 40}, {seg: 1, off: -3, ms: -7}, {seg: ^uint32(0), off: 0, ms: 1 << 62}}
	for _, sp := range model {
		l.Append(sp)
	}
	if got := slices.Collect(l.All()); !slices.Equal(got, model) {
		t.Fatalf("All = %+v, want %+v", got, model)
	}
}

// The memory the list holds per span: a partition's spans over 770
// sealed segments (a week of 1 GiB segments), with the offset and time
// steps of a busy partition among 10,000 (about 100 KB and a few minutes
// per segment), cost under 10 bytes each, slack and restart points
// included, against 24-48 for a slice of pointer spans.
func TestSpanListCompact(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var l spanList
	sp := segSpan{seg: 1, off: 0, ms: 1_700_000_000_000}
	const n = 770
	for range n {
		l.Append(sp)
		sp = segSpan{seg: sp.seg + 1, off: sp.off + 90_000 + rng.Int63n(20_000), ms: sp.ms + 700_000 + rng.Int63n(200_000)}
	}
	t.Logf("%d spans: %d bytes", n, l.memBytes())
	if per := float64(l.memBytes()) / n; per > 10 {
		t.Fatalf("%.1f bytes per span (%d bytes for %d spans)", per, l.memBytes(), n)
	}
	// Retention then drops the oldest segment's span every roll: what is
	// dropped is freed by the copies, so the bytes stay bounded.
	for range 5 * n {
		l.DropFront(1)
		l.Append(sp)
		sp = segSpan{seg: sp.seg + 1, off: sp.off + 100_000, ms: sp.ms + 800_000}
	}
	if per := float64(l.memBytes()) / float64(l.Len()); per > 12 {
		t.Fatalf("after rolling retention: %.1f bytes per span (%d bytes for %d spans)", per, l.memBytes(), l.Len())
	}
}

// FuzzSpanList drives a spanList and the slice model with the operations
// a fuzzed byte string spells.
func FuzzSpanList(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 2, 0, 3, 0})
	f.Add([]byte{0, 40, 1, 3, 0, 200, 2, 17, 0, 9, 1, 33, 2, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		rng := rand.New(rand.NewSource(int64(len(ops))))
		var l spanList
		var model []segSpan
		var last segSpan
		for i := 0; i+1 < len(ops); i += 2 {
			arg := int(ops[i+1])
			switch ops[i] % 3 {
			case 0:
				for range 1 + arg%70 {
					last = nextSpan(rng, last, len(model) == 0)
					l.Append(last)
					model = append(model, last)
				}
			case 1:
				k := min(arg, len(model))
				l.DropFront(k)
				model = model[k:]
			case 2:
				n := min(arg, len(model))
				l.Cut(n)
				model = model[:n]
			}
			checkSpanList(t, &l, model, rng)
		}
	})
}

// indexMemory counts the spans of s, the bytes their lists hold, and the
// block references of the active segment.
func indexMemory(s *Store) (spans, spanBytes, blocks int) {
	for _, p := range s.partitionList() {
		p.mu.RLock()
		spans += p.spans.Len()
		spanBytes += p.spans.memBytes()
		blocks += len(p.blocks)
		p.mu.RUnlock()
	}
	return spans, spanBytes, blocks
}
