package store

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
	"sync"
)

// A sealed segment's .idx ends with a footer, written once when the
// segment is sealed (or its .idx rebuilt from the log):
//
//	header (32) | entries (32 each) | footer blocks (32 each) | trailer (32)
//
//	footer block: pid uint32 | entry number uint32 | entries uint32 | crc32c of the block uint32 |
//	              first offset int64 | first append time int64
//	trailer:      magic "MQIF" | format uint32 | entries uint32 | footer blocks uint32 |
//	              segment start int64 | crc32c uint32 | 0 uint32
//
// The footer lists every block of the segment, sorted by partition and
// offset; its crc32c covers the footer blocks and the trailer up to the
// crc. It is the segment's summary: what a lookup of old data needs
// besides the block itself, read when first needed (see summaryCache).

// footBlock is one block of a sealed segment as its footer lists it.
type footBlock struct {
	pid        uint32
	at, n, crc uint32
	off, ms    int64
}

// segSummary is a sealed segment's footer in memory.
type segSummary struct {
	blocks []footBlock // by pid, then offset
}

// pidBlocks returns pid's blocks in the segment, ascending by offset.
func (sm *segSummary) pidBlocks(pid uint32) []footBlock {
	i := sort.Search(len(sm.blocks), func(i int) bool { return sm.blocks[i].pid >= pid })
	j := i
	for j < len(sm.blocks) && sm.blocks[j].pid == pid {
		j++
	}
	return sm.blocks[i:j]
}

func (b footBlock) ref(g *segment) blockRef {
	return blockRef{g: g, off: b.off, ms: b.ms, at: b.at, n: b.n, crc: b.crc}
}

func encodeFooter(fbs []footBlock, idxN uint32, start int64) []byte {
	b := make([]byte, 0, len(fbs)*footBlockLen+footTrailerLen)
	for _, x := range fbs {
		b = binary.BigEndian.AppendUint32(b, x.pid)
		b = binary.BigEndian.AppendUint32(b, x.at)
		b = binary.BigEndian.AppendUint32(b, x.n)
		b = binary.BigEndian.AppendUint32(b, x.crc)
		b = binary.BigEndian.AppendUint64(b, uint64(x.off))
		b = binary.BigEndian.AppendUint64(b, uint64(x.ms))
	}
	b = binary.BigEndian.AppendUint32(b, footMagic)
	b = binary.BigEndian.AppendUint32(b, formatV3)
	b = binary.BigEndian.AppendUint32(b, idxN)
	b = binary.BigEndian.AppendUint32(b, uint32(len(fbs)))
	b = binary.BigEndian.AppendUint64(b, uint64(start))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return binary.BigEndian.AppendUint32(b, 0)
}

// decodeFooter checks and decodes the footer in b (the .idx's bytes after
// its entries) of a segment starting at start with idxN entries.
func decodeFooter(b []byte, idxN uint32, start int64) ([]footBlock, uint32, error) {
	if len(b) < footTrailerLen {
		return nil, 0, fmt.Errorf("%w: footer of %d bytes", errIndexDamaged, len(b))
	}
	t := b[len(b)-footTrailerLen:]
	m := binary.BigEndian.Uint32(t[12:])
	crc := binary.BigEndian.Uint32(t[24:])
	switch {
	case binary.BigEndian.Uint32(t[0:]) != footMagic || binary.BigEndian.Uint32(t[4:]) != formatV3:
		return nil, 0, fmt.Errorf("%w: no footer trailer", errIndexDamaged)
	case binary.BigEndian.Uint32(t[8:]) != idxN || int64(binary.BigEndian.Uint64(t[16:])) != start:
		return nil, 0, fmt.Errorf("%w: footer of another file", errIndexDamaged)
	case int64(len(b)) != int64(m)*footBlockLen+footTrailerLen:
		return nil, 0, fmt.Errorf("%w: footer of %d bytes for %d blocks", errIndexDamaged, len(b), m)
	case crc32.Checksum(b[:len(b)-8], castagnoli) != crc:
		return nil, 0, fmt.Errorf("%w: footer crc", errIndexDamaged)
	}
	fbs := make([]footBlock, m)
	for i := range fbs {
		e := b[i*footBlockLen:]
		x := footBlock{pid: binary.BigEndian.Uint32(e[0:]), at: binary.BigEndian.Uint32(e[4:]), n: binary.BigEndian.Uint32(e[8:]),
			crc: binary.BigEndian.Uint32(e[12:]), off: int64(binary.BigEndian.Uint64(e[16:])), ms: int64(binary.BigEndian.Uint64(e[24:]))}
		if x.n == 0 || uint64(x.at)+uint64(x.n) > uint64(idxN) ||
			(i > 0 && (x.pid < fbs[i-1].pid || (x.pid == fbs[i-1].pid && x.off <= fbs[i-1].off))) {
			return nil, 0, fmt.Errorf("%w: footer block %d", errIndexDamaged, i)
		}
		fbs[i] = x
	}
	return fbs, crc, nil
}

