package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"sort"
	"strings"
)

// The per-partition index lives on disk: every log segment has an .idx
// file of 32-byte entries (one per data chunk) written in blocks, each
// block holding up to blockEntries consecutive chunks of ONE partition.
// When a segment is sealed its .idx gets a footer listing every block in
// it (the segment's summary, read when first needed and kept in a bounded
// cache). Memory keeps, per partition, one span per sealed segment it
// has chunks in (in a compact spanList, see spanlist.go), one blockRef per
// block of the active segment, and the chunks written since its last
// block (the tail, at most one block's worth, always in the active
// segment; a roll turns the tails into blocks of the segment it seals,
// held in memory until the sealing writes them). See doc.go.

// idxEntry is one data chunk as written to a segment's .idx file.
type idxEntry struct {
	pid uint32
	n   uint32 // payload bytes
	off int64  // partition offset of the chunk's first record
	pos int64  // log position of the entry header
	ms  int64  // append time
}

const (
	idxMagic     = 0x4D514958 // "MQIX"
	formatV1     = 1          // .idx = whole-segment summary; checkpoint without blocks
	formatV2     = 2          // .idx = per-partition blocks; checkpoint holds every block
	formatV3     = 3          // sealed .idx end with a footer of their blocks; checkpoint holds spans
	idxEntryLen  = 32
	idxHeaderLen = 32
	idxSuffix    = ".idx"
	// blockEntries is the size of an index block: 1,024 entries, 32 KiB.
	blockEntries = 1024
	// tailBudget bounds the entries all tails hold together (16 MiB): with
	// thousands of busy partitions, tails are written out early as short
	// blocks rather than holding up to a block each.
	tailBudget = 512 << 10
	// summaryBudget bounds the footer blocks the summary cache holds (32
	// bytes each in memory: 2 MiB), whatever the retained size.
	summaryBudget = 64 << 10

	footMagic      = 0x4D514946 // "MQIF"
	footBlockLen   = 32
	footTrailerLen = 32
)

// blockRef locates one index block of a partition.
type blockRef struct {
	g   *segment // segment whose .idx holds the block (and whose log holds its chunks)
	off int64    // partition offset of the first chunk
	ms  int64    // append time of the first chunk
	at  uint32   // entry number of the first entry in the .idx
	n   uint32   // entries
	crc uint32   // crc32c of the block's bytes
	// mem holds the block's entries while a roll's sealing has not yet
	// written them into the sealed segment's .idx (see sealJob): reads
	// take them from here. Not nil only for blocks of a segment being
	// sealed; crc is set when mem goes.
	mem *memBlock
}

// memBlock is the entries of a block not yet in its .idx: a partition's
// tail as a roll found it, never appended to again.
type memBlock struct {
	ents []idxEntry
}

func idxPathOf(logPath string) string { return strings.TrimSuffix(logPath, segSuffix) + idxSuffix }

func idxHeader(start int64) []byte {
	b := make([]byte, idxHeaderLen)
	binary.BigEndian.PutUint32(b[0:], idxMagic)
	binary.BigEndian.PutUint32(b[4:], formatV3)
	binary.BigEndian.PutUint64(b[8:], uint64(start))
	return b
}

// openIdx opens g's .idx (creating it when missing). It reports whether
// the file holds a valid header of the current format for g; the entries
// themselves are trusted only as far as the checkpoint vouches for them,
// a footer only once its checks pass.
func (s *Store) openIdx(g *segment) (ok bool, err error) {
	path := idxPathOf(g.path)
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, fmt.Errorf("store: open index %s: %w", path, err)
	}
	g.idx = f
	// A partition's blocks lie among the other partitions' blocks: the
	// kernel's read-ahead (up to read_ahead_kb, often MiBs) would read
	// mostly theirs on every miss. Readers ask for their own ahead
	// (prefetchIndex).
	adviseRandom(f)
	size, err := f.Size()
	if err != nil {
		return false, fmt.Errorf("store: stat index %s: %w", path, err)
	}
	g.idxSize = size
	if size < idxHeaderLen {
		return false, nil
	}
	var h [idxHeaderLen]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return false, nil
	}
	return binary.BigEndian.Uint32(h[0:]) == idxMagic && binary.BigEndian.Uint32(h[4:]) == formatV3 &&
		int64(binary.BigEndian.Uint64(h[8:])) == g.start, nil
}

