package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

const (
	ckptMagic = 0x4D51434B // "MQCK"
	ckptName  = "checkpoint"
	// ckptFormat is the checkpoint's format: 4 (spans delta-encoded) since
	// the .idx files' format 3. A format-3 checkpoint (spans of 20 bytes)
	// is read and the next one written in format 4.
	ckptFormat = 4
)

// The checkpoint (format 4) holds everything start-up needs without
// reading a segment or an index file: the partition table with each
// partition's bounds, virtual segments, fences, one span per sealed
// segment it has chunks in and the blocks of the active segment; for each
// segment the number of .idx entries it vouches for and, once sealed, the
// footer's block count and crc; and the quarantined ranges, all complete
// up to log position pos. Sealed segments' blocks are in their footers,
// not here: the checkpoint grows with partitions x segments (a few bytes
// per span, see ckptSpans), not with the retained chunks.
type ckptPart struct {
	pid      uint32
	key      pkey
	min, end int64
	base     int64
	records  int64
	segs     []int64
	fences   []fenceRef
	spans    ckptSpans
	blocks   []ckptBlock
	// mem is the partition's spans as memory holds them (segments by
	// sequence number), copied by the writer's snapshot and turned into
	// spans by the checkpoint's own goroutine (resolveSpans); not encoded.
	mem spanList
	// sealSpan, when hasSeal, is the partition's span in the segment a
	// roll is sealing (its blocks there at the snapshot), after mem's.
	sealSpan segSpan
	hasSeal  bool
}

// ckptSpans is a partition's spans as the checkpoint (format 4) holds
// them: each span's segment (an index into checkpoint.segs), offset and
// time as deltas from the span before (the first from zero), encoded by
// appendSpanDelta as in memory (3-6 bytes a span for a busy partition,
// against 20 in format 3). On disk: uint32 count, uint32 bytes, bytes.
type ckptSpans struct {
	n    int
	b    []byte
	last segSpan
}

// add appends a span (seg being the checkpoint's segment index).
func (c *ckptSpans) add(k segSpan) {
	c.b = appendSpanDelta(c.b, c.last, k)
	c.last = k
	c.n++
}

// each calls f for every span in order; it fails on bytes that do not
// hold exactly n spans.
func (c *ckptSpans) each(f func(i int, k segSpan) error) error {
	var k segSpan
	b := c.b
	for i := 0; i < c.n; i++ {
		dseg, n1 := binary.Uvarint(b)
		if n1 <= 0 || dseg > math.MaxUint32 {
			return errCkpt
		}
		doff, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return errCkpt
		}
		dms, n3 := binary.Varint(b[n1+n2:])
		if n3 <= 0 {
			return errCkpt
		}
		b = b[n1+n2+n3:]
		k = segSpan{seg: k.seg + uint32(dseg), off: k.off + int64(doff), ms: k.ms + dms}
		if f != nil {
			if err := f(i, k); err != nil {
				return err
			}
		}
	}
	if len(b) != 0 {
		return errCkpt
	}
	return nil
}

type ckptBlock struct {
	seg     uint32 // index into checkpoint.segs
	off, ms int64
	at, n   uint32
	crc     uint32
}

type ckptSeg struct {
	start   int64
	idxN    uint32
	sealed  bool
	footN   uint32
	footCRC uint32
}

type checkpoint struct {
	version    uint32
	pos        int64
	nextPid    uint32
	quarantine []posRange
	segs       []ckptSeg
	parts      []ckptPart
}

func encodeCheckpoint(c *checkpoint) []byte {
	return encodeCheckpointAs(c, ckptFormat, appendSpans)
}

// appendSpans writes a partition's spans as format 4 does: their count,
// then their delta encoding.
func appendSpans(b []byte, l *ckptSpans) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(l.n))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.b)))
	return append(b, l.b...)
}

// ckptSize is the length of c encoded in format 4 (crc included): the
// buffer is taken at once, as one array of about 100 bytes per partition
// instead of a dozen doublings and their copies (at 10,000 partitions a
// megabyte each checkpoint, and a checkpoint at each roll).
func ckptSize(c *checkpoint) int {
	n := 4 + 4 + 8 + 4 + 4 + 16*len(c.quarantine) + 4 + 24*len(c.segs) + 4 + 4
	for i := range c.parts {
		p := &c.parts[i]
		n += 4 + 2 + len(p.key.topic) + 4 + 4*8 + 4 + 8*len(p.segs) + 4 + 16*len(p.fences) + 8 + len(p.spans.b) + 4 + 32*len(p.blocks)
	}
	return n
}

