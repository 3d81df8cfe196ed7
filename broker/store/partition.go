package store

import (
	"sort"
	"sync"
	"sync/atomic"
)

type pkey struct {
	topic string
	num   int
}

// fenceRef records that p was cut back to off when the log had reached
// pos: its chunks at positions below pos with offsets at or above off are
// dead (ReadLog must not ship them), while later chunks reuse the offsets.
type fenceRef struct {
	pos int64
	off int64
}

// partition is the index of one partition: its chunks in sealed segments
// as one span per segment (their blocks are listed in that segment's .idx
// footer, see index.go), those of the active segment in blocks on disk
// with a reference each in memory, the newest ones in tail. Fields under
// mu are read by any goroutine; wEnd is owned by the writer goroutine.
type partition struct {
	// The fields the writer goroutine touches for every chunk it logs
	// (process, dirtySet) and for every partition a group commit makes
	// durable (completeSync) come first, in the object's first two cache
	// lines (its 376 bytes take the 384-byte allocation class, whose
	// objects start on a line; partitionlayout_test.go checks both). At
	// 10,000 partitions each chunk goes to a partition whose memory has
	// left the CPU caches since its last one, so every line it touches is
	// a miss; spread over the struct they were six (partitionlayout_test.go).
	mu sync.Mutex
	// writer-owned: p's place in the writer's dirty set plus one (0: not
	// in it), see dirtySet.
	wDirty int32
	pid    uint32
	// writer-owned: end including requests of the batch being built.
	wEnd int64
	end  int64 // end of the last written chunk
	// durable is the end of the last fsynced chunk. Only the writer
	// goroutine (or recovery before it) changes it, and a group commit
	// raises it without taking mu, one atomic store per partition instead
	// of a lock and an unlock; anyone reads it, under mu or not.
	durable  atomic.Int64
	messages int64 // records appended since start-up
	// records is the number of records in [base, end): with the bytes
	// they take it gives the mean record size Backlog counts with.
	records int64
	tail    []idxEntry // chunks after the last block (active segment only), at most blockEntries
	// segLast is segs[len(segs)-1], kept with it (setSegsLocked), so that a
	// chunk's roll check reads no other line.
	segLast int64

	segs    []int64 // virtual MetaQ segment starts (see offset in broker/wire/doc.go), ascending; set with setSegsLocked
	key     pkey
	min     int64      // first retained offset
	spans   spanList   // chunks in sealed segments, one span per segment, ascending
	blocks  []blockRef // index blocks of the active segment, ascending and contiguous in offset
	fences  []fenceRef
	base    int64
	deleted bool

	// Damage (see doc.go, Recovery). lost holds the offset ranges whose
	// records were lost to damage, holes the part of them not repaired
	// (what Damaged reports), fills the chunks written back into them
	// (Repair, salvage), ascending by offset. The index itself keeps a
	// hole marker (pos holePos) where recovery found records missing, so
	// it stays contiguous; a chunk found damaged while serving keeps its
	// index entry and is masked by holes. Rare, so plain slices.
	lost  []offRange
	holes []offRange
	fills []idxEntry
	// adoptedLow is the lowest log position of chunks adopted after their
	// partition's definition was lost (-1: none); see adoptOrphans.
	adoptedLow int64

	// idxAhead is the partition offset up to which a reader of old data
	// asked for p's index blocks ahead (prefetchIndex); only a hint.
	idxAhead atomic.Int64
	// logAhead is the log position up to which a reader of old data asked
	// for p's next reads ahead (prefetchLog); only a hint.
	logAhead atomic.Int64
}

// holePos is the pos of an index entry that marks a hole: offsets whose
// records were lost, never served and never handed out again.
const holePos = -1

// offRange is a range of partition offsets [from, to).
type offRange struct{ from, to int64 }

func (e idxEntry) hole() bool { return e.pos < 0 }

// damagedLocked reports whether p has any damage state (then the store
// scans the whole log at start-up, where it is rebuilt).
func (p *partition) damagedLocked() bool {
	return len(p.lost) > 0 || len(p.fills) > 0 || p.adoptedLow >= 0
}

// addHoleLocked records that the offsets [p.end, to) were lost: a hole
// marker goes into the index and p continues at to, so no offset is handed
// out twice. ms keeps the index's times ascending.
func (p *partition) addHoleLocked(to, ms int64) bool {
	if to <= p.end {
		return false
	}
	p.tail = append(p.tail, idxEntry{pid: p.pid, n: uint32(to - p.end), off: p.end, pos: holePos, ms: ms})
	p.markLostLocked(p.end, to)
	p.end = to
	return true
}

