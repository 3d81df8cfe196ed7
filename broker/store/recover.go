package store

import (
	"bytes"
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
		g.seq = s.nextSeq()
		s.segs = []*segment{g}
		s.publishSegs()
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
		g.seq = s.nextSeq()
		s.segs = append(s.segs, g)
		s.publishSegs()
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
	s.holdIndex()
	s.checkedFrom.Store(from)
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
	if err := s.writeSalvaged(); err != nil {
		if !isNoSpace(err) {
			return err
		}
		// The damaged entries stay in the log and the store writes no
		// checkpoint while it has holes: the next start-up finds their
		// intact records again.
		s.log.Warn("STORE: no room to write back the intact records of damaged entries; the next start-up salvages them again", "err", err)
		s.w.salvaged = nil
		s.rec.noRoom = err
	}
	s.logHoles()
	s.durablePos = s.w.pos
	damaged := false
	for _, p := range s.parts {
		p.durable.Store(p.end)
		p.wEnd = p.end
		damaged = damaged || p.damagedLocked()
	}
	if damaged {
		// Holes and repairs live in memory: no checkpoint while there are
		// any, so every start-up scans the log and finds them again.
		s.dropCheckpoint()
	}
	// Re-state every live partition in the active segment: a crash during a
	// roll can leave it without its leading define entries, and once older
	// segments are retained away a scan must still know every partition.
	if len(s.parts) > 0 {
		var buf []byte
		for _, p := range s.parts {
			buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: p.end, ms: s.w.lastMs}, encodeDefine(p.key.topic, p.key.num))
		}
		if err := s.writeActive(buf); err == nil {
			if err := last.f.Datasync(); err != nil {
				return fmt.Errorf("store: fdatasync %s: %w", last.path, err)
			}
			s.durablePos = s.w.pos
		} else if isNoSpace(err) {
			// As after a roll whose defines could not be written: the
			// writer puts them first in its next write, and does not roll
			// before.
			s.log.Warn("STORE: no room to restate the partitions in the active segment; they are written before the next append", "err", err)
			s.w.needDefines = true
			s.rec.noRoom = err
		} else {
			return err
		}
	}
	if s.rec.noRoom != nil {
		// Serve what is stored; refuse appends until the disk has room
		// (Health, ProbeSpace).
		s.writeFailed(s.rec.noRoom)
	}
	return nil
}

// recState is what recovery keeps while it runs.
type recState struct {
	// noRoom is the first write recovery could not make for lack of
	// space; idxFull is set once that was an index write: from then on
	// every index block recovery rebuilds is held in memory (held).
	noRoom  error
	idxFull bool
	// held are the segments (not the active one) whose index recovery
	// holds in memory, in log order, each as a sealing to be done.
	held []*sealJob
}

// noIndexRoom switches recovery to holding the index in memory: err, a
// write into a .idx, failed for lack of space.
func (s *Store) noIndexRoom(err error) {
	if !s.rec.idxFull {
		s.log.Error("STORE: no room to write the rebuilt index; it is held in memory and written when the disk has room", "err", err)
	}
	s.rec.idxFull = true
	if s.rec.noRoom == nil {
		s.rec.noRoom = err
	}
}

// heldJob is the sealing to be done of g, whose index is held in memory.
func (s *Store) heldJob(g *segment) *sealJob {
	if k := len(s.rec.held); k > 0 && s.rec.held[k-1].g == g {
		return s.rec.held[k-1]
	}
	job := &sealJob{g: g, idxN: g.idxN, header: true}
	s.rec.held = append(s.rec.held, job)
	return job
}

// holdBlocks turns p's tail (chunks of g, which the scan has left) into
// blocks of g held in memory, numbered after g's blocks on disk and held
// ones, as a roll does (detachTails): reads take their entries from there
// until the sealing writes them.
func (s *Store) holdBlocks(p *partition, g *segment) {
	job := s.heldJob(g)
	for k := 0; k < len(p.tail); k += s.opts.blockEntries {
		ents := p.tail[k:min(k+s.opts.blockEntries, len(p.tail)):min(k+s.opts.blockEntries, len(p.tail))]
		n := uint32(len(ents))
		ref := blockRef{g: g, off: ents[0].off, ms: ents[0].ms, at: job.idxN, n: n, mem: &memBlock{ents: ents}}
		p.blocks = append(p.blocks, ref)
		job.mem = append(job.mem, pendBlock{p, ref})
		job.idxN += n
	}
	p.tail = nil
}