// encodeCheckpointAs encodes c in format, whose partitions' spans
// spans writes (the formats differ only there; tests write format 3).
func encodeCheckpointAs(c *checkpoint, format uint32, spans func([]byte, *ckptSpans) []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, ckptSize(c)), ckptMagic)
	b = binary.BigEndian.AppendUint32(b, format)
	b = binary.BigEndian.AppendUint64(b, uint64(c.pos))
	b = binary.BigEndian.AppendUint32(b, c.nextPid)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.quarantine)))
	for _, q := range c.quarantine {
		b = binary.BigEndian.AppendUint64(b, uint64(q.from))
		b = binary.BigEndian.AppendUint64(b, uint64(q.to))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.segs)))
	for _, g := range c.segs {
		b = binary.BigEndian.AppendUint64(b, uint64(g.start))
		b = binary.BigEndian.AppendUint32(b, g.idxN)
		sealed := uint32(0)
		if g.sealed {
			sealed = 1
		}
		b = binary.BigEndian.AppendUint32(b, sealed)
		b = binary.BigEndian.AppendUint32(b, g.footN)
		b = binary.BigEndian.AppendUint32(b, g.footCRC)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.parts)))
	for _, p := range c.parts {
		b = binary.BigEndian.AppendUint32(b, p.pid)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.key.topic)))
		b = append(b, p.key.topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(p.key.num)))
		b = binary.BigEndian.AppendUint64(b, uint64(p.min))
		b = binary.BigEndian.AppendUint64(b, uint64(p.end))
		b = binary.BigEndian.AppendUint64(b, uint64(p.base))
		b = binary.BigEndian.AppendUint64(b, uint64(p.records))
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.segs)))
		for _, x := range p.segs {
			b = binary.BigEndian.AppendUint64(b, uint64(x))
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.fences)))
		for _, f := range p.fences {
			b = binary.BigEndian.AppendUint64(b, uint64(f.pos))
			b = binary.BigEndian.AppendUint64(b, uint64(f.off))
		}
		b = spans(b, &p.spans)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.blocks)))
		for _, k := range p.blocks {
			b = binary.BigEndian.AppendUint32(b, k.seg)
			b = binary.BigEndian.AppendUint64(b, uint64(k.off))
			b = binary.BigEndian.AppendUint64(b, uint64(k.ms))
			b = binary.BigEndian.AppendUint32(b, k.at)
			b = binary.BigEndian.AppendUint32(b, k.n)
			b = binary.BigEndian.AppendUint32(b, k.crc)
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errCkpt = fmt.Errorf("%w: checkpoint", ErrCorrupt)

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || n < 0 || len(d.b) < n {
		d.err = errCkpt
		return make([]byte, max(n, 8))
	}
	x := d.b[:n]
	d.b = d.b[n:]
	return x
}
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) i64() int64  { return int64(binary.BigEndian.Uint64(d.take(8))) }

// count reads a count of items of at least size bytes each, refusing one
// the rest of the input cannot hold.
func (d *decoder) count(size int) int {
	n := int(d.u32())
	if n > len(d.b)/size {
		d.err = errCkpt
		return 0
	}
	return n
}

// decodeCheckpoint decodes a checkpoint of format 4, of format 3 (spans
// of 20 bytes each), or of format 2 (no sealed flags or spans: every block
// of every segment is in it). For a checkpoint of another format it
// returns only the version (and no error), so the caller can upgrade or
// refuse with a clear message.
func decodeCheckpoint(b []byte) (*checkpoint, error) {
	if len(b) < 12 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, errCkpt
	}
	d := &decoder{b: b[:len(b)-4]}
	if d.u32() != ckptMagic {
		return nil, errCkpt
	}
	c := &checkpoint{version: d.u32()}
	v3 := c.version == formatV3 || c.version == ckptFormat // sealed flags and spans
	if !v3 && c.version != formatV2 {
		return c, nil
	}
	c.pos, c.nextPid = d.i64(), d.u32()
	nq := d.count(16)
	for i := 0; i < nq && d.err == nil; i++ {
		c.quarantine = append(c.quarantine, posRange{d.i64(), d.i64()})
	}
	ng := d.count(12)
	for i := 0; i < ng && d.err == nil; i++ {
		g := ckptSeg{start: d.i64(), idxN: d.u32()}
		if !v3 {
			c.segs = append(c.segs, g)
			continue
		}
		sealed := d.u32()
		g.footN, g.footCRC = d.u32(), d.u32()
		if sealed > 1 || (sealed == 0 && g.footN != 0) {
			d.err = errCkpt
		}
		g.sealed = sealed == 1
		c.segs = append(c.segs, g)
	}
	np := d.count(4)
	for i := 0; i < np && d.err == nil; i++ {
		p := ckptPart{pid: d.u32()}
		p.key.topic = string(d.take(int(d.u16())))
		p.key.num = int(int32(d.u32()))
		p.min, p.end = d.i64(), d.i64()
		p.base, p.records = d.i64(), d.i64()
		ns := d.count(8)
		for j := 0; j < ns && d.err == nil; j++ {
			p.segs = append(p.segs, d.i64())
		}
		nf := d.count(16)
		for j := 0; j < nf && d.err == nil; j++ {
			p.fences = append(p.fences, fenceRef{pos: d.i64(), off: d.i64()})
		}
		switch c.version {
		case formatV3:
			nsp := d.count(20)
			for j := 0; j < nsp && d.err == nil; j++ {
				p.spans.add(segSpan{seg: d.u32(), off: d.i64(), ms: d.i64()})
			}
		case ckptFormat:
			p.spans.n = d.count(3)
			if nb := d.count(1); d.err == nil {
				p.spans.b = d.take(nb)
			}
			if d.err == nil && p.spans.each(nil) != nil {
				d.err = errCkpt
			}
		}
		nb := d.count(32)
		p.blocks = make([]ckptBlock, 0, nb)
		for j := 0; j < nb && d.err == nil; j++ {
			p.blocks = append(p.blocks, ckptBlock{seg: d.u32(), off: d.i64(), ms: d.i64(), at: d.u32(), n: d.u32(), crc: d.u32()})
		}
		if d.err == nil && (len(p.segs) == 0 || p.min > p.end) {
			return nil, errCkpt
		}
		c.parts = append(c.parts, p)
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errCkpt
	}
	return c, nil
}

// errNewerFormat refuses a data directory written by a later version.
var errNewerFormat = errors.New("written by a newer version of the store")