// markLostLocked adds [from, to) to the lost and the unrepaired ranges.
func (p *partition) markLostLocked(from, to int64) {
	p.lost = addRange(p.lost, offRange{from, to})
	p.holes = addRange(p.holes, offRange{from, to})
}

// addRange inserts r into the sorted list rs, merging neighbours.
func addRange(rs []offRange, r offRange) []offRange {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].from > r.from })
	rs = append(rs, offRange{})
	copy(rs[i+1:], rs[i:])
	rs[i] = r
	out := rs[:1]
	for _, x := range rs[1:] {
		if last := &out[len(out)-1]; x.from <= last.to {
			last.to = max(last.to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// holeRoomLocked returns how many unrepaired bytes follow off in its hole
// (0 when off is not in one).
func (p *partition) holeRoomLocked(off int64) int64 {
	for _, h := range p.holes {
		if off >= h.from && off < h.to {
			return h.to - off
		}
	}
	return 0
}

// inHolesLocked reports whether [off, off+n) overlaps an unrepaired hole.
func (p *partition) inHolesLocked(off, n int64) bool {
	for _, h := range p.holes {
		if off < h.to && off+n > h.from {
			return true
		}
	}
	return false
}

// inLostLocked reports whether [off, off+n) overlaps a lost range, repaired
// or not: such a chunk is served only through the fills written into it.
func (p *partition) inLostLocked(off, n int64) bool {
	for _, h := range p.lost {
		if off < h.to && off+n > h.from {
			return true
		}
	}
	return false
}

// lostEndsAtLocked reports whether a lost range ends at off (ReadLog ships
// a hole marker before the chunk there).
func (p *partition) lostEndsAtLocked(off int64) bool {
	for _, h := range p.lost {
		if h.to == off {
			return true
		}
	}
	return false
}

// fillLocked records a chunk of n bytes at log position pos written back
// into the hole at off; it must fit in the unrepaired part.
func (p *partition) fillLocked(off, n, pos, ms int64) bool {
	if n <= 0 || p.holeRoomLocked(off) < n {
		return false
	}
	i := sort.Search(len(p.fills), func(i int) bool { return p.fills[i].off > off })
	p.fills = append(p.fills, idxEntry{})
	copy(p.fills[i+1:], p.fills[i:])
	p.fills[i] = idxEntry{pid: p.pid, n: uint32(n), off: off, pos: pos, ms: ms}
	var holes []offRange
	for _, h := range p.holes {
		if off >= h.to || off+n <= h.from {
			holes = append(holes, h)
			continue
		}
		if h.from < off {
			holes = append(holes, offRange{h.from, off})
		}
		if off+n < h.to {
			holes = append(holes, offRange{off + n, h.to})
		}
	}
	p.holes = holes
	return true
}

// overlayLocked turns index entries into what is served: a chunk found
// damaged while serving becomes a hole, and a hole is split into the
// chunks written back into it and what is still missing. A fill may span
// several entries (neighbouring chunks found damaged one by one make one
// lost range, repaired in one piece) and may start before the first entry
// asked for: it is served whole, in place of every entry it covers, and a
// read entering it part way skips to its offset (plan).
func (p *partition) overlayLocked(ents []idxEntry) []idxEntry {
	if len(p.lost) == 0 {
		return ents
	}
	var out []idxEntry
	covered := int64(-1) // out covers the offsets below this
	for _, e := range ents {
		off, end := e.off, e.off+int64(e.n)
		if end <= covered {
			continue // inside a fill already served
		}
		// A chunk found damaged keeps its index entry: once repaired it is
		// no longer in a hole, but it is still lost and served only
		// through its fills, never from the damaged bytes.
		if !e.hole() && !p.inLostLocked(off, int64(e.n)) {
			out = append(out, e)
			covered = end
			continue
		}
		// [off, end) is (partly) lost: fills where written back, the
		// rest holes
		for x := max(off, covered); x < end; {
			if f, ok := p.fillCoveringLocked(x); ok {
				out = append(out, f)
				x = f.off + int64(f.n)
				covered = x
				continue
			}
			next := end
			for _, f := range p.fills {
				if f.off > x && f.off < next {
					next = f.off
				}
			}
			out = append(out, idxEntry{pid: p.pid, n: uint32(next - x), off: x, pos: holePos})
			x = next
			covered = x
		}
	}
	return out
}

// fillCoveringLocked returns the fill that holds offset off.
func (p *partition) fillCoveringLocked(off int64) (idxEntry, bool) {
	i := sort.Search(len(p.fills), func(i int) bool { return p.fills[i].off > off })
	if i > 0 && off < p.fills[i-1].off+int64(p.fills[i-1].n) {
		return p.fills[i-1], true
	}
	return idxEntry{}, false
}

// trimDamageLocked drops damage state below the partition's new min.
func (p *partition) trimDamageLocked(min int64) {
	clip := func(rs []offRange) []offRange {
		var out []offRange
		for _, r := range rs {
			if r.to > min {
				out = append(out, offRange{max(r.from, min), r.to})
			}
		}
		return out
	}
	p.lost, p.holes = clip(p.lost), clip(p.holes)
	var fills []idxEntry
	for _, f := range p.fills {
		if f.off+int64(f.n) > min {
			fills = append(fills, f)
		}
	}
	p.fills = fills
}

func newPartition(key pkey, pid uint32, start int64) *partition {
	p := &partition{key: key, pid: pid, min: start, end: start, wEnd: start, segs: []int64{start}, segLast: start, base: start, adoptedLow: -1}
	p.durable.Store(start)
	return p
}

// setSegsLocked makes segs p's virtual MetaQ segment starts (not empty).
func (p *partition) setSegsLocked(segs []int64) {
	p.segs, p.segLast = segs, segs[len(segs)-1]
}

// addChunkLocked records a chunk of n bytes holding records records at the
// partition end, logged at pos in the active segment. The caller flushes
// the tail once it is full.
func (p *partition) addChunkLocked(pos int64, n int64, ms int64, records int64, segBytes int64) {
	off := p.end
	// Appended zero and then set field by field: a literal would be
	// copied from the stack in moves the CPU cannot forward from the
	// stores that built it (the same in process's pend).
	p.tail = append(p.tail, idxEntry{})
	e := &p.tail[len(p.tail)-1]
	e.pid, e.n, e.off, e.pos, e.ms = p.pid, uint32(n), off, pos, ms
	p.end = off + n
	p.records += records
	// MetaQ rolls its segment file after an append that leaves it at or
	// beyond maxSegmentSize; the next file starts at the new end.
	if segBytes > 0 && p.end-p.segLast >= segBytes {
		p.setSegsLocked(append(p.segs, p.end))
	}
}

// tailRoomLocked makes room in p's tail for one more entry: a tail that is
// full below its share of the tail budget (share entries) grows to the
// share in one step, an empty one after a roll or a new partition's small
// first array alike. Growing by doubling instead costs a copy and a
// garbage array per step: at 10,000 partitions a new partition's tail went
// 16, 32, 64, 128 entries (about 77 MB of arrays over the partitions, on
// the first round of a fresh broker) where its share is 78.
func (p *partition) tailRoomLocked(share int) {
	if len(p.tail) < cap(p.tail) || cap(p.tail) >= share {
		return
	}
	t := make([]idxEntry, len(p.tail), share)
	copy(t, p.tail)
	p.tail = t
}

// recordsIn estimates the records in n bytes of p from its mean record size.
func (p *partition) recordsInLocked(n int64) int64 {
	if p.records <= 0 || p.end <= p.base || n <= 0 {
		return 0
	}
	return max((n*p.records+(p.end-p.base)/2)/(p.end-p.base), 1)
}

// tailIndexLocked returns the index of the tail entry holding off, or -1
// when off is below the tail.
func (p *partition) tailIndexLocked(off int64) int {
	return sort.Search(len(p.tail), func(i int) bool { return p.tail[i].off > off }) - 1
}

// blockIndexLocked returns the index of the block holding off (the last
// block starting at or below it), or -1.
func (p *partition) blockIndexLocked(off int64) int {
	return sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].off > off }) - 1
}