// resetIdx cuts g's .idx to its header and n entries (the part a
// checkpoint vouches for; a footer goes too); n = 0 rewrites the header.
func (s *Store) resetIdx(g *segment, n uint32) error {
	g.sealed, g.footN, g.footCRC = false, 0, 0
	s.sums.drop(g)
	size := int64(idxHeaderLen) + int64(n)*idxEntryLen
	if err := g.idx.Truncate(size); err != nil {
		return fmt.Errorf("store: truncate index %s: %w", idxPathOf(g.path), err)
	}
	g.idxN = n
	g.idxSize = size
	if n == 0 {
		if _, err := g.idx.WriteAt(idxHeader(g.start), 0); err != nil {
			return fmt.Errorf("store: write index %s: %w", idxPathOf(g.path), err)
		}
	}
	return nil
}

func encodeEntries(dst []byte, ents []idxEntry) []byte {
	var e [idxEntryLen]byte
	for _, x := range ents {
		binary.BigEndian.PutUint32(e[0:], x.pid)
		binary.BigEndian.PutUint32(e[4:], x.n)
		binary.BigEndian.PutUint64(e[8:], uint64(x.off))
		binary.BigEndian.PutUint64(e[16:], uint64(x.pos))
		binary.BigEndian.PutUint64(e[24:], uint64(x.ms))
		dst = append(dst, e[:]...)
	}
	return dst
}

func decodeEntry32(e []byte) idxEntry {
	return idxEntry{
		pid: binary.BigEndian.Uint32(e[0:]),
		n:   binary.BigEndian.Uint32(e[4:]),
		off: int64(binary.BigEndian.Uint64(e[8:])),
		pos: int64(binary.BigEndian.Uint64(e[16:])),
		ms:  int64(binary.BigEndian.Uint64(e[24:])),
	}
}

// flushTailLocked writes p's tail as a block of the active segment's .idx
// (the writer goroutine, or recovery, holds the right to write it; the
// caller holds p.mu).
func (s *Store) flushTailLocked(p *partition, g *segment) error {
	if len(p.tail) == 0 {
		return nil
	}
	b := encodeEntries(s.w.idxBuf[:0], p.tail)
	s.w.idxBuf = b[:0]
	at := int64(idxHeaderLen) + int64(g.idxN)*idxEntryLen
	if _, err := g.idx.WriteAt(b, at); err != nil {
		return fmt.Errorf("store: write index %s at %d: %w", idxPathOf(g.path), at, err)
	}
	p.blocks = append(p.blocks, blockRef{g: g, off: p.tail[0].off, ms: p.tail[0].ms, at: g.idxN,
		n: uint32(len(p.tail)), crc: crc32.Checksum(b, castagnoli)})
	g.idxN += uint32(len(p.tail))
	g.idxSize = at + int64(len(b))
	p.tail = nil
	return nil
}

// flushTailsOf writes the tails of ps (those of at least min entries) into
// g's .idx as consecutive blocks, with one write per idxWriteMax bytes: a
// sweep or a roll with thousands of partitions costs a few system calls,
// not one per partition. The blocks are encoded into the writer's reused
// buffer (writerState.idxBuf), not into memory fresh from the system
// (a sweep at 10,000 partitions writes megabytes, and faulting fresh pages
// in cost more than encoding them). Only the writer goroutine (or
// recovery, or Close after the writer stopped) calls it: it alone appends
// to tails, so a tail cannot change between the copy and the publish.
//
// keep leaves each written tail its array, empty, for its next entries
// (the sweep: with thousands of busy partitions each tail would otherwise
// be allocated again and grown from one entry, a garbage slice per
// doubling); without it the arrays are let go (a roll, a checkpoint),
// so a partition that went idle holds none. Keeping them adds no memory
// at the sweep's peak: the arrays existed, full, just before it.
func (s *Store) flushTailsOf(ps []*partition, g *segment, min int, keep bool) error {
	w := &s.w
	todo := w.idxTodo[:0]
	defer func() {
		clear(todo)
		w.idxTodo = todo[:0]
	}()
	out := idxAppender{g: g, pos: int64(idxHeaderLen) + int64(g.idxN)*idxEntryLen, buf: w.idxBuf[:0]}
	at := g.idxN
	for _, p := range ps {
		p.mu.Lock()
		n := len(p.tail)
		if n == 0 || n < min {
			p.mu.Unlock()
			continue
		}
		crc, err := out.add(p.tail)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		todo = append(todo, pendBlock{p, blockRef{g: g, off: p.tail[0].off, ms: p.tail[0].ms, at: at, n: uint32(n), crc: crc}})
		at += uint32(n)
		p.mu.Unlock()
	}
	err := out.flush()
	w.idxBuf = out.buf[:0]
	if err != nil || len(todo) == 0 {
		return err
	}
	g.idxN = at
	g.idxSize = out.pos
	for _, x := range todo {
		x.p.mu.Lock()
		x.p.blocks = append(x.p.blocks, x.ref)
		if keep {
			// Entries are read only under the partition's lock and
			// copied out (chunks), so the array can take the next ones.
			x.p.tail = x.p.tail[:0]
		} else {
			x.p.tail = nil
		}
		x.p.mu.Unlock()
	}
	return nil
}