// loadCheckpoint restores the partition table and the index block
// directory from the checkpoint, and returns the position from which
// recovery must scan the log. A missing or unusable checkpoint, or index
// files that do not hold what it vouches for, fall back to scanning (and
// re-indexing) the whole log; a format-1 directory is upgraded that way.
func (s *Store) loadCheckpoint() (int64, error) {
	b, err := readFile(s.fs, filepath.Join(s.dir, ckptName))
	var c *checkpoint
	if err == nil {
		c, err = decodeCheckpoint(b)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		s.log.Warn("STORE: checkpoint not usable, re-indexing the whole log", "err", err)
	case c.version == formatV1:
		s.log.Warn("STORE: data directory of format 1: upgrading in place, re-indexing the whole log once", "dir", s.dir)
	case c.version == formatV2:
		if err := s.upgradeV2(c); err != nil {
			s.log.Warn("STORE: data directory of format 2 cannot be upgraded from its checkpoint; re-indexing the whole log once",
				"dir", s.dir, "err", err)
		} else if err := s.applyCheckpoint(c); err != nil {
			s.log.Warn("STORE: checkpoint does not match the files, re-indexing the whole log", "err", err)
		} else {
			s.log.Info("STORE: data directory of format 2 upgraded in place", "dir", s.dir, "segments", len(c.segs))
			return c.pos, nil
		}
	case c.version != formatV3 && c.version != ckptFormat:
		return 0, fmt.Errorf("store: checkpoint %s has format %d, %w (this one reads formats 1 to %d); refusing to open it",
			filepath.Join(s.dir, ckptName), c.version, errNewerFormat, ckptFormat)
	default:
		// Format 3 differs only in how spans are written: the next
		// checkpoint (at the next roll or stop) is format 4.
		if err := s.applyCheckpoint(c); err != nil {
			s.log.Warn("STORE: checkpoint does not match the files, re-indexing the whole log", "err", err)
		} else {
			s.log.Info("STORE: loaded checkpoint", "position", c.pos, "partitions", len(c.parts), "format", c.version)
			return c.pos, nil
		}
	}
	s.parts = make(map[pkey]*partition)
	s.byTopic = make(map[string]*topicParts)
	s.byPid = make(map[uint32]*partition)
	s.nextPid = 0
	s.quarantine = nil
	s.w.lastMs = 0
	for _, g := range s.segs {
		if err := s.resetIdx(g, 0); err != nil {
			if !isNoSpace(err) {
				return 0, err
			}
			// No room for the header: the scan holds the index in
			// memory, and its sealing writes the header too.
			s.noIndexRoom(err)
		}
	}
	return s.segs[0].start, nil
}

// upgradeV2 turns a format-2 directory into format 3 from its checkpoint,
// reading no log: each segment the checkpoint saw sealed gets a footer
// listing the blocks the checkpoint held for it, every .idx it knows gets
// the format-3 header (the entries are the same), and c becomes the
// format-3 checkpoint that describes the result (spans for the sealed
// segments' blocks, the active one's blocks as they were). Each step can
// be repeated: a crash during the upgrade leaves the format-2 checkpoint
// in place, and the next start-up upgrades again.
func (s *Store) upgradeV2(c *checkpoint) error {
	if len(c.segs) == 0 {
		return fmt.Errorf("checkpoint without segments")
	}
	byStart := make(map[int64]*segment, len(s.segs))
	for _, g := range s.segs {
		byStart[g.start] = g
	}
	foot := make([][]footBlock, len(c.segs))
	for _, cp := range c.parts {
		for _, k := range cp.blocks {
			if int(k.seg) >= len(c.segs) {
				return fmt.Errorf("%w: block of %s-%d in segment %d", errCkpt, cp.key.topic, cp.key.num, k.seg)
			}
			foot[k.seg] = append(foot[k.seg], footBlock{pid: cp.pid, at: k.at, n: k.n, crc: k.crc, off: k.off, ms: k.ms})
		}
	}
	// The checkpoint was written while its last segment was active; the
	// ones before it were sealed and their .idx complete.
	for i := range c.segs {
		cg := &c.segs[i]
		g := byStart[cg.start]
		if g == nil {
			continue
		}
		if !v2Header(g) && !g.idxOK {
			return fmt.Errorf("index %s has no header of format 2 or 3", idxPathOf(g.path))
		}
		if g.idxSize < idxHeaderLen+int64(cg.idxN)*idxEntryLen {
			return fmt.Errorf("index %s is shorter than its checkpoint says", idxPathOf(g.path))
		}
		if _, err := g.idx.WriteAt(idxHeader(g.start), 0); err != nil {
			return fmt.Errorf("store: upgrade index %s: %w", idxPathOf(g.path), err)
		}
		g.idxOK = true
		if i == len(c.segs)-1 {
			continue
		}
		for _, b := range foot[i] {
			if uint64(b.at)+uint64(b.n) > uint64(cg.idxN) || b.n == 0 {
				return fmt.Errorf("%w: block beyond the entries of %s", errCkpt, idxPathOf(g.path))
			}
		}
		g.idxN = cg.idxN
		if err := s.writeFooter(g, foot[i], true); err != nil {
			return err
		}
		cg.sealed, cg.footN, cg.footCRC = true, g.footN, g.footCRC
	}
	for j := range c.parts {
		cp := &c.parts[j]
		var active []ckptBlock
		for _, k := range cp.blocks {
			if c.segs[k.seg].sealed {
				if cp.spans.n == 0 || cp.spans.last.seg != k.seg {
					cp.spans.add(segSpan{seg: k.seg, off: k.off, ms: k.ms})
				}
			} else {
				active = append(active, k)
			}
		}
		cp.blocks = active
	}
	c.version = ckptFormat
	return s.fs.SyncDir(s.logDir)
}

// v2Header reports whether g's .idx has a format-2 header for g.
func v2Header(g *segment) bool {
	var h [idxHeaderLen]byte
	if _, err := g.idx.ReadAt(h[:], 0); err != nil {
		return false
	}
	return binary.BigEndian.Uint32(h[0:]) == idxMagic && binary.BigEndian.Uint32(h[4:]) == formatV2 &&
		int64(binary.BigEndian.Uint64(h[8:])) == g.start
}