// spanIndexLocked returns the index of the span holding off (the last span
// starting at or below it), or -1.
func (p *partition) spanIndexLocked(off int64) int {
	return p.spans.IndexOff(off)
}

// spanEndLocked is the partition offset where span i ends: where the next
// span, the active segment's blocks, the tail or the partition begin.
func (p *partition) spanEndLocked(i int) int64 {
	switch {
	case i+1 < p.spans.Len():
		return p.spans.At(i + 1).off
	case len(p.blocks) > 0:
		return p.blocks[0].off
	case len(p.tail) > 0:
		return p.tail[0].off
	}
	return p.end
}

// spanOfLocked returns the index of p's span in sealed segment g, or -1.
func (p *partition) spanOfLocked(g *segment) int {
	return p.spans.IndexSeg(g.seq)
}

// firstIndexedLocked is the offset of p's first indexed chunk (its end
// when nothing is indexed).
func (p *partition) firstIndexedLocked() int64 {
	switch {
	case p.spans.Len() > 0:
		return p.spans.At(0).off
	case len(p.blocks) > 0:
		return p.blocks[0].off
	case len(p.tail) > 0:
		return p.tail[0].off
	}
	return p.end
}

// blockEndLocked is the partition offset where block i ends.
func (p *partition) blockEndLocked(i int) int64 {
	switch {
	case i+1 < len(p.blocks):
		return p.blocks[i+1].off
	case len(p.tail) > 0:
		return p.tail[0].off
	}
	return p.end
}