// idxAppender writes consecutive index blocks into a segment's .idx from
// pos on, one write per idxWriteMax bytes at most.
type idxAppender struct {
	g   *segment
	pos int64
	buf []byte
}

// add encodes ents as the next block, writing what is buffered first when
// they would not fit, and returns the block's crc.
func (a *idxAppender) add(ents []idxEntry) (uint32, error) {
	if len(a.buf)+len(ents)*idxEntryLen > idxWriteMax {
		if err := a.flush(); err != nil {
			return 0, err
		}
	}
	start := len(a.buf)
	a.buf = encodeEntries(a.buf, ents)
	return crc32.Checksum(a.buf[start:], castagnoli), nil
}

// flush writes what is buffered; pos is then the end of what was written.
func (a *idxAppender) flush() error {
	if len(a.buf) == 0 {
		return nil
	}
	if _, err := a.g.idx.WriteAt(a.buf, a.pos); err != nil {
		return fmt.Errorf("store: write index %s at %d: %w", idxPathOf(a.g.path), a.pos, err)
	}
	a.pos += int64(len(a.buf))
	a.buf = a.buf[:0]
	return nil
}

// idxWriteMax bounds one write of index blocks, and so the writer's
// encoding buffer (idxBuf: at most this plus one block).
const idxWriteMax = 1 << 20

// pendBlock is a block flushTailsOf wrote, published once all are written.
type pendBlock struct {
	p   *partition
	ref blockRef
}

// errIndexDamaged marks an index block that fails its checks: the log is
// fine, the .idx is not (see repairBlock).
var errIndexDamaged = errors.New("index block damaged")

// readBlock reads and checks block b of partition pid.
func (s *Store) readBlock(pid uint32, b blockRef) ([]idxEntry, error) {
	if b.mem != nil {
		return slices.Clone(b.mem.ents[:b.n]), nil
	}
	buf := make([]byte, int(b.n)*idxEntryLen)
	at := int64(idxHeaderLen) + int64(b.at)*idxEntryLen
	b.g.idxMu.RLock()
	gone := b.g.removed
	var err error
	if !gone {
		_, err = b.g.idx.ReadAt(buf, at)
	}
	b.g.idxMu.RUnlock()
	if gone {
		return nil, ErrLogTruncated
	}
	if err != nil {
		return nil, fmt.Errorf("store: read index %s at %d: %w: %w", idxPathOf(b.g.path), at, errIndexDamaged, err)
	}
	if crc32.Checksum(buf, castagnoli) != b.crc {
		return nil, fmt.Errorf("store: index %s at %d: %w: crc", idxPathOf(b.g.path), at, errIndexDamaged)
	}
	ents := make([]idxEntry, b.n)
	next := b.off
	for i := range ents {
		e := decodeEntry32(buf[i*idxEntryLen:])
		if e.pid != pid || e.off != next || (e.pos < b.g.start && !e.hole()) {
			return nil, fmt.Errorf("store: index %s at %d: %w: entry %d", idxPathOf(b.g.path), at, errIndexDamaged, i)
		}
		next = e.off + int64(e.n)
		ents[i] = e
	}
	return ents, nil
}

