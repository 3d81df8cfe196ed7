package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// recover loads the segments, rebuilds the partition table and indexes, and
// repairs a torn tail or quarantines corruption. See doc.go.
func (s *Store) recover() error {
	starts, err := listSegments(s.fs, s.logDir)
	if err != nil {
		return fmt.Errorf("store: list %s: %w", s.logDir, err)
	}
	if len(starts) == 0 {
		g, err := openSegment(s.fs, s.logDir, 0, true)
		if err != nil {
			return err
		}
		s.segs = []*segment{g}
		if g.idxOK, err = s.openIdx(g); err != nil {
			return err
		}
		if err := s.fs.SyncDir(s.logDir); err != nil {
			return fmt.Errorf("store: sync %s: %w", s.logDir, err)
		}
	}
	for _, st := range starts {
		g, err := openSegment(s.fs, s.logDir, st, false)
		if err != nil {
			return err
		}
		s.segs = append(s.segs, g)
		if g.idxOK, err = s.openIdx(g); err != nil {
			return err
		}
	}
	for i := 1; i < len(s.segs); i++ {
		if prev := s.segs[i-1]; prev.end() != s.segs[i].start {
			// Segments are fdatasynced before the next one is created, so
			// a gap is damage we cannot explain: refuse, as MetaQ does.
			return fmt.Errorf("store: %w: log segment %s ends at %d but %s starts at %d",
				ErrCorrupt, prev.path, prev.end(), s.segs[i].path, s.segs[i].start)
		}
	}
	from, err := s.loadCheckpoint()
	if err != nil {
		return err
	}
	if err := s.scan(from); err != nil {
		return err
	}
	last := s.segs[len(s.segs)-1]
	// What a killed process wrote sits in the page cache; make it durable
	// before anything is served as durable.
	if err := last.f.Datasync(); err != nil {
		return fmt.Errorf("store: fdatasync %s: %w", last.path, err)
	}
	s.w.active = last
	s.w.pos = last.end()
	// Ids must keep rising within a partition across restarts even if the
	// wall clock stepped back: start past the newest append time seen (one
	// millisecond more covers a sequence that borrowed the next one).
	if s.w.lastMs > 0 {
		s.w.ids.lastMs = s.w.lastMs - idEpoch + 1
		s.w.ids.seq = 0
	}
	s.durablePos = s.w.pos
	for _, p := range s.parts {
		p.durable = p.end
		p.wEnd = p.end
		if s.fencedAtScan[p] {
			// Its chunks after the lost one stay in the log with offsets
			// that new appends will reuse: they are dead.
			p.fences = append(p.fences, fenceRef{pos: s.w.pos, off: p.end})
		}
	}
	s.fencedAtScan = nil
	// Re-state every live partition in the active segment: a crash during a
	// roll can leave it without its leading define entries, and once older
	// segments are retained away a scan must still know every partition.
	if len(s.parts) > 0 {
		var buf []byte
		for _, p := range s.parts {
			buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: p.end, ms: s.w.lastMs}, encodeDefine(p.key.topic, p.key.num))
		}
		if err := s.writeActive(buf); err != nil {
			return err
		}
		if err := last.f.Datasync(); err != nil {
			return fmt.Errorf("store: fdatasync %s: %w", last.path, err)
		}
		s.durablePos = s.w.pos
	}
	return nil
}