// nearestLocked answers the offset command (broker/wire/doc.go) against the readable end.
func (p *partition) nearestLocked(off int64) int64 {
	switch d := p.durable.Load(); {
	case off >= d:
		return d
	case off < p.min:
		return p.min
	}
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i] > off }) - 1
	if i < 0 || p.segs[i] < p.min {
		return p.min
	}
	return p.segs[i]
}

// liveLocked reports whether the chunk at log position pos with offset off
// is still served by p (ReadLog's test, without an index lookup).
func (p *partition) liveLocked(off, n, pos int64) bool {
	return off >= p.min && off+n <= p.end && !p.deadByFence(off, n, pos)
}

func (p *partition) infoLocked() PartitionInfo {
	d := p.durable.Load()
	return PartitionInfo{
		Topic:     p.key.topic,
		Partition: p.key.num,
		Min:       p.min,
		Max:       d,
		Durable:   d,
		Written:   p.end,
		Messages:  p.messages,
		Bytes:     d - p.min,
	}
}

// cutDamageLocked drops damage state at and above off (the partition was
// cut back there: those offsets are handed out again).
func (p *partition) cutDamageLocked(off int64) {
	clip := func(rs []offRange) []offRange {
		var out []offRange
		for _, r := range rs {
			if r.from < off {
				out = append(out, offRange{r.from, min(r.to, off)})
			}
		}
		return out
	}
	p.lost, p.holes = clip(p.lost), clip(p.holes)
	var fills []idxEntry
	for _, f := range p.fills {
		if f.off+int64(f.n) <= off {
			fills = append(fills, f)
		}
	}
	p.fills = fills
}

// maxIndexedNum bounds the partition numbers topicParts indexes: a larger
// number (the store takes any) is found through Store.parts alone.
const maxIndexedNum = 1 << 16

// topicParts is a topic's partitions by number: the same partitions as
// Store.parts, under Store.mu. AppendManyAsync finds the partitions of a
// call (up to 64 of a topic of 10,000) by index in it rather than hashing
// each key into the table of every partition.
type topicParts struct {
	topic string
	byNum []*partition // nil where the topic has no such partition
	n     int          // partitions in byNum
}

// get returns partition num of t, or nil when t (which may be nil) does
// not index it.
func (t *topicParts) get(num int) *partition {
	if t == nil || num < 0 || num >= len(t.byNum) {
		return nil
	}
	return t.byNum[num]
}

// setPartLocked puts p into the partition table (the caller holds Store.mu
// for writing, or owns the store during recovery).
func (s *Store) setPartLocked(p *partition) {
	if old := s.parts[p.key]; old != nil {
		s.deletePartLocked(p.key)
	}
	s.parts[p.key] = p
	num := p.key.num
	if num < 0 || num >= maxIndexedNum {
		return
	}
	t := s.byTopic[p.key.topic]
	if t == nil {
		t = &topicParts{topic: p.key.topic}
		s.byTopic[p.key.topic] = t
	}
	if num >= len(t.byNum) {
		t.byNum = append(t.byNum, make([]*partition, num+1-len(t.byNum))...)
	}
	t.byNum[num] = p
	t.n++
}

// deletePartLocked takes key out of the partition table (the caller
// holds Store.mu for writing, or owns the store during recovery).
func (s *Store) deletePartLocked(key pkey) {
	if _, ok := s.parts[key]; !ok {
		return
	}
	delete(s.parts, key)
	t := s.byTopic[key.topic]
	if t == nil || key.num < 0 || key.num >= len(t.byNum) || t.byNum[key.num] == nil {
		return
	}
	t.byNum[key.num] = nil
	if t.n--; t.n == 0 {
		delete(s.byTopic, key.topic)
	}
}