// blockLoc says where the block holding an offset is: a block of the
// active segment (ref), or p's span in a sealed segment g, whose footer
// lists the block. end is where p's chunks there end: entries at or past
// it are not p's (fenced, or a later span's).
type blockLoc struct {
	ref  blockRef
	span *segSpan
	g    *segment // the span's segment
	end  int64
}

func (l blockLoc) seg() *segment {
	if l.span != nil {
		return l.g
	}
	return l.ref.g
}

// spanLocLocked is the blockLoc of p's span i. The caller holds p.mu.
func (s *Store) spanLocLocked(p *partition, i int) blockLoc {
	sp := p.spans.At(i)
	return blockLoc{span: &sp, g: s.spanSeg(sp.seg), end: p.spanEndLocked(i)}
}

// locateLocked finds where the block holding off is; false when off is
// below everything indexed. The caller holds p.mu.
func (s *Store) locateLocked(p *partition, off int64) (blockLoc, bool) {
	if len(p.blocks) > 0 && off >= p.blocks[0].off {
		i := p.blockIndexLocked(off)
		return blockLoc{ref: p.blocks[i], end: p.blockEndLocked(i)}, true
	}
	i := p.spanIndexLocked(off)
	if i < 0 {
		return blockLoc{}, false
	}
	return s.spanLocLocked(p, i), true
}

// resolveBlock returns the block of partition pid holding off at loc, reading
// a sealed segment's summary when it is not cached.
func (s *Store) resolveBlock(pid uint32, loc blockLoc, off int64) (blockRef, error) {
	if loc.span == nil {
		return loc.ref, nil
	}
	sm, err := s.summary(loc.g)
	if err != nil {
		return blockRef{}, err
	}
	bs := sm.pidBlocks(pid)
	k := sort.Search(len(bs), func(i int) bool { return bs[i].off > off }) - 1
	if k < 0 {
		return blockRef{}, fmt.Errorf("store: index %s: %w: no block of partition %d at %d in its footer",
			idxPathOf(loc.g.path), errIndexDamaged, pid, off)
	}
	return bs[k].ref(loc.g), nil
}

// blockAt reads the block of partition pid holding off at loc, its
// entries cut at loc.end; gen is the segment's index generation before
// the read (for repairBlock).
func (s *Store) blockAt(pid uint32, loc blockLoc, off int64) ([]idxEntry, uint64, error) {
	gen := loc.seg().idxGen.Load()
	b, err := s.resolveBlock(pid, loc, off)
	if err != nil {
		return nil, gen, err
	}
	ents, err := s.readBlock(pid, b)
	if err != nil {
		return nil, gen, err
	}
	return ents[:sort.Search(len(ents), func(i int) bool { return ents[i].off >= loc.end })], gen, nil
}