func (s *Store) applyCheckpoint(c *checkpoint) error {
	last := s.segs[len(s.segs)-1]
	if c.pos < s.segs[0].start || c.pos > last.end() {
		return fmt.Errorf("checkpoint position %d outside the log [%d, %d]", c.pos, s.segs[0].start, last.end())
	}
	byStart := make(map[int64]*segment, len(s.segs))
	for _, g := range s.segs {
		byStart[g.start] = g
	}
	segs := make([]*segment, len(c.segs))
	vouched := make(map[*segment]uint32, len(c.segs))
	var torn []*segment
	for i, cg := range c.segs {
		g := byStart[cg.start]
		if g == nil {
			continue // removed by retention after the checkpoint; no span may use it
		}
		segs[i] = g
		if cg.sealed {
			if g.end() > c.pos || g == last {
				return fmt.Errorf("segment %s sealed in the checkpoint but written after it", g.path)
			}
			// Sealed: its .idx must be exactly entries and footer. The
			// footer's content is checked when first read.
			g.idxN, g.sealed, g.footN, g.footCRC = cg.idxN, true, cg.footN, cg.footCRC
			want := int64(idxHeaderLen) + int64(cg.idxN)*idxEntryLen + int64(cg.footN)*footBlockLen + footTrailerLen
			if !g.idxOK || g.idxSize != want {
				s.log.Warn("STORE: index file of a sealed segment missing or of the wrong size; rebuilding it from the log",
					"index", idxPathOf(g.path), "size", g.idxSize, "want", want)
				torn = append(torn, g)
			}
			continue
		}
		if !g.idxOK || g.idxSize < idxHeaderLen+int64(cg.idxN)*idxEntryLen {
			return fmt.Errorf("index %s of a segment being written at the checkpoint is missing or torn", idxPathOf(g.path))
		}
		vouched[g] = cg.idxN
	}
	for _, g := range s.segs {
		if g.start < c.pos && g.end() <= c.pos && g != last {
			if i := sort.Search(len(c.segs), func(i int) bool { return c.segs[i].start >= g.start }); i == len(c.segs) || c.segs[i].start != g.start {
				return fmt.Errorf("segment %s is not in the checkpoint", g.path)
			}
		}
	}
	s.nextPid = c.nextPid
	s.quarantine = c.quarantine
	for _, cp := range c.parts {
		if checkKey(cp.key.topic, cp.key.num) != nil || cp.pid >= c.nextPid || s.byPid[cp.pid] != nil || s.parts[cp.key] != nil {
			return errCkpt
		}
		p := newPartition(cp.key, cp.pid, cp.min)
		p.end = cp.end
		p.base, p.records = cp.base, cp.records
		if len(cp.segs) == 0 {
			return errCkpt
		}
		p.setSegsLocked(cp.segs)
		p.fences = cp.fences
		prev := int64(-1)
		var prevSeg *segment
		err := cp.spans.each(func(i int, k segSpan) error {
			if int(k.seg) >= len(segs) || segs[k.seg] == nil || !c.segs[k.seg].sealed || k.off <= prev || k.off > cp.end ||
				(prevSeg != nil && segs[k.seg].start <= prevSeg.start) {
				return fmt.Errorf("%w: span %d of %s-%d", errCkpt, i, cp.key.topic, cp.key.num)
			}
			prevSeg = segs[k.seg]
			p.spans.Append(segSpan{seg: prevSeg.seq, off: k.off, ms: k.ms})
			prev = k.off
			s.w.lastMs = max(s.w.lastMs, k.ms)
			return nil
		})
		if err != nil {
			return err
		}
		p.blocks = make([]blockRef, len(cp.blocks))
		for i, k := range cp.blocks {
			if int(k.seg) >= len(segs) || segs[k.seg] == nil || c.segs[k.seg].sealed || k.at+k.n > vouched[segs[k.seg]] || k.n == 0 ||
				k.off <= prev || k.off > cp.end {
				return fmt.Errorf("%w: block %d of %s-%d", errCkpt, i, cp.key.topic, cp.key.num)
			}
			p.blocks[i] = blockRef{g: segs[k.seg], off: k.off, ms: k.ms, at: k.at, n: k.n, crc: k.crc}
			prev = k.off
			s.w.lastMs = max(s.w.lastMs, k.ms)
		}
		s.setPartLocked(p)
		s.byPid[cp.pid] = p
	}
	for _, g := range torn {
		if err := s.rebuildIdx(g, g.idxGen.Load()); err != nil {
			return err
		}
	}
	// The part of each unsealed .idx the checkpoint does not vouch for
	// (written after it, a footer included) is cut away; the scan from pos
	// writes it again. A segment the checkpoint does not know was created
	// after it and is re-indexed whole.
	for _, g := range s.segs {
		if !g.sealed {
			if err := s.resetIdx(g, vouched[g]); err != nil {
				if !isNoSpace(err) {
					return err
				}
				// A segment created after the checkpoint and no room
				// for its header: as in loadCheckpoint's fallback.
				s.noIndexRoom(err)
			}
		}
	}
	return nil
}

// writeCheckpoint records the state at the writer's position. Only the
// writer goroutine (or Close after it stopped) calls it, after a sync, so
// the state is consistent and the position durable. Every tail is written
// out as a block first and the active .idx fdatasynced before the file is
// written, so the checkpoint vouches only for index entries on disk.
func (s *Store) writeCheckpoint() error {
	job, err := s.buildCheckpoint(nil)
	if err != nil || job == nil {
		return err
	}
	return s.storeCheckpoint(job)
}

