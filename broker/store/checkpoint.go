package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// idxEntry is one data chunk as written to a segment's .idx file.
type idxEntry struct {
	pid uint32
	n   uint32
	off int64
	pos int64
	ms  int64
}

const (
	idxMagic     = 0x4D514958 // "MQIX"
	ckptMagic    = 0x4D51434B // "MQCK"
	formatV1     = 1
	idxEntryLen  = 32
	idxHeaderLen = 4 + 4 + 8 + 8 + 4
	idxSuffix    = ".idx"
	ckptName     = "checkpoint"
)

func idxPath(g *segment) string { return strings.TrimSuffix(g.path, segSuffix) + idxSuffix }

// writeIdx writes the index summary of g covering [g.start, g.start+covered).
func (s *Store) writeIdx(g *segment, covered int64, ents []idxEntry) error {
	b := make([]byte, idxHeaderLen, idxHeaderLen+len(ents)*idxEntryLen+4)
	binary.BigEndian.PutUint32(b[0:], idxMagic)
	binary.BigEndian.PutUint32(b[4:], formatV1)
	binary.BigEndian.PutUint64(b[8:], uint64(g.start))
	binary.BigEndian.PutUint64(b[16:], uint64(covered))
	binary.BigEndian.PutUint32(b[24:], uint32(len(ents)))
	var e [idxEntryLen]byte
	for _, x := range ents {
		binary.BigEndian.PutUint32(e[0:], x.pid)
		binary.BigEndian.PutUint32(e[4:], x.n)
		binary.BigEndian.PutUint64(e[8:], uint64(x.off))
		binary.BigEndian.PutUint64(e[16:], uint64(x.pos))
		binary.BigEndian.PutUint64(e[24:], uint64(x.ms))
		b = append(b, e[:]...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := writeFileAtomic(s.fs, idxPath(g), b); err != nil {
		return fmt.Errorf("store: write index %s: %w", idxPath(g), err)
	}
	return nil
}

// readIdx loads g's .idx if it covers exactly covered bytes.
func (s *Store) readIdx(g *segment, covered int64) ([]idxEntry, error) {
	b, err := readFile(s.fs, idxPath(g))
	if err != nil {
		return nil, err
	}
	if len(b) < idxHeaderLen+4 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: index %s checksum", ErrCorrupt, idxPath(g))
	}
	if binary.BigEndian.Uint32(b[0:]) != idxMagic || binary.BigEndian.Uint32(b[4:]) != formatV1 ||
		int64(binary.BigEndian.Uint64(b[8:])) != g.start {
		return nil, fmt.Errorf("%w: index %s header", ErrCorrupt, idxPath(g))
	}
	if c := int64(binary.BigEndian.Uint64(b[16:])); c != covered {
		return nil, fmt.Errorf("index %s covers %d bytes, need %d: stale", idxPath(g), c, covered)
	}
	n := int(binary.BigEndian.Uint32(b[24:]))
	if len(b) != idxHeaderLen+n*idxEntryLen+4 {
		return nil, fmt.Errorf("%w: index %s length", ErrCorrupt, idxPath(g))
	}
	ents := make([]idxEntry, n)
	for i := range ents {
		e := b[idxHeaderLen+i*idxEntryLen:]
		ents[i] = idxEntry{
			pid: binary.BigEndian.Uint32(e[0:]),
			n:   binary.BigEndian.Uint32(e[4:]),
			off: int64(binary.BigEndian.Uint64(e[8:])),
			pos: int64(binary.BigEndian.Uint64(e[16:])),
			ms:  int64(binary.BigEndian.Uint64(e[24:])),
		}
		if ents[i].pos < g.start || ents[i].pos >= g.start+covered {
			return nil, fmt.Errorf("%w: index %s entry %d outside the segment", ErrCorrupt, idxPath(g), i)
		}
	}
	return ents, nil
}

// scanIdx rebuilds the data entries of g in [from, to) from the log itself.
func (s *Store) scanIdx(g *segment, to int64) ([]idxEntry, error) {
	r := newSegReader(g.f, to)
	var ents []idxEntry
	for x := int64(0); x < to; {
		h, payload, n, err := r.entryAt(x)
		if err != nil {
			return nil, fmt.Errorf("store: rebuild index of %s at %d: %w", g.path, x, err)
		}
		if h.typ == entryData {
			ents = append(ents, idxEntry{pid: h.pid, n: uint32(len(payload)), off: h.off, pos: g.start + x, ms: h.ms})
		}
		x += int64(n)
	}
	return ents, nil
}

type ckptPart struct {
	pid      uint32
	key      pkey
	min, end int64
	segs     []int64
}

type checkpoint struct {
	pos        int64
	nextPid    uint32
	quarantine []posRange
	parts      []ckptPart
}

func encodeCheckpoint(c *checkpoint) []byte {
	b := binary.BigEndian.AppendUint32(nil, ckptMagic)
	b = binary.BigEndian.AppendUint32(b, formatV1)
	b = binary.BigEndian.AppendUint64(b, uint64(c.pos))
	b = binary.BigEndian.AppendUint32(b, c.nextPid)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.quarantine)))
	for _, q := range c.quarantine {
		b = binary.BigEndian.AppendUint64(b, uint64(q.from))
		b = binary.BigEndian.AppendUint64(b, uint64(q.to))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.parts)))
	for _, p := range c.parts {
		b = binary.BigEndian.AppendUint32(b, p.pid)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.key.topic)))
		b = append(b, p.key.topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(p.key.num)))
		b = binary.BigEndian.AppendUint64(b, uint64(p.min))
		b = binary.BigEndian.AppendUint64(b, uint64(p.end))
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.segs)))
		for _, x := range p.segs {
			b = binary.BigEndian.AppendUint64(b, uint64(x))
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

func decodeCheckpoint(b []byte) (*checkpoint, error) {
	if len(b) < 12 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, errCkpt
	}
	d := &decoder{b: b[:len(b)-4]}
	if d.u32() != ckptMagic || d.u32() != formatV1 {
		return nil, errCkpt
	}
	c := &checkpoint{pos: d.i64(), nextPid: d.u32()}
	nq := int(d.u32())
	for i := 0; i < nq && d.err == nil; i++ {
		c.quarantine = append(c.quarantine, posRange{d.i64(), d.i64()})
	}
	np := int(d.u32())
	for i := 0; i < np && d.err == nil; i++ {
		p := ckptPart{pid: d.u32()}
		p.key.topic = string(d.take(int(d.u16())))
		p.key.num = int(int32(d.u32()))
		p.min, p.end = d.i64(), d.i64()
		ns := int(d.u32())
		if ns > len(d.b)/8 {
			return nil, errCkpt
		}
		for j := 0; j < ns; j++ {
			p.segs = append(p.segs, d.i64())
		}
		if len(p.segs) == 0 || p.min > p.end {
			return nil, errCkpt
		}
		c.parts = append(c.parts, p)
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errCkpt
	}
	return c, nil
}