// chunks returns p's chunks in order, from the one holding off on, until
// they cover want bytes from off or reach the partition end. Index blocks
// are read without holding p.mu. A large read of old data (in sealed
// segments) also starts reading the blocks the next read of that size
// will need (prefetchIndex).
func (s *Store) chunks(p *partition, off int64, want int64) ([]idxEntry, error) {
	// Room for a get at the tail (a few chunks) in one allocation, not
	// one per doubling.
	out := make([]idxEntry, 0, 8)
	x := off
	repaired := false
	sealed := false
	defer func() {
		if sealed && want >= prefetchMin {
			s.prefetchIndex(p, x, want)
		}
	}()
	for x < off+want {
		p.mu.Lock()
		if x >= p.end {
			p.mu.Unlock()
			break
		}
		if k := p.tailIndexLocked(x); k >= 0 {
			for ; k < len(p.tail) && x < off+want; k++ {
				out = append(out, p.tail[k])
				x = p.tail[k].off + int64(p.tail[k].n)
			}
			p.mu.Unlock()
			break
		}
		loc, ok := s.locateLocked(p, x)
		pid := p.pid
		p.mu.Unlock()
		if !ok {
			break
		}
		sealed = sealed || loc.span != nil
		ents, gen, err := s.blockAt(pid, loc, x)
		k := -1
		if err == nil {
			k = sort.Search(len(ents), func(i int) bool { return ents[i].off > x }) - 1
			if k < 0 || ents[k].off+int64(ents[k].n) <= x {
				// The block found for x has no chunk holding it: the index
				// is not what it must be (contiguous from the partition's
				// first chunk to its end). Taking the last chunk before x
				// again would not move x on, and the read would never end.
				err = fmt.Errorf("store: index %s: %w: no chunk of partition %d at %d in the block found for it",
					idxPathOf(loc.seg().path), errIndexDamaged, pid, x)
			}
		}
		if err != nil {
			if errors.Is(err, errIndexDamaged) && !repaired {
				repaired = true
				if s.repairBlock(loc.seg(), gen, err) == nil {
					continue
				}
			}
			return out, err
		}
		if out == nil {
			// Room for the chunks want needs at this block's average chunk
			// size, so a large read does not grow out a dozen times.
			span := ents[len(ents)-1].off + int64(ents[len(ents)-1].n) - ents[0].off
			out = make([]idxEntry, 0, min(want*int64(len(ents))/max(span, 1)+1, 1<<20))
		}
		// ents[k] holds x, so x moves on.
		for ; k < len(ents) && x < off+want; k++ {
			out = append(out, ents[k])
			x = ents[k].off + int64(ents[k].n)
		}
	}
	return out, nil
}

// prefetchMin is the smallest read whose successor is prefetched: a
// consumer catching up asks for its maximum fetch size (MetaQ's default
// is 1 MiB), a small read is not worth two system calls more.
const prefetchMin = 64 << 10

// indexAheadReads is how many reads ahead prefetchIndex asks for, and
// idxAheadMax the most bytes of index it asks for in one call.
const (
	indexAheadReads = 8
	idxAheadMax     = 4 << 20
)

// prefetchIndex starts reading, without waiting, p's index blocks in
// sealed segments for the next indexAheadReads reads of want bytes from
// off (a consumer going through old data). A partition's blocks are
// spread through its segment's .idx among the other partitions' blocks,
// so the kernel's read-ahead of the file would fetch mostly theirs and
// still leave the reader waiting for each of its own; this names exactly
// its own. p.idxAhead remembers how far they were asked for, so
// consecutive reads ask for each block once.
func (s *Store) prefetchIndex(p *partition, off, want int64) {
	// Further ahead than the log (prefetchLog: two reads): the blocks are a
	// small fraction of what the reads pass over (32 bytes per chunk), and
	// asked for at the same horizon they would queue behind the log's
	// read-ahead and arrive just too late.
	from, to := off, off+indexAheadReads*want
	if ahead := p.idxAhead.Load(); ahead >= off && ahead <= to {
		from = ahead // the rest was asked for by the previous read
	}
	x := from
	defer func() { p.idxAhead.Store(x) }()
	// A partition thinly spread through many segments would have each
	// segment's summary read here, synchronously: read one at most per
	// call (the next reads need it anyway), and ask for at most
	// idxAheadMax.
	asked, loaded := int64(0), false
	for x < to && asked < idxAheadMax {
		p.mu.Lock()
		if x >= p.end || len(p.blocks) > 0 && x >= p.blocks[0].off {
			p.mu.Unlock()
			x = to
			return // the active segment's blocks: recent, in the page cache
		}
		loc, ok := s.locateLocked(p, x)
		pid := p.pid
		p.mu.Unlock()
		if !ok || loc.span == nil {
			x = to
			return
		}
		g := loc.g
		if s.sums.get(g, g.idxGen.Load()) == nil {
			if loaded {
				return // the next read goes on from here
			}
			loaded = true
		}
		sm, err := s.summary(g)
		if err != nil {
			x = to
			return // the read that needs it will find out
		}
		bs := sm.pidBlocks(pid)
		k := max(sort.Search(len(bs), func(i int) bool { return bs[i].off > x })-1, 0)
		// One advice per run of adjacent blocks.
		var runAt, runEnd int64 = -1, -1
		next := loc.end
		g.idxMu.RLock()
		for ; k < len(bs) && bs[k].off < to && bs[k].off < loc.end; k++ {
			if asked >= idxAheadMax {
				next = bs[k].off
				break
			}
			at := int64(idxHeaderLen) + int64(bs[k].at)*idxEntryLen
			n := int64(bs[k].n) * idxEntryLen
			if at != runEnd {
				if runAt >= 0 && !g.removed {
					prefetch(g.idx, runAt, runEnd-runAt)
				}
				runAt = at
			}
			runEnd = at + n
			asked += n
		}
		if runAt >= 0 && !g.removed {
			prefetch(g.idx, runAt, runEnd-runAt)
		}
		g.idxMu.RUnlock()
		if next <= x {
			x = to
			return
		}
		x = min(next, to)
	}
}

