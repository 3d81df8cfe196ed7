package store

import (
	"encoding/binary"
	"iter"
	"slices"
	"sort"
)

// segSpan is where a partition's chunks in one sealed segment begin: at
// offset off, appended at ms (the first of its blocks there). They run to
// the start of the next span, of the active segment's blocks, of the tail,
// or to the partition end; the segment's footer lists their blocks. seg is
// the segment's sequence number (segment.seq), resolved through the
// store's segment table (Store.segBySeq), so a span holds no pointer.
type segSpan struct {
	seg     uint32
	off, ms int64
}

// spanRestartEvery is how many spans share one restart point: a lookup
// decodes at most this many spans after a binary search of the restarts.
const spanRestartEvery = 32

// spanRestart holds one span in full (the first of its group) and where
// the deltas of the rest of its group begin in spanList.data.
type spanRestart struct {
	seg uint32
	at  uint32
	off int64
	ms  int64
}

func (r spanRestart) span() segSpan { return segSpan{seg: r.seg, off: r.off, ms: r.ms} }

// spanList is a partition's spans, held compactly: there are as many as
// partitions x sealed segments, and the three fields only grow along the
// list (segment and offset strictly, append time never decreases), so
// every span but the first of each group of spanRestartEvery is kept as
// three varint deltas from the one before (6-7 bytes for a busy
// partition), and each group's first span in full in restarts (24 bytes
// per group). The deltas are wrapping differences, so a span list that
// is not monotonic still round-trips; only the searches assume order.
//
// Dropping spans from the front (retention) moves whole groups out; the
// up to spanRestartEvery-1 spans dropped from the first group stay in it,
// skipped. The zero value is an empty list.
type spanList struct {
	data     []byte        // deltas of the spans not at a restart, in order
	restarts []spanRestart // one per group: its first span and its deltas' position
	n        int32         // spans held, the skipped ones included
	skip     int32         // spans at the front that were dropped (< spanRestartEvery)
	dead     int32         // bytes before data[0] still in its array (freed at the next copy)
}

// Len is the number of spans.
func (l *spanList) Len() int { return int(l.n - l.skip) }

// At returns span i (0 <= i < Len).
func (l *spanList) At(i int) segSpan {
	j := i + int(l.skip)
	g := j / spanRestartEvery
	r := l.restarts[g]
	sp, at := r.span(), int(r.at)
	for k := g * spanRestartEvery; k < j; k++ {
		sp, at = l.next(sp, at)
	}
	return sp
}

// Last returns the last span; Len must be above 0.
func (l *spanList) Last() segSpan { return l.At(l.Len() - 1) }

// next decodes the span after sp from its deltas at data[at:].
func (l *spanList) next(sp segSpan, at int) (segSpan, int) {
	dseg, n1 := binary.Uvarint(l.data[at:])
	doff, n2 := binary.Uvarint(l.data[at+n1:])
	dms, n3 := binary.Varint(l.data[at+n1+n2:])
	return segSpan{seg: sp.seg + uint32(dseg), off: sp.off + int64(doff), ms: sp.ms + dms}, at + n1 + n2 + n3
}

// appendSpanDelta encodes cur as deltas from prev: the encoding of a
// span after the first in spanList.data and in the checkpoint.
func appendSpanDelta(b []byte, prev, cur segSpan) []byte {
	b = binary.AppendUvarint(b, uint64(cur.seg-prev.seg))
	b = binary.AppendUvarint(b, uint64(cur.off-prev.off))
	return binary.AppendVarint(b, cur.ms-prev.ms)
}

// Search returns the smallest i in [0, Len()] at which f is true,
// assuming f is false and then true along the list (as sort.Search).
func (l *spanList) Search(f func(segSpan) bool) int {
	n := int(l.n)
	// The first group whose first span satisfies f; the answer is in the
	// group before it, or is that first span.
	g := sort.Search(len(l.restarts), func(i int) bool { return f(l.restarts[i].span()) })
	j := min(g*spanRestartEvery, n)
	if g > 0 {
		r := l.restarts[g-1]
		sp, at := r.span(), int(r.at)
		for k := (g-1)*spanRestartEvery + 1; k < j; k++ {
			sp, at = l.next(sp, at)
			if f(sp) {
				j = k
				break
			}
		}
	}
	return max(j-int(l.skip), 0)
}

// IndexOff returns the index of the last span starting at or below off,
// or -1.
func (l *spanList) IndexOff(off int64) int {
	return l.Search(func(sp segSpan) bool { return sp.off > off }) - 1
}

// IndexSeg returns the index of the span in segment seq, or -1.
func (l *spanList) IndexSeg(seq uint32) int {
	i := l.Search(func(sp segSpan) bool { return sp.seg >= seq })
	if i < l.Len() && l.At(i).seg == seq {
		return i
	}
	return -1
}