// ckptWriter orders the checkpoint files: a roll's checkpoint is built by
// the writer (a snapshot of the state at its position) and written by a
// goroutine of its own, so the writer does not wait for its encoding,
// the fdatasyncs of the .idx files it vouches for and its file's, and so
// is retention's (checkpointAside); Close's is written synchronously. A
// checkpoint being written, or a removal (dropCheckpoint), waits for one
// being written, and a checkpoint older than the last written is dropped.
type ckptWriter struct {
	// mu is held while a checkpoint file is written or removed. It comes
	// after partition.mu (dropCheckpoint is called under it) and before a
	// segment's idxMu and healthMu.
	mu      sync.Mutex
	written uint64 // under mu: seq of the last checkpoint written
	seq     uint64 // the writer's: seq of the last checkpoint built
	wg      sync.WaitGroup
}

// ckptJob is a checkpoint built by the writer, to be written: the .idx
// files of syncIdx are fdatasynced first (the active segment's, and at a
// roll the sealed one's footer).
type ckptJob struct {
	c       *checkpoint
	seq     uint64
	syncIdx []*segment
	// seqIdx[seq-seq0] is the checkpoint's index of segment seq + 1, 0
	// for none (seqs ascend along the list, with gaps where recovery cut
	// segments away).
	seq0   uint32
	seqIdx []uint32
}

// resolveSpans turns each partition's spans from memory's form (by
// segment sequence number) into the checkpoint's (by index into its
// segment list), dropping those whose segment the snapshot no longer had:
// on the checkpoint's goroutine, so that the writer only copies them (a
// few bytes per partition and sealed segment).
func (j *ckptJob) resolveSpans() {
	for i := range j.c.parts {
		cp := &j.c.parts[i]
		cp.spans.b = make([]byte, 0, cp.mem.encodedLen())
		for sp := range cp.mem.All() {
			if sp.seg < j.seq0 || sp.seg-j.seq0 >= uint32(len(j.seqIdx)) || j.seqIdx[sp.seg-j.seq0] == 0 {
				continue // its segment is gone: the span is below min
			}
			cp.spans.add(segSpan{seg: j.seqIdx[sp.seg-j.seq0] - 1, off: sp.off, ms: sp.ms})
		}
		if sp := cp.sealSpan; cp.hasSeal && sp.seg >= j.seq0 && sp.seg-j.seq0 < uint32(len(j.seqIdx)) && j.seqIdx[sp.seg-j.seq0] != 0 {
			cp.spans.add(segSpan{seg: j.seqIdx[sp.seg-j.seq0] - 1, off: sp.off, ms: sp.ms})
		}
		cp.mem = spanList{}
	}
}

// buildCheckpoint writes every tail out as blocks of the active .idx and
// snapshots the state at the writer's position (see writeCheckpoint); nil
// when checkpoints are off. sealed, when not nil, is the segment a roll
// is sealing (sealJob): each partition's blocks in it are recorded as its
// span there, and the sealing fills in the segment's entry (its entry
// count and footer) and makes its .idx durable before the checkpoint is
// written.
func (s *Store) buildCheckpoint(sealed *segment) (*ckptJob, error) {
	w := &s.w
	if s.noCheckpoint.Load() {
		return nil, nil
	}
	if err := s.flushTails(w.active); err != nil {
		return nil, err
	}
	c := &checkpoint{pos: w.pos}
	segIdx := make(map[*segment]uint32)
	// seqIdx[seq-seq0] is the checkpoint's index of segment seq + 1, 0
	// for none (seqs ascend along the list, with gaps where recovery cut
	// segments away).
	var seqIdx []uint32
	var seq0 uint32
	s.segMu.RLock()
	if len(s.segs) > 0 {
		seq0 = s.segs[0].seq
		seqIdx = make([]uint32, s.segs[len(s.segs)-1].seq-seq0+1)
	}
	for i, g := range s.segs {
		g.idxMu.RLock() // rebuildIdx may replace a sealed segment's .idx
		c.segs = append(c.segs, ckptSeg{start: g.start, idxN: g.idxN, sealed: g.sealed, footN: g.footN, footCRC: g.footCRC})
		g.idxMu.RUnlock()
		segIdx[g] = uint32(i)
		seqIdx[g.seq-seq0] = uint32(i) + 1
	}
	c.quarantine = append(c.quarantine, s.quarantine...)
	s.segMu.RUnlock()
	s.mu.RLock()
	c.nextPid = s.nextPid
	c.parts = make([]ckptPart, 0, len(s.parts))
	// The partitions' segments and spans are copied into a few shared
	// arrays rather than a few arrays each: 10,000 partitions would
	// otherwise cost the writer tens of thousands of allocations a roll.
	var segsA []int64
	var spanData []byte
	var spanRestarts []spanRestart
	for _, p := range s.parts {
		p.mu.Lock()
		cp := ckptPart{pid: p.pid, key: p.key, min: p.min, end: p.end, base: p.base, records: p.records, segs: arenaCopy(&segsA, p.segs),
			fences: append([]fenceRef(nil), p.fences...), blocks: make([]ckptBlock, 0, len(p.blocks))}
		cp.mem = spanList{data: arenaCopy(&spanData, p.spans.data), restarts: arenaCopy(&spanRestarts, p.spans.restarts), n: p.spans.n, skip: p.spans.skip}
		for _, b := range p.blocks {
			if sealed != nil && b.g == sealed {
				if !cp.hasSeal {
					cp.sealSpan, cp.hasSeal = segSpan{seg: sealed.seq, off: b.off, ms: b.ms}, true
				}
				continue
			}
			i, ok := segIdx[b.g]
			if !ok {
				continue // its segment is gone: the block is below min
			}
			cp.blocks = append(cp.blocks, ckptBlock{seg: i, off: b.off, ms: b.ms, at: b.at, n: b.n, crc: b.crc})
		}
		p.mu.Unlock()
		c.parts = append(c.parts, cp)
	}
	s.mu.RUnlock()
	s.ckpt.seq++
	job := &ckptJob{c: c, seq: s.ckpt.seq, syncIdx: []*segment{w.active}, seq0: seq0, seqIdx: seqIdx}
	if sealed != nil {
		job.syncIdx = append(job.syncIdx, sealed)
	}
	return job, nil
}