func sortFootBlocks(fbs []footBlock) {
	slices.SortFunc(fbs, func(a, b footBlock) int {
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
}

// writeFooter seals g's .idx: the footer goes after its entries and, with
// durable, the file is fdatasynced (without, the caller's checkpoint syncs
// it before it vouches for the footer). Only the writer goroutine (or recovery) calls it,
// on a segment no longer written to.
func (s *Store) writeFooter(g *segment, fbs []footBlock, durable bool) error {
	sortFootBlocks(fbs)
	b := encodeFooter(fbs, g.idxN, g.start)
	at := int64(idxHeaderLen) + int64(g.idxN)*idxEntryLen
	path := idxPathOf(g.path)
	if _, err := g.idx.WriteAt(b, at); err != nil {
		return fmt.Errorf("store: write index footer %s at %d: %w", path, at, err)
	}
	if err := g.idx.Truncate(at + int64(len(b))); err != nil {
		return fmt.Errorf("store: truncate index %s: %w", path, err)
	}
	if durable {
		if err := g.idx.Datasync(); err != nil {
			return fmt.Errorf("store: fdatasync %s: %w", path, err)
		}
	}
	g.idxMu.Lock()
	g.idxSize = at + int64(len(b))
	g.sealed, g.footN, g.footCRC = true, uint32(len(fbs)), binary.BigEndian.Uint32(b[len(b)-8:])
	g.idxMu.Unlock()
	s.sums.put(g, g.idxGen.Load(), &segSummary{blocks: fbs})
	return nil
}

// summary returns sealed segment g's footer, from the cache or read from
// its .idx and checked (against the checkpoint's or the sealing's count
// and crc too). A footer that fails its checks is errIndexDamaged: the
// caller rebuilds the .idx from the log (repairBlock).
func (s *Store) summary(g *segment) (*segSummary, error) {
	gen := g.idxGen.Load()
	if sm := s.sums.get(g, gen); sm != nil {
		return sm, nil
	}
	g.idxMu.RLock()
	if g.removed {
		g.idxMu.RUnlock()
		return nil, ErrLogTruncated
	}
	at := int64(idxHeaderLen) + int64(g.idxN)*idxEntryLen
	n, sealed, footN, footCRC := g.idxN, g.sealed, g.footN, g.footCRC
	var b []byte
	var err error
	if sealed && g.idxSize == at+int64(footN)*footBlockLen+footTrailerLen {
		b = make([]byte, g.idxSize-at)
		_, err = g.idx.ReadAt(b, at)
	}
	g.idxMu.RUnlock()
	path := idxPathOf(g.path)
	switch {
	case !sealed:
		return nil, fmt.Errorf("store: index %s: %w: segment has no footer", path, errIndexDamaged)
	case b == nil:
		return nil, fmt.Errorf("store: index %s: %w: footer size", path, errIndexDamaged)
	case err != nil:
		return nil, fmt.Errorf("store: read index footer %s: %w: %w", path, errIndexDamaged, err)
	}
	fbs, crc, err := decodeFooter(b, n, g.start)
	if err != nil {
		return nil, fmt.Errorf("store: index %s: %w", path, err)
	}
	if crc != footCRC {
		return nil, fmt.Errorf("store: index %s: %w: footer crc differs from the checkpoint's", path, errIndexDamaged)
	}
	sm := &segSummary{blocks: fbs}
	s.sums.put(g, gen, sm)
	return sm, nil
}

// summaryCache keeps the summaries of recently used sealed segments, at
// most budget footer blocks in all (the least recently used go first),
// so memory does not grow with the retained segments.
type summaryCache struct {
	mu     sync.Mutex
	budget int
	blocks int
	tick   uint64
	m      map[*segment]*cachedSummary
}

type cachedSummary struct {
	sm   *segSummary
	gen  uint64 // the segment's idxGen it was read at
	used uint64
}

func (c *summaryCache) get(g *segment, gen uint64) *segSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[g]
	if e == nil || e.gen != gen {
		return nil
	}
	c.tick++
	e.used = c.tick
	return e.sm
}

func (c *summaryCache) put(g *segment, gen uint64, sm *segSummary) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[*segment]*cachedSummary)
	}
	if old := c.m[g]; old != nil {
		c.blocks -= len(old.sm.blocks)
	}
	c.tick++
	c.m[g] = &cachedSummary{sm: sm, gen: gen, used: c.tick}
	c.blocks += len(sm.blocks)
	for c.blocks > c.budget && len(c.m) > 1 {
		var lru *segment
		for x, e := range c.m {
			if x != g && (lru == nil || e.used < c.m[lru].used) {
				lru = x
			}
		}
		c.blocks -= len(c.m[lru].sm.blocks)
		delete(c.m, lru)
	}
}

func (c *summaryCache) drop(g *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[g]; e != nil {
		c.blocks -= len(e.sm.blocks)
		delete(c.m, g)
	}
}

// size reports the segments and footer blocks cached.
func (c *summaryCache) size() (segs, blocks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.blocks
}