// scan replays the log from position from to its end.
// Data chunks go into the partitions' tails, and full tails into the
// scanned segment's .idx, exactly as the writer does; at the end of a
// sealed segment every tail is written out and its .idx made durable.
func (s *Store) scan(from int64) error {
	s.fencedAtScan = make(map[*partition]bool)
	for i := 0; i < len(s.segs); i++ {
		g := s.segs[i]
		if g.end() <= from && i < len(s.segs)-1 {
			continue
		}
		size := g.size.Load()
		x := max(from-g.start, 0)
		r := newSegReader(g.f, size)
		for x < size {
			h, payload, n, err := r.entryAt(x)
			if err == nil {
				if err := s.applyEntry(h, payload, g.start+x, g); err != nil {
					return err
				}
				x += int64(n)
				continue
			}
			y := r.resync(x + 1)
			if y < 0 && !s.validAfter(i) {
				// Torn tail: nothing valid follows, so the bytes are a write
				// the crash interrupted. Cut them off.
				if err := s.truncateTail(i, x); err != nil {
					return err
				}
				s.log.Warn("STORE: truncated torn log tail", "segment", g.path, "offset", x, "dropped", size-x)
				return nil
			}
			if y < 0 {
				y = size
			}
			s.quarantineRange(g, x, y, err)
			x = y
		}
		if i < len(s.segs)-1 {
			if err := s.sealed(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// validAfter reports whether any segment after i holds a valid entry.
func (s *Store) validAfter(i int) bool {
	for _, g := range s.segs[i+1:] {
		if newSegReader(g.f, g.size.Load()).resync(0) >= 0 {
			return true
		}
	}
	return false
}

// truncateTail cuts segment i at x and removes the (invalid) segments after it.
func (s *Store) truncateTail(i int, x int64) error {
	g := s.segs[i]
	if err := g.f.Truncate(x); err != nil {
		return fmt.Errorf("store: truncate %s at %d: %w", g.path, x, err)
	}
	if err := g.f.Datasync(); err != nil {
		return fmt.Errorf("store: fdatasync %s: %w", g.path, err)
	}
	g.size.Store(x)
	for _, h := range s.segs[i+1:] {
		h.close()
		for _, path := range []string{h.path, idxPathOf(h.path)} {
			if err := s.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("store: remove %s: %w", path, err)
			}
		}
	}
	s.segs = s.segs[:i+1]
	return s.fs.SyncDir(s.logDir)
}

// quarantineRange records [x, y) of g as damaged, keeps a copy for the
// operator and logs it. The range is never served.
func (s *Store) quarantineRange(g *segment, x, y int64, cause error) {
	s.quarantine = append(s.quarantine, posRange{g.start + x, g.start + y})
	bad := filepath.Join(s.logDir, fmt.Sprintf("%s.%d.bad", filepath.Base(g.path), x))
	n := min(y-x, 64<<20)
	b := make([]byte, n)
	if _, err := g.f.ReadAt(b, x); err == nil {
		if err := writeFileAtomic(s.fs, bad, b); err != nil {
			s.log.Error("STORE: cannot save quarantined bytes", "file", bad, "err", err)
		}
	}
	s.log.Error("STORE: corrupt log range quarantined", "segment", g.path, "offset", x, "length", y-x,
		"copy", bad, "err", cause)
}

// applyEntry replays one valid log entry into the partition table.
// Full tails are written into g, the segment being scanned.
func (s *Store) applyEntry(h entryHeader, payload []byte, pos int64, g *segment) error {
	if h.pid >= s.nextPid {
		s.nextPid = h.pid + 1
	}
	s.w.lastMs = max(s.w.lastMs, h.ms)
	switch h.typ {
	case entryDefine:
		topic, num, err := decodeDefine(payload)
		if err != nil || checkKey(topic, num) != nil {
			return nil
		}
		key := pkey{topic, num}
		if p := s.byPid[h.pid]; p != nil {
			// A re-definition (at a segment start) states the partition's
			// end at that point. Lower than ours: the partition was fenced
			// there at run time; cut it back the same way.
			if h.off < p.end {
				if err := s.cutIndexLocked(p, h.off); err != nil {
					return fmt.Errorf("store: replay fence of %s-%d at %d: %w", p.key.topic, p.key.num, h.off, err)
				}
				p.fences = append(p.fences, fenceRef{pos: pos, off: h.off})
			}
			return nil
		}
		if old := s.parts[key]; old != nil {
			delete(s.byPid, old.pid)
		}
		p := newPartition(key, h.pid, h.off)
		s.parts[key] = p
		s.byPid[h.pid] = p
	case entryDelete:
		if p := s.byPid[h.pid]; p != nil {
			delete(s.byPid, h.pid)
			if s.parts[p.key] == p {
				delete(s.parts, p.key)
			}
		}
	case entryData:
		p := s.byPid[h.pid]
		if p == nil {
			return nil // partition deleted
		}
		if h.off != p.end {
			// A chunk of this partition was lost in a quarantined range:
			// what follows cannot be served contiguously.
			if !s.fencedAtScan[p] {
				s.fencedAtScan[p] = true
				s.log.Error("STORE: partition data after a quarantined range is not served",
					"partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "end", p.end, "next", h.off)
			}
			return nil
		}
		p.addChunkLocked(pos, int64(len(payload)), h.ms, countRecords(payload), s.opts.SegmentBytes)
		if len(p.tail) >= s.opts.blockEntries {
			return s.flushTailLocked(p, g)
		}
	}
	return nil
}

// countRecords counts the records of a verified data payload.
func countRecords(b []byte) int64 {
	n := int64(0)
	for len(b) >= RecordHeaderLen {
		b = b[RecordHeaderLen+int(binary.BigEndian.Uint32(b)):]
		n++
	}
	return n
}
