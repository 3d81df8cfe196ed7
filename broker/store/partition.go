package store

import (
	"sort"
	"sync"
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

// partition is the index of one partition: its sealed chunks in on-disk
// blocks (see index.go), the newest ones in tail. Fields under mu are read
// by any goroutine; wEnd is owned by the writer goroutine.
type partition struct {
	key pkey
	pid uint32

	mu       sync.RWMutex
	min      int64      // first retained offset
	end      int64      // end of the last written chunk
	durable  int64      // end of the last fsynced chunk
	blocks   []blockRef // index blocks on disk, ascending and contiguous in offset
	tail     []idxEntry // chunks after the last block (active segment only), at most blockEntries
	segs     []int64    // virtual MetaQ segment starts (spec §1.7), ascending
	fences   []fenceRef
	messages int64 // records appended since start-up
	// records is the number of records in [base, end): with the bytes
	// they take it gives the mean record size Backlog counts with.
	records int64
	base    int64
	deleted bool

	// writer-owned: end including requests of the batch being built.
	wEnd int64
}

func newPartition(key pkey, pid uint32, start int64) *partition {
	return &partition{key: key, pid: pid, min: start, end: start, durable: start, wEnd: start, segs: []int64{start}, base: start}
}

// addChunkLocked records a chunk of n bytes holding records records at the
// partition end, logged at pos in the active segment. The caller flushes
// the tail once it is full.
func (p *partition) addChunkLocked(pos int64, n int64, ms int64, records int64, segBytes int64) {
	off := p.end
	p.tail = append(p.tail, idxEntry{pid: p.pid, n: uint32(n), off: off, pos: pos, ms: ms})
	p.end = off + n
	p.records += records
	// MetaQ rolls its segment file after an append that leaves it at or
	// beyond maxSegmentSize; the next file starts at the new end.
	if segBytes > 0 && p.end-p.segs[len(p.segs)-1] >= segBytes {
		p.segs = append(p.segs, p.end)
	}
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

// nearestLocked answers spec §1.7 against the readable end.
func (p *partition) nearestLocked(off int64) int64 {
	switch {
	case off >= p.durable:
		return p.durable
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
	return PartitionInfo{
		Topic:     p.key.topic,
		Partition: p.key.num,
		Min:       p.min,
		Max:       p.durable,
		Durable:   p.durable,
		Written:   p.end,
		Messages:  p.messages,
		Bytes:     p.durable - p.min,
	}
}