// arenaCopy copies src to the end of *arena and returns the copy (nil for
// none), capped so that appending to it cannot reach into the next. A full
// arena is replaced by a new one; the copies made into it stay valid.
func arenaCopy[T any](arena *[]T, src []T) []T {
	if len(src) == 0 {
		return nil
	}
	if cap(*arena)-len(*arena) < len(src) {
		*arena = make([]T, 0, max(len(src), 2*cap(*arena), 1024))
	}
	start := len(*arena)
	*arena = append(*arena, src...)
	return (*arena)[start:len(*arena):len(*arena)]
}

// storeCheckpoint makes job's .idx files durable, then encodes and writes
// its checkpoint, unless a newer one was written meanwhile or checkpoints
// were turned off (dropCheckpoint). Any goroutine may call it.
func (s *Store) storeCheckpoint(job *ckptJob) error {
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	if job.seq <= s.ckpt.written || s.noCheckpoint.Load() {
		return nil
	}
	for _, g := range job.syncIdx {
		g.idxMu.RLock()
		var err error
		if !g.removed {
			err = g.idx.Datasync()
		}
		g.idxMu.RUnlock()
		if err != nil {
			return fmt.Errorf("store: fdatasync %s: %w", idxPathOf(g.path), err)
		}
	}
	c := job.c
	job.resolveSpans()
	slices.SortFunc(c.parts, func(a, b ckptPart) int { return cmp.Compare(a.pid, b.pid) })
	if err := writeFileAtomic(s.fs, filepath.Join(s.dir, ckptName), encodeCheckpoint(c)); err != nil {
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	s.ckpt.written = job.seq
	return nil
}

// flushTails writes every partition's tail into g's .idx (the writer at a
// roll or a checkpoint, or recovery at the end of a segment).
func (s *Store) flushTails(g *segment) error {
	return s.flushTailsOf(s.partitionList(), g, 1, false)
}

// partitionList returns the partitions of the table.
func (s *Store) partitionList() []*partition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	return ps
}

// sealed is called by the writer (or recovery) when g stopped being the
// active segment: the tails go into its .idx, then a footer listing every
// block in it, and the file is made durable; each partition's blocks in g
// then become one span. So no index entry refers to a sealed segment from
// memory alone, and memory keeps nothing per block of a sealed segment.
//
// With durable false (a roll) the footer is not fdatasynced here: the
// roll's checkpoint, the first to vouch for it, syncs it before it is
// written (storeCheckpoint).
func (s *Store) sealed(g *segment, durable bool) error {
	if g.sealed {
		return nil
	}
	if err := s.flushTails(g); err != nil {
		return err
	}
	return s.sealBlocks(g, s.partitionList(), durable)
}

// sealBlocks writes g's footer, listing every block of ps in g (all in its
// .idx by then), and turns each partition's blocks in g into one span.
func (s *Store) sealBlocks(g *segment, ps []*partition, durable bool) error {
	var fbs []footBlock
	for _, p := range ps {
		p.mu.Lock()
		for _, b := range p.blocks {
			if b.g == g {
				fbs = append(fbs, footBlock{pid: p.pid, at: b.at, n: b.n, crc: b.crc, off: b.off, ms: b.ms})
			}
		}
		p.mu.Unlock()
	}
	if err := s.writeFooter(g, fbs, durable); err != nil {
		return err
	}
	for _, p := range ps {
		p.mu.Lock()
		k, first := 0, true
		for _, b := range p.blocks {
			if b.g != g {
				p.blocks[k] = b
				k++
			} else if first {
				first = false
				p.spans.Append(segSpan{seg: g.seq, off: b.off, ms: b.ms})
			}
		}
		clear(p.blocks[k:])
		p.blocks = p.blocks[:k]
		if k == 0 {
			p.blocks = nil // the active segment's blocks start a new array
		}
		p.mu.Unlock()
	}
	return nil
}

// sealJob is a roll's sealing of the segment it left, done by a goroutine
// of the store's while the writer goes on with the next appends: at the
// roll the writer only turns each partition's tail into a block of the
// sealed segment held in memory (blockRef.mem, its place in the .idx
// assigned), so reads find those chunks at once; the goroutine writes
// those blocks into the .idx, then the footer, turns each partition's
// blocks there into a span, and writes the roll's checkpoint (built by
// the writer at the roll). The writer waits for the sealing before the
// next roll (waitSealed), and for the sealing and its checkpoint
// (waitSeal) before anything that is not an append (a fence, a hole, a
// checkpoint, ...) and at Close. A roll's checkpoint is written after the
// previous roll's (prev), so each sealed .idx is fdatasynced by the
// checkpoint that first vouches for it.
type sealJob struct {
	g      *segment
	ps     []*partition
	mem    []pendBlock // the blocks held in memory, in .idx order
	idxN   uint32      // the .idx's entries once they are written
	ckpt   *ckptJob    // the roll's checkpoint, nil when checkpoints are off
	prev   *sealJob    // the previous roll's, until its checkpoint is written
	sealed chan struct{}
	done   chan struct{}
	err    error // read after sealed
	retry  int   // how many sealings of g failed before this one
	// header: g's .idx header is written again first (recovery could not
	// write it, or wrote no block of g: see holdIndex).
	header bool
	// rest are the segments after g whose index recovery held in memory
	// (holdIndex), sealed in log order after g, each a job of its own
	// (g, ps, mem, idxN, header). The sealing goroutine takes each off
	// the front as it is sealed; headDone says g is. Both are written
	// before sealed is closed.
	rest     []*sealJob
	headDone bool
}