// loadCheckpoint restores the partition table and the indexes below the
// checkpoint position from the checkpoint and the .idx files, and returns
// the position from which recovery must scan the log. Anything missing or
// inconsistent falls back to scanning from the first segment.
func (s *Store) loadCheckpoint() int64 {
	first := s.segs[0].start
	b, err := readFile(s.fs, filepath.Join(s.dir, ckptName))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("STORE: cannot read checkpoint, scanning the whole log", "err", err)
		}
		return first
	}
	c, err := decodeCheckpoint(b)
	if err == nil {
		err = s.applyCheckpoint(c)
	}
	if err != nil {
		s.log.Warn("STORE: checkpoint not usable, scanning the whole log", "err", err)
		s.parts = make(map[pkey]*partition)
		s.byPid = make(map[uint32]*partition)
		s.nextPid = 0
		s.quarantine = nil
		s.w.segIdx = nil
		return first
	}
	s.log.Info("STORE: loaded checkpoint", "position", c.pos, "partitions", len(c.parts))
	return c.pos
}

func (s *Store) applyCheckpoint(c *checkpoint) error {
	last := s.segs[len(s.segs)-1]
	if c.pos < s.segs[0].start || c.pos > last.end() {
		return fmt.Errorf("checkpoint position %d outside the log [%d, %d]", c.pos, s.segs[0].start, last.end())
	}
	s.nextPid = c.nextPid
	s.quarantine = c.quarantine
	for _, cp := range c.parts {
		if checkKey(cp.key.topic, cp.key.num) != nil || cp.pid >= c.nextPid || s.byPid[cp.pid] != nil || s.parts[cp.key] != nil {
			return errCkpt
		}
		p := newPartition(cp.key, cp.pid, cp.min)
		p.segs = cp.segs
		s.parts[cp.key] = p
		s.byPid[cp.pid] = p
	}
	for _, g := range s.segs {
		if g.start >= c.pos {
			break
		}
		covered := min(c.pos, g.end()) - g.start
		ents, err := s.readIdx(g, covered)
		if err != nil {
			s.log.Info("STORE: rebuilding segment index from the log", "segment", g.path, "reason", err)
			if ents, err = s.scanIdx(g, covered); err != nil {
				return err
			}
			if g != last && covered == g.size.Load() {
				if err := s.writeIdx(g, covered, ents); err != nil {
					s.log.Warn("STORE: cannot write rebuilt index", "err", err)
				}
			}
		}
		s.w.segIdx = nil
		for _, e := range ents {
			s.w.lastMs = max(s.w.lastMs, e.ms)
			p := s.byPid[e.pid]
			if p == nil || e.off != p.end {
				continue // deleted partition, retained-away or fenced chunk
			}
			p.addChunkLocked(e.pos, int64(e.n), e.ms, 0, 0)
			s.w.segIdx = append(s.w.segIdx, e)
		}
	}
	for _, cp := range c.parts {
		if p := s.byPid[cp.pid]; p.end != cp.end {
			return fmt.Errorf("indexes of %s-%d end at %d, checkpoint says %d", cp.key.topic, cp.key.num, p.end, cp.end)
		}
	}
	return nil
}

