package store

import (
	"sort"
	"sync"
)

type pkey struct {
	topic string
	num   int
}

// chunkRef locates one data entry of a partition: its first partition
// offset and the log position of its entry header. The chunk's length is
// the next chunk's off minus its own (the partition end for the last one).
type chunkRef struct {
	off int64
	pos int64
}

// timeRef is one sparse time-index point: the first chunk appended at ms.
type timeRef struct {
	ms  int64
	off int64
}

// partition is the in-memory index of one partition. Fields under mu are
// read by any goroutine; wEnd is owned by the writer goroutine.
type partition struct {
	key pkey
	pid uint32

	mu        sync.RWMutex
	min       int64 // first retained offset
	end       int64 // end of the last written chunk
	durable   int64 // end of the last fsynced chunk
	chunks    []chunkRef
	segs      []int64 // virtual MetaQ segment starts (spec §1.7), ascending
	times     []timeRef
	messages  int64
	deleted   bool
	sinceTime int // chunks since the last time point

	// writer-owned: end including requests of the batch being built.
	wEnd int64
}

func newPartition(key pkey, pid uint32, start int64) *partition {
	return &partition{key: key, pid: pid, min: start, end: start, durable: start, wEnd: start, segs: []int64{start}}
}

// The sparse time index takes a point when a chunk is at least
// timeIndexStepMs newer than the last point AND timeIndexStepChunks chunks
// were added since, so it never costs more than 1/64 of the chunk index and
// never more than one point per second.
const (
	timeIndexStepMs     = 1000
	timeIndexStepChunks = 64
)

// addChunkLocked records a chunk of n bytes at the partition end. With
// segBytes <= 0 the virtual segment boundaries are left alone (replay below
// a checkpoint, which already holds them).
func (p *partition) addChunkLocked(pos int64, n int64, ms int64, records int64, segBytes int64) {
	off := p.end
	p.chunks = append(p.chunks, chunkRef{off: off, pos: pos})
	p.end = off + n
	p.messages += records
	p.sinceTime++
	if len(p.times) == 0 || (ms >= p.times[len(p.times)-1].ms+timeIndexStepMs && p.sinceTime >= timeIndexStepChunks) {
		p.times = append(p.times, timeRef{ms: ms, off: off})
		p.sinceTime = 0
	}
	// MetaQ rolls its segment file after an append that leaves it at or
	// beyond maxSegmentSize; the next file starts at the new end.
	if segBytes > 0 && p.end-p.segs[len(p.segs)-1] >= segBytes {
		p.segs = append(p.segs, p.end)
	}
}

// chunkIndexLocked returns the index of the chunk holding off (the last
// chunk with chunk.off <= off), or -1.
func (p *partition) chunkIndexLocked(off int64) int {
	i := sort.Search(len(p.chunks), func(i int) bool { return p.chunks[i].off > off })
	return i - 1
}

func (p *partition) chunkLenLocked(i int) int64 {
	if i+1 < len(p.chunks) {
		return p.chunks[i+1].off - p.chunks[i].off
	}
	return p.end - p.chunks[i].off
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