// indexDamaged handles an index block that fails its checks: the
// checkpoint goes, so the next start-up rebuilds every index from the log.
func (s *Store) indexDamaged(err error) {
	s.log.Error("STORE: index block damaged; it will be rebuilt from the log at the next start-up", "err", err)
	s.dropCheckpoint()
}

// cutIndexLocked drops p's chunks at and after off (a chunk boundary) from
// its index and makes off its end: the one way the index is cut back, for
// a fence at run time, its replay at start-up, and the rollback after a
// failed fdatasync. Blocks past off are dropped; the block holding off is
// shortened, which reads it. The caller holds p.mu.
func (s *Store) cutIndexLocked(p *partition, off int64) error {
	notStart := fmt.Errorf("offset %d of %s-%d is not a chunk start", off, p.key.topic, p.key.num)
	switch {
	case off == p.end:
	case off > p.end:
		return notStart
	case off <= p.firstIndexedLocked():
		// At or below everything indexed (retention dropped what was
		// below): nothing stays.
		p.spans, p.blocks, p.tail = spanList{}, nil, nil
	case len(p.tail) > 0 && off >= p.tail[0].off:
		k := p.tailIndexLocked(off)
		if p.tail[k].off != off {
			return notStart
		}
		p.tail = p.tail[:k]
	case len(p.blocks) > 0 && off >= p.blocks[0].off:
		i := p.blockIndexLocked(off)
		b := p.blocks[i]
		ents, err := s.readBlock(p.pid, b)
		if err != nil {
			return err
		}
		k := sort.Search(len(ents), func(j int) bool { return ents[j].off >= off })
		if k == len(ents) || ents[k].off != off {
			return notStart
		}
		p.tail = nil
		p.blocks = p.blocks[:i+1]
		if k == 0 {
			p.blocks = p.blocks[:i]
		} else {
			b.n = uint32(k)
			b.crc = crc32.Checksum(encodeEntries(nil, ents[:k]), castagnoli)
			p.blocks[i] = b
		}
	default:
		// In a sealed segment: its footer cannot change, so the span
		// just ends at off now (lookups cut its blocks there).
		i := p.spanIndexLocked(off)
		loc := s.spanLocLocked(p, i)
		ents, _, err := s.blockAt(p.pid, loc, off)
		if err != nil {
			return err
		}
		k := sort.Search(len(ents), func(j int) bool { return ents[j].off >= off })
		if k == len(ents) || ents[k].off != off {
			return notStart
		}
		p.blocks, p.tail = nil, nil
		if loc.span.off == off {
			p.spans.Cut(i)
		} else {
			p.spans.Cut(i + 1)
		}
	}
	p.records -= p.recordsInLocked(p.end - off)
	p.end, p.wEnd = off, off
	p.durable.Store(min(p.durable.Load(), off))
	p.min = min(p.min, off)
	for len(p.segs) > 1 && p.segs[len(p.segs)-1] > off {
		p.segs = p.segs[:len(p.segs)-1]
	}
	if p.segs[0] > off {
		p.segs[0] = off
	}
	p.segLast = p.segs[len(p.segs)-1]
	return nil
}

// offsetForTime returns the offset of p's first chunk appended at or after
// ms, or p's durable end. Spans and blocks carry their first chunk's time
// and times never decrease along the log, so one block is read at most
// (and, in a sealed segment, its footer if not cached).
func (s *Store) offsetForTime(p *partition, ms int64) (int64, error) {
	return s.offsetForTime1(p, ms, true)
}