// writeCheckpoint records the state at the writer's position. Only the
// writer goroutine (or Close after it stopped) calls it, after a sync, so
// the state is consistent and the position durable.
func (s *Store) writeCheckpoint() error {
	w := &s.w
	if s.noCheckpoint.Load() {
		return nil
	}
	if err := s.writeIdx(w.active, w.pos-w.active.start, w.segIdx); err != nil {
		return err
	}
	c := &checkpoint{pos: w.pos}
	s.mu.RLock()
	c.nextPid = s.nextPid
	for _, p := range s.parts {
		p.mu.RLock()
		c.parts = append(c.parts, ckptPart{pid: p.pid, key: p.key, min: p.min, end: p.end, segs: append([]int64(nil), p.segs...)})
		p.mu.RUnlock()
	}
	s.mu.RUnlock()
	sort.Slice(c.parts, func(i, j int) bool { return c.parts[i].pid < c.parts[j].pid })
	s.segMu.RLock()
	c.quarantine = append(c.quarantine, s.quarantine...)
	s.segMu.RUnlock()
	if err := writeFileAtomic(s.fs, filepath.Join(s.dir, ckptName), encodeCheckpoint(c)); err != nil {
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	return nil
}

// sealed is called by the writer when g stopped being the active segment:
// its index summary is written so start-up need not scan it.
func (s *Store) sealed(g *segment) {
	if err := s.writeIdx(g, g.size.Load(), s.w.segIdx); err != nil {
		s.log.Warn("STORE: cannot write segment index (it will be rebuilt at start-up)", "err", err)
	}
	s.w.segIdx = nil
}

// afterRoll is called by the writer once a new segment started.
func (s *Store) afterRoll() {
	if err := s.writeCheckpoint(); err != nil {
		s.log.Warn("STORE: cannot write checkpoint", "err", err)
	}
}

// shutdown runs after the writer stopped: final fsync and checkpoint.
func (s *Store) shutdown() error {
	if s.Health() != nil {
		return nil
	}
	if err := s.syncNow(); err != nil {
		return err
	}
	return s.writeCheckpoint()
}
