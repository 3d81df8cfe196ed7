package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestSealFailedAtRollIsSealedBeforeTheNext is seed 940004 of the soak: the same failed sealing as
// TestFailedSealIsRetriedAtTheNextRoll, checked as the partitions see it (no block of a segment
// behind a span of a later one, Backlog answers, the segment does not roll while the seal fails).
func TestSealFailedAtRollIsSealedBeforeTheNext(t *testing.T) {
	dir := t.TempDir()
	ffs := &idxFullFS{}
	s := openT(t, Options{Dir: dir, FS: ffs, SegmentBytes: 4096})
	const parts = 3
	want := map[int][]byte{}
	n := 0
	put := func() {
		t.Helper()
		p := n % parts
		body := fmt.Sprintf("m%d-%s", n, "abcdefghijklmnopqrstuvwxyz")
		a, err := s.Append(context.Background(), "t", p, []Message{{Body: []byte(body)}})
		if err != nil {
			t.Fatalf("append %d: %v", n, err)
		}
		want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
		n++
	}
	segs := func() int { return len(*s.segTab.Load()) }
	// Up to just before the first roll, then the disk fills.
	for {
		if _, d := s.LogBounds(); d > 4096-200 {
			break
		}
		put()
	}
	ffs.full.Store(true)
	for segs() < 2 {
		put()
	}
	if err := s.Flush(); err != nil { // waits for the roll's sealing
		t.Fatalf("Flush: %v", err)
	}
	first := (*s.segTab.Load())[0]
	if first.isSealed() {
		t.Fatal("the first segment was sealed although its .idx could not be written")
	}
	// The second segment fills while the disk is still full: no roll.
	for _, d := s.LogBounds(); d < 2*4096+1024; _, d = s.LogBounds() {
		p := n % parts
		body := fmt.Sprintf("m%d-%s", n, "abcdefghijklmnopqrstuvwxyz")
		a, err := s.Append(context.Background(), "t", p, []Message{{Body: []byte(body)}})
		if errors.Is(err, ErrNoSpace) {
			if err := s.ProbeSpace(t.Context()); err != nil {
				t.Fatalf("ProbeSpace: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("append %d: %v", n, err)
		}
		want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
		n++
	}
	checkSpansBeforeBlocks(t, s)
	if got := segs(); got != 2 {
		t.Fatalf("%d segments while the first could not be sealed, want 2 (no roll)", got)
	}
	checkParts(t, s, "t", want)
	// Room again: the next roll seals the first segment, then the second.
	ffs.full.Store(false)
	for segs() < 3 {
		put()
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	tab := *s.segTab.Load()
	if !tab[0].isSealed() || !tab[1].isSealed() {
		t.Fatalf("sealed after the disk had room: first %v, second %v", tab[0].isSealed(), tab[1].isSealed())
	}
	checkSpansBeforeBlocks(t, s)
	checkParts(t, s, "t", want)
	for p := 0; p < parts; p++ {
		if msgs, _, err := s.Backlog("t", p, 0); err != nil || msgs == 0 {
			t.Fatalf("Backlog t-%d: %d, %v", p, msgs, err)
		}
	}
	s.Close()
	checkParts(t, openT(t, Options{Dir: dir}), "t", want)
}

// checkSpansBeforeBlocks fails when a partition holds a block of a segment
// at or before one of its spans: reads locate an offset in the blocks once
// it is at or above the first block's, so every span must come first.
func checkSpansBeforeBlocks(t *testing.T, s *Store) {
	t.Helper()
	for _, p := range s.partitionList() {
		p.mu.Lock()
		if n := p.spans.Len(); n > 0 {
			last := p.spans.At(n - 1)
			for _, b := range p.blocks {
				if b.g.seq <= last.seg || b.off <= last.off {
					p.mu.Unlock()
					t.Fatalf("%s-%d: a block of segment %d at offset %d follows a span of segment %d at offset %d",
						p.key.topic, p.key.num, b.g.seq, b.off, last.seg, last.off)
				}
			}
		}
		p.mu.Unlock()
	}
}