// detachTails starts the sealing of g (no longer active): every tail
// becomes a block of g held in memory, numbered after g's blocks on disk.
// The writer calls it at a roll, before the next append.
func (s *Store) detachTails(g *segment) *sealJob {
	ps := s.partitionList()
	job := &sealJob{g: g, ps: ps, mem: make([]pendBlock, 0, len(ps)), sealed: make(chan struct{}), done: make(chan struct{})}
	at := g.idxN
	// One allocation for every partition's memBlock, not one each.
	mbs := make([]memBlock, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		if n := len(p.tail); n > 0 {
			mbs = append(mbs, memBlock{ents: p.tail})
			ref := blockRef{g: g, off: p.tail[0].off, ms: p.tail[0].ms, at: at, n: uint32(n), mem: &mbs[len(mbs)-1]}
			p.blocks = append(p.blocks, ref)
			job.mem = append(job.mem, pendBlock{p, ref})
			at += uint32(n)
			p.tail = nil
		}
		p.mu.Unlock()
	}
	job.idxN = at
	return job
}

// seal runs job (on its own goroutine): the blocks held in memory go into
// the .idx, then the footer, the spans, and the roll's checkpoint. A
// failure leaves the blocks in memory (still read from there) and drops
// the checkpoint, so the next start-up re-indexes the log; an error
// writing the .idx refuses appends as any failed index write does. It is
// done again when the disk has room (writeOK, retrySeal), and the next
// roll seals the segment before it goes ahead (resealJob):
// the blocks of a segment that is not sealed must stay the partitions'
// last ones before the active segment's, as no span may come after them.
//
// job.sealed is closed once the segment is sealed, before the checkpoint
// is written: the next roll waits for the sealing, not for the
// checkpoint's fdatasyncs.
func (s *Store) seal(job *sealJob) {
	defer close(job.done)
	g := job.g
	prev := job.prev
	job.prev = nil
	err := s.sealOne(job)
	if err != nil && g.isRemoved() {
		// Retention took the segment away meanwhile (every chunk in it
		// expired, its blocks with them): nothing is left to seal.
		if len(job.rest) == 0 {
			s.idxPending.Store(nil)
			close(job.sealed)
			return
		}
		err = nil
	}
	if err == nil {
		job.headDone = true
		err = s.sealRest(job)
	}
	if err != nil {
		job.err = err
		if job.retry == 0 {
			s.log.Error("STORE: cannot seal the log segment's index; it is tried again when the disk has room and at the next roll, the next start-up re-indexes the log",
				"segment", g.path, "err", err)
		}
		s.idxPending.Store(pendingOf(job, err))
		s.writeFailed(err)
		s.dropCheckpoint()
		close(job.sealed)
		return
	}
	s.idxPending.Store(nil)
	if job.retry > 0 {
		s.log.Info("STORE: sealed the log segment's index after its sealing had failed", "segment", g.path, "tries", job.retry+1)
	}
	ck := job.ckpt
	if ck != nil && g.seq >= ck.seq0 && g.seq-ck.seq0 < uint32(len(ck.seqIdx)) {
		if i := ck.seqIdx[g.seq-ck.seq0]; i > 0 {
			g.idxMu.RLock()
			ck.c.segs[i-1] = ckptSeg{start: g.start, idxN: g.idxN, sealed: g.sealed, footN: g.footN, footCRC: g.footCRC}
			g.idxMu.RUnlock()
		}
	}
	close(job.sealed)
	if prev != nil {
		<-prev.done
	}
	if ck == nil {
		return
	}
	if err := s.storeCheckpoint(ck); err != nil {
		s.log.Warn("STORE: cannot write checkpoint", "err", err)
	}
}

// sealOne writes job's segment's header (when asked), its blocks held in
// memory and its footer, and turns its blocks into spans.
func (s *Store) sealOne(job *sealJob) error {
	if job.header {
		if _, err := job.g.idx.WriteAt(idxHeader(job.g.start), 0); err != nil {
			return fmt.Errorf("store: write index %s: %w", idxPathOf(job.g.path), err)
		}
	}
	if err := s.writeMemBlocks(job); err != nil {
		return err
	}
	return s.sealBlocks(job.g, job.ps, false)
}

// sealRest seals the segments of job.rest in order (their index held in
// memory since recovery), taking each off the list once sealed.
func (s *Store) sealRest(job *sealJob) error {
	for len(job.rest) > 0 {
		r := job.rest[0]
		if err := s.sealOne(r); err != nil && !r.g.isRemoved() {
			return err
		}
		job.rest = job.rest[1:]
	}
	return nil
}

// IndexPending describes the segment indexes the store holds in memory
// only, because the disk had no room to write them (see holdIndex and
// seal): reads are served from memory meanwhile; they are written when
// the disk has room again, or at the next roll.
type IndexPending struct {
	Segments int    `json:"segments"` // sealed segments whose .idx is not complete on disk
	Entries  int64  `json:"entries"`  // index entries held in memory for them
	Err      string `json:"error"`    // why the last write failed
}

// IndexPending reports the segment indexes held in memory waiting to be
// written, or nil when there are none.
func (s *Store) IndexPending() *IndexPending {
	if p := s.idxPending.Load(); p != nil {
		c := *p
		return &c
	}
	return nil
}

// pendingOf describes what job (failed with err) leaves unwritten.
func pendingOf(job *sealJob, err error) *IndexPending {
	jobs := job.rest
	if !job.headDone {
		jobs = append([]*sealJob{job}, jobs...)
	}
	p := &IndexPending{Segments: len(jobs), Err: err.Error()}
	for _, j := range jobs {
		for _, b := range j.mem {
			p.Entries += int64(b.ref.n)
		}
	}
	return p
}