// sealScanned seals g, a segment the scan has replayed (or one the
// checkpoint saw active, replayed before it), which is no longer active.
// When its .idx cannot be written for lack of space, its index is held
// in memory instead, and so is every later segment's (holdIndex).
func (s *Store) sealScanned(g *segment) error {
	if g.sealed {
		return nil
	}
	if !s.rec.idxFull {
		err := s.sealed(g, false)
		if err == nil {
			if err := g.idx.Datasync(); err != nil {
				return fmt.Errorf("store: fdatasync %s: %w", idxPathOf(g.path), err)
			}
			return nil
		}
		if !isNoSpace(err) {
			return err
		}
		s.noIndexRoom(err)
	}
	ps := s.partitionList()
	for _, p := range ps {
		if len(p.tail) > 0 {
			s.holdBlocks(p, g)
		}
	}
	s.heldJob(g).ps = ps
	return nil
}

// holdIndex ends a recovery that could not write the whole index for
// lack of space (seed 941024 of the soak: a site restarted on a full
// disk exited). The segments whose index is held in memory become one
// failed sealing, done again, in log order, when the disk has room
// (writeOK) or at the next roll (maybeRoll), as a roll's failed sealing
// is; no span comes after their blocks meanwhile. The checkpoint goes,
// as after any failed sealing: the next start-up re-indexes the log. The
// active segment's chunks stay in the tails (longer than a block), which
// the writer writes with its next flush of them.
func (s *Store) holdIndex() {
	if !s.rec.idxFull {
		return
	}
	s.dropCheckpoint()
	held := s.rec.held
	s.rec.held = nil
	if len(held) == 0 {
		return
	}
	job := held[0]
	job.rest = held[1:]
	job.err = s.rec.noRoom
	job.sealed, job.done = make(chan struct{}), make(chan struct{})
	close(job.sealed)
	close(job.done)
	s.w.sealing = job
	s.idxPending.Store(pendingOf(job, s.rec.noRoom))
}