func (s *Store) offsetForTime1(p *partition, ms int64, retry bool) (int64, error) {
	p.mu.Lock()
	lo, end, pid := p.min, p.durable.Load(), p.pid
	// The first chunk at or after ms is in the last unit (span, block or
	// tail chunk) that starts before ms, or it is the next unit's first.
	if k := sort.Search(len(p.tail), func(i int) bool { return p.tail[i].ms >= ms }); k > 0 {
		// The tail's first chunk is older than ms, so everything before is too.
		next := end
		if k < len(p.tail) {
			next = p.tail[k].off
		}
		p.mu.Unlock()
		return clampTime(next, lo, end), nil
	}
	var loc blockLoc
	var next int64
	if j := sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].ms >= ms }); j > 0 {
		loc = blockLoc{ref: p.blocks[j-1], end: p.blockEndLocked(j - 1)}
		next = loc.end
	} else if j := p.spans.Search(func(sp segSpan) bool { return sp.ms >= ms }); j > 0 {
		loc = s.spanLocLocked(p, j-1)
		next = loc.end
	} else {
		next = p.firstIndexedLocked()
		p.mu.Unlock()
		return clampTime(next, lo, end), nil
	}
	p.mu.Unlock()
	if loc.end <= lo {
		return clampTime(next, lo, end), nil
	}
	gen := loc.seg().idxGen.Load()
	ents, err := s.blockForTime(pid, loc, ms, &next)
	if err != nil {
		if errors.Is(err, errIndexDamaged) && retry {
			if s.repairBlock(loc.seg(), gen, err) == nil {
				return s.offsetForTime1(p, ms, false)
			}
		}
		return 0, err
	}
	if k := sort.Search(len(ents), func(i int) bool { return ents[i].ms >= ms }); k < len(ents) {
		return clampTime(ents[k].off, lo, end), nil
	}
	return clampTime(next, lo, end), nil
}

// blockForTime reads the block at loc whose chunks ms falls among: the
// last one starting before ms (in a sealed segment, found in its footer;
// *next becomes the following block's first offset when there is one).
func (s *Store) blockForTime(pid uint32, loc blockLoc, ms int64, next *int64) ([]idxEntry, error) {
	if loc.span != nil {
		sm, err := s.summary(loc.g)
		if err != nil {
			return nil, err
		}
		bs := sm.pidBlocks(pid)
		a := sort.Search(len(bs), func(i int) bool { return bs[i].off > loc.span.off }) - 1
		z := sort.Search(len(bs), func(i int) bool { return bs[i].off >= loc.end })
		if a < 0 || a >= z {
			return nil, fmt.Errorf("store: index %s: %w: no block of partition %d at %d in its footer",
				idxPathOf(loc.g.path), errIndexDamaged, pid, loc.span.off)
		}
		bs = bs[a:z]
		j := max(sort.Search(len(bs), func(i int) bool { return bs[i].ms >= ms }), 1)
		if j < len(bs) {
			*next = bs[j].off
		}
		loc = blockLoc{ref: bs[j-1].ref(loc.g), end: loc.end}
	}
	ents, err := s.readBlock(pid, loc.ref)
	if err != nil {
		return nil, err
	}
	return ents[:sort.Search(len(ents), func(i int) bool { return ents[i].off >= loc.end })], nil
}

func clampTime(off, lo, end int64) int64 { return min(max(off, lo), end) }