// writeMemBlocks writes job's blocks held in memory into its segment's
// .idx, a MiB at a time, and gives each its crc in place of its entries.
func (s *Store) writeMemBlocks(job *sealJob) error {
	g := job.g
	if len(job.mem) == 0 {
		return nil
	}
	out := idxAppender{g: g, pos: int64(idxHeaderLen) + int64(job.mem[0].ref.at)*idxEntryLen}
	crcs := make([]uint32, len(job.mem))
	for i, x := range job.mem {
		crc, err := out.add(x.ref.mem.ents)
		if err != nil {
			return err
		}
		crcs[i] = crc
	}
	if err := out.flush(); err != nil {
		return err
	}
	g.idxMu.Lock()
	g.idxN, g.idxSize = job.idxN, out.pos
	g.idxMu.Unlock()
	for i, x := range job.mem {
		p := x.p
		p.mu.Lock()
		// Retention may have dropped the block meanwhile; its bytes are
		// in the .idx all the same. After a failed sealing a fence may
		// also have shortened it (cutIndexLocked gave it the crc of the
		// entries it kept, the first ones of those written here).
		for k := range p.blocks {
			if b := &p.blocks[k]; b.g == g && b.at == x.ref.at && b.mem != nil {
				if b.n == x.ref.n {
					b.crc = crcs[i]
				}
				b.mem = nil
				break
			}
		}
		p.mu.Unlock()
	}
	return nil
}

// resealJob is a new sealing of the segment job failed to seal, for the
// next roll to start before it goes ahead.
func resealJob(job *sealJob) *sealJob {
	src, rest := job, job.rest
	if job.headDone {
		src, rest = job.rest[0], job.rest[1:]
	}
	return &sealJob{g: src.g, ps: src.ps, mem: src.mem, idxN: src.idxN, header: src.header, rest: rest, retry: job.retry + 1,
		sealed: make(chan struct{}), done: make(chan struct{})}
}

// retrySeal starts again a sealing that failed (the disk was full), if
// it is done; the writer goroutine calls it when the disk has room again
// (writeOK), so a segment's index held in memory is written then rather
// than at the next roll, which may be a whole segment away.
func (s *Store) retrySeal() {
	j := s.w.sealing
	if j == nil {
		return
	}
	select {
	case <-j.done:
	default:
		return
	}
	if j.err != nil {
		s.startSeal(resealJob(j))
	}
}

// waitSeal waits for the last roll's sealing and checkpoint, if any (the
// writer goroutine, or Close after it stopped). A sealing that failed
// stays, for the next roll to do again.
func (s *Store) waitSeal() {
	if j := s.w.sealing; j != nil {
		<-j.done
		if j.err == nil {
			s.w.sealing = nil
		}
	}
}

// waitSealed waits for the last roll's sealing, if any, not for its
// checkpoint (the writer goroutine, before the next roll).
func (s *Store) waitSealed() {
	if j := s.w.sealing; j != nil {
		<-j.sealed
	}
}

// checkpointAside is a checkpoint request's work on the writer goroutine
// (retention asks for one before it removes files): the writer builds the
// checkpoint (the tails into the active .idx and a snapshot, as at a roll)
// and a goroutine of its own writes it (the .idx's fdatasync, the encoding
// of every partition, the file's write and fdatasync), then finishes r;
// the writer goes on with the next appends meanwhile (with thousands of
// partitions the writing is most of the work; BenchmarkCheckpointStall).
// It returns false, r not finished, when there is nothing to write
// (checkpoints are off) or the build failed (r.err).
func (s *Store) checkpointAside(r *request) bool {
	job, err := s.buildCheckpoint(nil)
	if err != nil || job == nil {
		r.err = err
		return false
	}
	s.ckpt.wg.Add(1)
	go func() {
		defer s.ckpt.wg.Done()
		r.err = s.storeCheckpoint(job)
		r.finish()
	}()
	return true
}

// afterRoll is called by the writer once a new segment started, sealed
// being the one it left, which job is sealing: the writer builds the
// roll's checkpoint and starts the sealing, which writes the checkpoint
// once the segment is sealed. Until it is written the previous
// checkpoint stands, which a start-up can use as it could before the roll.
func (s *Store) afterRoll(job *sealJob) {
	ck, err := s.buildCheckpoint(job.g)
	if err != nil {
		s.log.Warn("STORE: cannot write checkpoint", "err", err)
		ck = nil
	}
	job.ckpt = ck
	s.startSeal(job)
}

// startSeal starts job's goroutine (see sealJob).
func (s *Store) startSeal(job *sealJob) {
	job.prev = s.w.sealing
	s.w.sealing = job
	s.ckpt.wg.Add(1)
	go func() {
		defer s.ckpt.wg.Done()
		s.seal(job)
	}()
}

// dropCheckpoint removes the checkpoint so the next start-up scans (and
// re-indexes) the whole log, and writes no more.
func (s *Store) dropCheckpoint() {
	if s.noCheckpoint.CompareAndSwap(false, true) {
		// After a checkpoint being written: it sees noCheckpoint, or is
		// removed here.
		s.ckpt.mu.Lock()
		defer s.ckpt.mu.Unlock()
		path := filepath.Join(s.dir, ckptName)
		if rerr := s.fs.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			s.log.Error("STORE: cannot remove checkpoint", "path", path, "err", rerr)
		}
		s.fs.SyncDir(s.dir)
	}
}

// shutdown runs after the writer stopped: final fsync and checkpoint.
func (s *Store) shutdown() error {
	s.waitSeal()
	if s.fatal() != nil {
		return nil
	}
	if err := s.syncNow(); err != nil {
		return err
	}
	return s.writeCheckpoint()
}