// Append adds sp after the last span.
func (l *spanList) Append(sp segSpan) {
	if l.n%spanRestartEvery == 0 {
		if len(l.restarts) == cap(l.restarts) {
			l.restarts = growSlice(l.restarts, 1)
		}
		l.restarts = append(l.restarts, spanRestart{seg: sp.seg, at: uint32(len(l.data)), off: sp.off, ms: sp.ms})
		l.n++
		return
	}
	prev := l.At(int(l.n-l.skip) - 1)
	var d [3 * binary.MaxVarintLen64]byte
	enc := appendSpanDelta(d[:0], prev, sp)
	if len(l.data)+len(enc) > cap(l.data) {
		l.data = growSlice(l.data, len(enc))
		l.dead = 0
	}
	l.data = append(l.data, enc...)
	l.n++
}

// growSlice returns s with room for need more elements, rounded up to the
// allocator's size class (which it would waste anyway), and once s is
// past 64 elements a slack of an eighth: the lists of 10,000 partitions
// grow one element per sealed segment, so append's doubling would waste
// up to half of them, and below 64 the size classes are slack enough.
func growSlice[T any](s []T, need int) []T {
	extra := 0
	if len(s) >= 64 {
		extra = len(s) / 8
	}
	out := slices.Grow([]T(nil), len(s)+need+extra)[:len(s)]
	copy(out, s)
	return out
}

// DropFront drops the first k spans (retention).
func (l *spanList) DropFront(k int) {
	switch {
	case k <= 0:
		return
	case k >= l.Len():
		*l = spanList{}
		return
	}
	skip := int(l.skip) + k
	g := skip / spanRestartEvery
	l.skip = int32(skip % spanRestartEvery)
	if g == 0 {
		return
	}
	at := l.restarts[g].at
	l.data = l.data[at:]
	l.dead += int32(at)
	l.restarts = l.restarts[g:]
	for i := range l.restarts {
		l.restarts[i].at -= at
	}
	l.n -= int32(g * spanRestartEvery)
	// The dropped bytes stay in the arrays until a copy; copy once they
	// are more than a small part of what is kept.
	if int(l.dead) > len(l.data)/8+64 {
		l.data = append([]byte(nil), l.data...)
		l.restarts = append([]spanRestart(nil), l.restarts...)
		l.dead = 0
	}
}

// Cut keeps the first n spans (a fence or a rollback cut the partition
// back).
func (l *spanList) Cut(n int) {
	switch {
	case n >= l.Len():
		return
	case n <= 0:
		*l = spanList{}
		return
	}
	m := n + int(l.skip)
	g := m / spanRestartEvery
	if m%spanRestartEvery == 0 {
		l.data = l.data[:l.restarts[g].at]
		l.restarts = l.restarts[:g]
	} else {
		r := l.restarts[g]
		sp, at := r.span(), int(r.at)
		for k := g*spanRestartEvery + 1; k < m; k++ {
			sp, at = l.next(sp, at)
		}
		l.data = l.data[:at]
		l.restarts = l.restarts[:g+1]
	}
	l.n = int32(m)
}

// All yields the spans in order.
func (l *spanList) All() iter.Seq[segSpan] {
	return func(yield func(segSpan) bool) {
		for g, r := range l.restarts {
			sp, at := r.span(), int(r.at)
			for k := g * spanRestartEvery; k < int(l.n) && k < (g+1)*spanRestartEvery; k++ {
				if k > g*spanRestartEvery {
					sp, at = l.next(sp, at)
				}
				if k >= int(l.skip) && !yield(sp) {
					return
				}
			}
		}
	}
}

// encodedLen estimates the bytes of the spans as deltas (the checkpoint's
// encoding).
func (l *spanList) encodedLen() int { return len(l.data) + len(l.restarts)*16 }

// memBytes is what the list holds in memory beyond its fixed part.
func (l *spanList) memBytes() int {
	return cap(l.data) + int(l.dead) + cap(l.restarts)*24
}

// nextSeq numbers a segment being opened or created (recovery, then the
// writer goroutine: one at a time).
func (s *Store) nextSeq() uint32 {
	s.lastSeq++
	return s.lastSeq
}

// publishSegs makes the current segment list the one segBySeq searches;
// called wherever s.segs changes (under segMu, or before the store runs).
func (s *Store) publishSegs() {
	tab := append([]*segment(nil), s.segs...)
	s.segTab.Store(&tab)
}

// segBySeq returns the segment numbered seq, or nil when it is gone
// (retention removed it). It takes no lock, so it can be called under
// any, partition.mu included.
func (s *Store) segBySeq(seq uint32) *segment {
	tab := s.segTab.Load()
	if tab == nil {
		return nil
	}
	segs := *tab
	i := sort.Search(len(segs), func(i int) bool { return segs[i].seq >= seq })
	if i < len(segs) && segs[i].seq == seq {
		return segs[i]
	}
	return nil
}

// removedSegment stands for a segment retention removed while a span
// still names it: reading its index or footer fails with ErrLogTruncated,
// as for a removed segment.
var removedSegment = &segment{path: "(removed segment)", removed: true}

// spanSeg returns the segment numbered seq, or removedSegment.
func (s *Store) spanSeg(seq uint32) *segment {
	if g := s.segBySeq(seq); g != nil {
		return g
	}
	return removedSegment
}