// scan replays the log from position from to its end.
// Data chunks go into the partitions' tails, and full tails into the
// scanned segment's .idx, exactly as the writer does; at the end of a
// sealed segment every tail is written out and its .idx made durable.
func (s *Store) scan(from int64) error {
	lost := make(map[*partition]int64) // see noteLoss
	defer s.settleLoss(lost)
	s.w.orphans = make(map[uint32][]orphan)
	s.w.deadPids = make(map[uint32]bool)
	s.w.scanPid0 = s.nextPid
	defer s.dropOrphans()
	for i := 0; i < len(s.segs); i++ {
		g := s.segs[i]
		if g.end() <= from && i < len(s.segs)-1 {
			// Written before the checkpoint; sealed after it if the
			// checkpoint still saw it active (its blocks are in memory).
			if err := s.sealScanned(g); err != nil {
				return err
			}
			continue
		}
		size := g.size.Load()
		x := max(from-g.start, 0)
		r := newSegReader(g.f, size)
		for x < size {
			h, payload, n, err := r.entryAt(x)
			if err == nil && h.typ == entryUnit && s.tornUnit(r, i, x+int64(n), x+int64(n)+h.off) {
				// The crash tore a unit (its write was never durable
				// whole, so never acknowledged): none of it stays, so
				// the log never holds part of one.
				if err := s.truncateTail(i, x); err != nil {
					return err
				}
				s.log.Warn("STORE: truncated torn log tail inside a unit (a transaction's commit) at the unit's start", "segment", g.path, "offset", x, "dropped", size-x)
				return nil
			}
			if err == nil {
				if err := s.applyEntry(h, payload, g.start+x, g, lost); err != nil {
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
			s.noteLoss(r, x, y, lost)
			x = y
		}
		if i < len(s.segs)-1 {
			if err := s.sealScanned(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// tornUnit reports whether the unit whose entries lie in [from, to) of
// segment i (read by r) is a torn tail: one of its entries is not valid
// (or the segment ends before to) and nothing valid follows, in this
// segment or a later one.
func (s *Store) tornUnit(r *segReader, i int, from, to int64) bool {
	y := from
	for y < to {
		_, _, n, err := r.entryAt(y)
		if err != nil {
			break
		}
		y += int64(n)
	}
	if y == to {
		return false
	}
	return r.resync(y+1) < 0 && !s.validAfter(i)
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
		s.sums.drop(h)
		for _, path := range []string{h.path, idxPathOf(h.path)} {
			if err := s.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("store: remove %s: %w", path, err)
			}
		}
	}
	s.segs = s.segs[:i+1]
	s.publishSegs()
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
func (s *Store) applyEntry(h entryHeader, payload []byte, pos int64, g *segment, lost map[*partition]int64) error {
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
			// A re-definition (at a segment start, after damage found at
			// run time, after a new partition's first records, or where a
			// replica skipped records its master lost) states the
			// partition's end at that point. Higher than ours: the records
			// in between were lost. Lower: a fence written by an older
			// version, which cut the partition back there.
			delete(lost, p)
			if h.off > p.end {
				s.holeReplay(p, h.off, h.ms)
				return s.flushFullTail(p, g)
			}
			if h.off < p.end {
				if err := s.cutIndexLocked(p, h.off); err != nil {
					return fmt.Errorf("store: replay fence of %s-%d at %d: %w", p.key.topic, p.key.num, h.off, err)
				}
				p.cutDamageLocked(h.off)
				p.fences = append(p.fences, fenceRef{pos: pos, off: h.off})
			}
			return nil
		}
		if old := s.parts[key]; old != nil {
			delete(s.byPid, old.pid)
			delete(lost, old)
		}
		start := h.off
		orphans := s.w.orphans[h.pid]
		if len(orphans) > 0 {
			start = min(start, orphans[0].off)
		}
		p := newPartition(key, h.pid, start)
		s.setPartLocked(p)
		s.byPid[h.pid] = p
		if len(orphans) > 0 {
			if err := s.adoptOrphans(p, orphans, g); err != nil {
				return err
			}
			if h.off > p.end {
				s.holeReplay(p, h.off, h.ms)
				return s.flushFullTail(p, g)
			}
		}
	case entryDelete:
		s.w.deadPids[h.pid] = true
		if p := s.byPid[h.pid]; p != nil {
			delete(s.byPid, h.pid)
			delete(lost, p)
			if s.parts[p.key] == p {
				s.deletePartLocked(p.key)
			}
		}
	case entryData:
		p := s.byPid[h.pid]
		if p == nil {
			if h.pid >= s.w.scanPid0 && !s.w.deadPids[h.pid] {
				// Its definition was lost to damage: keep the chunk until
				// a later definition names the partition.
				s.w.orphans[h.pid] = append(s.w.orphans[h.pid], orphan{pos: pos, off: h.off, n: int64(len(payload)), ms: h.ms, records: countRecords(payload)})
			}
			return nil // partition deleted
		}
		n := int64(len(payload))
		if h.off < p.end {
			// records written back into a hole (Repair, or the intact
			// records of a damaged entry), or bytes no longer served
			p.fillLocked(h.off, n, pos, h.ms)
			return nil
		}
		delete(lost, p)
		if h.off > p.end {
			// the records in between were lost in a quarantined range
			s.holeReplay(p, h.off, h.ms)
			if err := s.flushFullTail(p, g); err != nil {
				return err
			}
		}
		p.addChunkLocked(pos, n, h.ms, countRecords(payload), s.opts.SegmentBytes)
		return s.flushFullTail(p, g)
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

// flushFullTail writes p's tail into g's .idx once it holds a block.
// Without room for it the index is held in memory: the tail grows until
// the scan leaves g (sealScanned holds it as blocks of g), or, in the
// active segment, until the writer can write it.
func (s *Store) flushFullTail(p *partition, g *segment) error {
	if len(p.tail) < s.opts.blockEntries || s.rec.idxFull {
		return nil
	}
	err := s.flushTailLocked(p, g)
	if isNoSpace(err) {
		s.noIndexRoom(err)
		return nil
	}
	return err
}

// holeReplay records during recovery that p's records before off were
// lost: p continues at off.
// The loss is logged once the whole log is replayed (logHoles): a repair
// written back later in the log may fill it.
func (s *Store) holeReplay(p *partition, off, ms int64) {
	p.addHoleLocked(off, ms)
}

// logHoles says, after recovery, which records are lost and not served,
// and which lost ranges are served from the repairs written into them.
func (s *Store) logHoles() {
	for _, p := range s.parts {
		name := fmt.Sprintf("%s-%d", p.key.topic, p.key.num)
		for _, h := range p.holes {
			s.log.Error("STORE: records lost in a quarantined range are not served; the rest of the partition is",
				"partition", name, "from", h.from, "to", h.to)
		}
		if len(p.fills) > 0 {
			s.log.Info("STORE: damaged ranges repaired earlier are served from their repairs",
				"partition", name, "repaired_chunks", len(p.fills), "still_lost_ranges", len(p.holes))
		}
	}
}

// noteLoss works out which offsets the quarantined range [x, y) of the
// segment read by r may have held, so that none is handed out again. When
// the range is exactly one data entry whose header still names a partition
// at its end, that partition lost exactly that chunk (and its records that
// pass their own checksum are kept, see salvage). Otherwise any partition
// may have lost up to the range's payload bytes. lost holds the end each
// partition must reach at least; an entry of the partition met later in
// the scan states its real end and replaces the guess.
func (s *Store) noteLoss(r *segReader, x, y int64, lost map[*partition]int64) {
	if hb, err := r.bytes(x, entryHeaderLen); err == nil {
		if h, err := parseEntryHeader(hb); err == nil && h.typ == entryData && x+entryHeaderLen+int64(h.length) == y {
			if p := s.byPid[h.pid]; p != nil && h.off == p.end {
				lost[p] = max(lost[p], h.off+int64(h.length))
				if payload, err := r.bytes(x+entryHeaderLen, int(h.length)); err == nil {
					s.salvageLater(p, h.off, payload)
				}
				return
			}
		}
	}
	if y-x <= entryHeaderLen {
		return
	}
	for _, p := range s.parts {
		lost[p] = max(lost[p], p.end+y-x-entryHeaderLen)
	}
}

// settleLoss moves every partition still in lost up to its bound,
// leaving a hole.
func (s *Store) settleLoss(lost map[*partition]int64) {
	for p, end := range lost {
		if s.parts[p.key] == p {
			s.holeReplay(p, end, s.w.lastMs)
		}
	}
}

// salvaged is a run of intact records of a damaged entry, put back once
// recovery has made the entry's range a hole.
type salvaged struct {
	p       *partition
	off     int64
	records []byte
}

// salvageLater keeps the intact records of the damaged payload of p's
// chunk at off (see salvage) for writeSalvaged.
func (s *Store) salvageLater(p *partition, off int64, payload []byte) {
	a, b := salvage(payload)
	if a > 0 {
		s.w.salvaged = append(s.w.salvaged, salvaged{p, off, bytes.Clone(payload[:a])})
	}
	if b < len(payload) {
		s.w.salvaged = append(s.w.salvaged, salvaged{p, off + int64(b), bytes.Clone(payload[b:])})
	}
	if a > 0 || b < len(payload) {
		s.log.Warn("STORE: intact records of a damaged entry are kept", "partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num),
			"damaged", fmt.Sprintf("[%d, %d)", off+int64(a), off+int64(b)), "kept", a+len(payload)-b)
	}
}

// writeSalvaged appends the salvaged records to the log as data entries
// filling their places in the holes (as Repair does). Recovery calls it
// after the scan; what a replay already filled is skipped.
func (s *Store) writeSalvaged() error {
	for _, sv := range s.w.salvaged {
		p, n := sv.p, int64(len(sv.records))
		if s.parts[p.key] != p || p.holeRoomLocked(sv.off) < n {
			continue
		}
		pos := s.w.pos
		buf := appendEntry(nil, entryHeader{typ: entryData, pid: p.pid, off: sv.off, ms: s.w.lastMs}, sv.records)
		if err := s.writeActive(buf); err != nil {
			return err
		}
		p.fillLocked(sv.off, n, pos, s.w.lastMs)
	}
	s.w.salvaged = nil
	return nil
}

// orphan is a data chunk met during the scan before any definition of its
// partition (the one that created it was lost to damage).
type orphan struct {
	pos, off, n, ms, records int64
}

// adoptOrphans adds the chunks p had before its first surviving
// definition. Their index entries go into g's .idx although their bytes
// are in earlier segments, so p counts as damaged (no checkpoint: the
// next start-up scans again) and retention keeps those segments.
func (s *Store) adoptOrphans(p *partition, orphans []orphan, g *segment) error {
	for _, o := range orphans {
		if o.off < p.end {
			continue
		}
		if o.off > p.end {
			s.holeReplay(p, o.off, o.ms)
		}
		p.addChunkLocked(o.pos, o.n, o.ms, o.records, s.opts.SegmentBytes)
		if p.adoptedLow < 0 || o.pos < p.adoptedLow {
			p.adoptedLow = o.pos
		}
		if err := s.flushFullTail(p, g); err != nil {
			return err
		}
	}
	delete(s.w.orphans, p.pid)
	s.log.Warn("STORE: a partition's definition was lost to damage; its data is kept", "partition",
		fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "chunks", len(orphans))
	return nil
}

// dropOrphans reports chunks whose partition was never named again.
func (s *Store) dropOrphans() {
	for pid, chunks := range s.w.orphans {
		s.log.Error("STORE: data of a partition whose definition was lost to damage cannot be placed",
			"pid", pid, "chunks", len(chunks))
	}
	s.w.orphans, s.w.deadPids = nil, nil
}