// rebuildIdx rewrites sealed segment g's .idx, footer included, from its
// log: start-up does it for a missing or torn .idx, a reader for a block
// or footer that failed its checks. The new file holds, per partition,
// the chunks of the offset range its span in g covers, taken against its
// range at that moment (retention or a fence may move it meanwhile; the
// spans themselves do not change).
func (s *Store) rebuildIdx(g *segment, gen uint64) error {
	s.rebuildMu.Lock()
	defer s.rebuildMu.Unlock()
	if g.idxGen.Load() != gen {
		return nil // rebuilt meanwhile
	}
	s.log.Warn("STORE: rebuilding a segment index from the log", "segment", g.path)
	byPid := map[uint32][]idxEntry{}
	size := g.size.Load()
	r := newSegReader(g.f, size)
	for x := int64(0); x < size; {
		h, payload, n, err := r.entryAt(x)
		if err != nil {
			return fmt.Errorf("store: rebuild index of %s at %d: %w", g.path, x, err)
		}
		if h.typ == entryData {
			byPid[h.pid] = append(byPid[h.pid], idxEntry{pid: h.pid, n: uint32(len(payload)), off: h.off, pos: g.start + x, ms: h.ms})
		}
		x += int64(n)
	}
	// The chunks each partition's span in g covers, as a contiguous chain.
	var chains [][]idxEntry
	s.mu.RLock()
	for _, p := range s.parts {
		p.mu.Lock()
		i := p.spanOfLocked(g)
		var lo, hi int64
		if i >= 0 {
			lo, hi = p.spans.At(i).off, p.spanEndLocked(i)
		}
		p.mu.Unlock()
		if i < 0 || lo >= hi {
			continue
		}
		var chain []idxEntry
		for _, e := range byPid[p.pid] {
			if e.off < lo || e.off >= hi || p.deadByFence(e.off, int64(e.n), e.pos) {
				continue
			}
			if len(chain) > 0 && e.off != chain[len(chain)-1].off+int64(chain[len(chain)-1].n) {
				continue // a dead chunk (fenced) under a live one's offsets
			}
			if len(chain) == 0 && e.off != lo {
				continue
			}
			chain = append(chain, e)
		}
		if len(chain) == 0 || chain[len(chain)-1].off+int64(chain[len(chain)-1].n) != hi {
			s.mu.RUnlock()
			return fmt.Errorf("store: rebuild index of %s: the log does not hold %s-%d's chunks [%d, %d)",
				g.path, p.key.topic, p.key.num, lo, hi)
		}
		chains = append(chains, chain)
	}
	s.mu.RUnlock()
	b := idxHeader(g.start)
	var fbs []footBlock
	n := uint32(0)
	for _, chain := range chains {
		for k := 0; k < len(chain); k += s.opts.blockEntries {
			blk := chain[k:min(k+s.opts.blockEntries, len(chain))]
			start := len(b)
			b = encodeEntries(b, blk)
			fbs = append(fbs, footBlock{pid: blk[0].pid, at: n, n: uint32(len(blk)), crc: crc32.Checksum(b[start:], castagnoli),
				off: blk[0].off, ms: blk[0].ms})
			n += uint32(len(blk))
		}
	}
	sortFootBlocks(fbs)
	foot := encodeFooter(fbs, n, g.start)
	b = append(b, foot...)
	path := idxPathOf(g.path)
	if err := writeFileAtomic(s.fs, path, b); err != nil {
		return fmt.Errorf("store: rebuild index %s: %w", path, err)
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("store: rebuild index %s: %w", path, err)
	}
	g.idxMu.Lock()
	if g.removed {
		g.idxMu.Unlock()
		f.Close()
		return ErrLogTruncated
	}
	old := g.idx
	g.idx, g.idxN, g.idxSize, g.idxOK = f, n, int64(len(b)), true
	g.sealed, g.footN, g.footCRC = true, uint32(len(fbs)), binary.BigEndian.Uint32(foot[len(foot)-8:])
	newGen := g.idxGen.Add(1)
	g.idxMu.Unlock()
	old.Close()
	s.sums.put(g, newGen, &segSummary{blocks: fbs})
	return nil
}

// deadByFence reports whether a fence made the chunk dead.
func (p *partition) deadByFence(off, n, pos int64) bool {
	for _, f := range p.fences {
		if pos < f.pos && off+n > f.off {
			return true
		}
	}
	return false
}

// repairBlock handles a block (or footer) of segment g that failed its
// checks: a sealed segment's .idx is rebuilt from the log at once (and
// the caller retries); damage in the active segment's .idx cannot be, so
// the checkpoint goes and the next start-up rebuilds it.
func (s *Store) repairBlock(g *segment, gen uint64, cause error) error {
	s.log.Error("STORE: index block damaged", "err", cause)
	s.segMu.RLock()
	active := len(s.segs) > 0 && s.segs[len(s.segs)-1] == g
	s.segMu.RUnlock()
	if active || !g.isSealed() {
		s.indexDamaged(cause)
		return cause
	}
	if err := s.rebuildIdx(g, gen); err != nil {
		s.indexDamaged(err)
		return err
	}
	return nil
}
