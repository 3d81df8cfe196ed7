package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"metaq/internal/clock"
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
		// A check reads every span and searches at ~300 values: bound the
		// work of one input (32 ops, 300 spans, ten restart groups, a check
		// after every eighth op and at the end), or the fuzzer's longer
		// inputs take milliseconds each and CI's run takes many minutes.
		if len(ops) > 64 {
			ops = ops[:64]
		}
		rng := rand.New(rand.NewSource(int64(len(ops))))
		var l spanList
		var model []segSpan
		var last segSpan
		for i := 0; i+1 < len(ops); i += 2 {
			arg := int(ops[i+1])
			switch ops[i] % 3 {
			case 0:
				for range min(1+arg%70, 300-len(model)) {
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
			if i%16 == 14 {
				checkSpanList(t, &l, model, rng)
			}
		}
		checkSpanList(t, &l, model, rng)
	})
}

// indexMemory counts the spans of s, the bytes their lists hold, and the
// block references of the active segment.
func indexMemory(s *Store) (spans, spanBytes, blocks int) {
	for _, p := range s.partitionList() {
		p.mu.Lock()
		spans += p.spans.Len()
		spanBytes += p.spans.memBytes()
		blocks += len(p.blocks)
		p.mu.Unlock()
	}
	return spans, spanBytes, blocks
}

// A partition with more than a hundred sealed segments (so its spans fill
// several restart groups) serves every record and every OffsetForTime
// answer, after retention dropped spans into the middle of a group, after
// a cut back into a sealed segment, and after a restart from the format-4
// checkpoint.
func TestManySpansAcrossRestartPoints(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := Options{Dir: dir, SegmentBytes: 4096, blockEntries: 4, Clock: fc}
	s := openT(t, opts)
	s.SetPolicy("m", Policy{MaxAge: time.Hour})
	type rec struct {
		off int64
		at  time.Time
	}
	want := map[int][]byte{}
	var recs []rec // partition 0's records, one chunk each
	spans := func(s *Store) int {
		p := s.lookup("m", 0)
		if p == nil {
			return 0
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.spans.Len()
	}
	for i := 0; spans(s) < 4*spanRestartEvery+5; i++ {
		fc.Advance(time.Second)
		// m-0, and between its chunks another topic's, kept forever.
		for p, topic := range []string{"m", "other"} {
			body := fmt.Sprintf("%s-%d-%s", topic, i, strings.Repeat("s", 150))
			a := mustAppend(t, s, topic, 0, body)
			want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
			if p == 0 {
				recs = append(recs, rec{a[0].Offset, fc.Now()})
			}
		}
	}
	check := func(s *Store, from int) {
		t.Helper()
		w := map[int][]byte{0: want[0][recs[from].off:], 1: want[1]}
		p0 := s.lookup("m", 0)
		p0.mu.Lock()
		min := p0.min
		p0.mu.Unlock()
		if min != recs[from].off {
			t.Fatalf("m-0 starts at %d, want %d", min, recs[from].off)
		}
		for off := 0; off < len(w[0]); {
			n := RecordHeaderLen + int(binary.BigEndian.Uint32(w[0][off:]))
			got, err := s.Read("m", 0, min+int64(off), n)
			if err != nil || !bytes.Equal(got, w[0][off:off+n]) {
				t.Fatalf("Read m-0 at %d: %d bytes, %v", min+int64(off), len(got), err)
			}
			off += n
		}
		checkParts(t, s, "other", map[int][]byte{0: w[1]})
		for _, r := range recs[from:] {
			if got, err := s.OffsetForTime("m", 0, r.at.Add(-time.Millisecond)); err != nil || got != r.off {
				t.Fatalf("OffsetForTime m-0 just before %v = %d, %v; want %d", r.at, got, err, r.off)
			}
		}
	}
	check(s, 0)
	// Retention to a record whose span is in the middle of the second
	// group: the first group goes, the second keeps skipped spans.
	p0 := s.lookup("m", 0)
	var cut int
	for cut = range recs {
		p0.mu.Lock()
		i := p0.spanIndexLocked(recs[cut].off)
		p0.mu.Unlock()
		if i >= spanRestartEvery+spanRestartEvery/2 {
			break
		}
	}
	if _, err := s.Retain("m", recs[cut].at.Add(time.Hour-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	p0.mu.Lock()
	skip := p0.spans.skip
	p0.mu.Unlock()
	if skip == 0 {
		t.Fatal("retention dropped whole groups only; want a partly dropped one")
	}
	check(s, cut)
	// A cut back into a sealed segment two groups further on, then more
	// records after it.
	back := cut + (len(recs)-cut)*2/3
	if err := s.TruncatePartition("m", 0, recs[back].off); err != nil {
		t.Fatal(err)
	}
	want[0] = want[0][:recs[back].off]
	recs = recs[:back]
	for i := 0; i < 40; i++ {
		fc.Advance(time.Second)
		body := fmt.Sprintf("after-%d", i)
		a := mustAppend(t, s, "m", 0, body)
		want[0] = AppendRecord(want[0], a[0].ID, 0, []byte(body))
		recs = append(recs, rec{a[0].Offset, fc.Now()})
	}
	check(s, cut)
	n := spans(s)
	s.Close()
	cfs := &countFS{}
	opts.FS = cfs
	s = openT(t, opts)
	if got := cfs.logRead.Load(); got != 0 {
		t.Fatalf("restart read %d log bytes", got)
	}
	if spans(s) != n {
		t.Fatalf("%d spans after the restart, %d before", spans(s), n)
	}
	check(s, cut)
}
