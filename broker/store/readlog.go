package store

import (
	"time"
)

// ReadLog returns whole log entries from pos, at most about maxBytes (more
// rather than part of a unit, see AppendUnitAsync; the first entry of a
// unit says how many of the entries hold it, LogEntry.Unit), only durable
// ones, and the position after the last. ErrLogTruncated if pos < first.
// Only data of live partitions is returned; definitions, deletions, data of
// deleted partitions and quarantined ranges are skipped (the returned
// position still moves past them). pos should be a position ReadLog or
// LogBounds returned; from any other, reading starts at the next valid
// entry. Damage met on the way is skipped, logged and quarantined (see
// doc.go); it never stops the other partitions' entries.
func (s *Store) ReadLog(pos int64, maxBytes int) ([]LogEntry, int64, error) {
	if s.isClosed() {
		return nil, pos, ErrClosed
	}
	durable := s.durable()
	var out []LogEntry
	var damaged []posRange
	total := 0
	// A read goes past maxBytes rather than end inside a unit (a unit
	// entry gives its end, AppendUnitAsync): the unit is durable whole or
	// not at all, and lies in one segment. unitFirst is the index in out
	// of the unit's first entry.
	var unitEnd int64
	unitFirst := 0
	stop := false
	for !stop && pos < durable && (total == 0 || total < maxBytes || pos < unitEnd) {
		// The segment list is locked only to find the segment and copy the
		// quarantined ranges (both change only under segMu.Lock); the
		// preads hold the segment's logMu, so a roll or retention does not
		// wait behind a replica reading cold data.
		s.segMu.RLock()
		if len(s.segs) == 0 || pos < s.segs[0].start {
			s.segMu.RUnlock()
			return nil, pos, ErrLogTruncated
		}
		firstStart := s.segs[0].start
		quarantine := append([]posRange(nil), s.quarantine...)
		for _, q := range quarantine {
			if pos >= q.from && pos < q.to {
				pos = q.to
			}
		}
		g := s.segmentLocked(pos)
		s.segMu.RUnlock()
		if g == nil || pos >= durable || pos >= g.end() {
			break
		}
		g.logMu.RLock()
		if g.logClosed {
			g.logMu.RUnlock()
			return nil, pos, ErrLogTruncated
		}
		limit := min(durable, g.end()) - g.start
		r := newSegReader(g.f, limit)
		r.window = min(max(maxBytes+entryHeaderLen, 64<<10), 1<<20)
		// A replica catching up reads old segments in order: have the
		// disk fetch the next window while this one is shipped.
		r.prefetch = g.isSealed()
		x := pos - g.start
		for x < limit && (total == 0 || total < maxBytes || g.start+x < unitEnd) {
			if q := quarantinedIn(quarantine, g.start+x); q > 0 {
				x = q - g.start
				continue
			}
			h, payload, n, derr := r.entryAt(x)
			if derr != nil {
				// Skip to the next valid entry so that replication goes on;
				// the damaged chunk becomes a hole of its partition, whose
				// later chunks are shipped after a hole marker.
				y := r.resync(x + 1)
				if y < 0 {
					y = limit
				}
				if g.start+x > pos || g.start+x == firstStart {
					// A boundary we found ourselves, not one the caller
					// passed in: this is damage.
					s.log.Error("STORE: damaged log entry skipped by replication", "position", g.start+x, "err", derr)
					damaged = append(damaged, posRange{g.start + x, g.start + y})
					x = y
					break // mark the hole before looking at later entries
				}
				x = y
				continue
			}
			if h.typ == entryUnit {
				end := g.start + x + int64(n) + h.off
				if total > 0 && end > g.start+limit {
					// Not durable whole yet (it always is, a batch being
					// synced whole): stop before it rather than cut it.
					stop = true
					break
				}
				if h.off <= maxUnitBytes {
					unitEnd, unitFirst = end, len(out)
				}
			}
			if h.typ == entryData {
				if e, marker, ok := s.liveEntry(h, payload, g.start+x); ok {
					if marker {
						// The records before this chunk were lost: a
						// replica that lacks them continues past them too.
						out = append(out, LogEntry{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, Time: e.Time})
					}
					out = append(out, e)
					total += len(payload)
				}
			}
			x += int64(n)
			if unitEnd > 0 && g.start+x >= unitEnd {
				if k := len(out) - unitFirst; k > 1 {
					out[unitFirst].Unit = k
				}
				unitEnd = 0
			}
		}
		g.logMu.RUnlock()
		if len(damaged) > 0 {
			s.damagedRanges(damaged)
			damaged = nil
		}
		pos = g.start + x
	}
	return out, pos, nil
}

// damagedRanges handles damaged log ranges met outside Read (ReadLog, the
// scrub): a chunk of a partition as damage met by Read, anything else
// quarantined.
func (s *Store) damagedRanges(damaged []posRange) {
	for _, d := range damaged {
		if p, off, n, ok := s.chunkAt(d.from); ok {
			s.damageFound(p, off, d.from, n, ErrCorrupt)
			continue
		}
		s.corruptionFound(d.from, ErrCorrupt)
		s.segMu.Lock()
		s.quarantine = append(s.quarantine, d)
		s.segMu.Unlock()
	}
}

// quarantinedAt returns the end of the quarantined range holding pos, or 0.
// Caller holds segMu.
func (s *Store) quarantinedAt(pos int64) int64 { return quarantinedIn(s.quarantine, pos) }

// quarantinedIn returns the end of the range of qs holding pos, or 0.
func quarantinedIn(qs []posRange, pos int64) int64 {
	for _, q := range qs {
		if pos >= q.from && pos < q.to {
			return q.to
		}
	}
	return 0
}

// liveEntry turns a data entry into a LogEntry if its partition still
// serves that chunk; marker reports that records lost to damage end where
// it starts.
func (s *Store) liveEntry(h entryHeader, payload []byte, pos int64) (e LogEntry, marker, ok bool) {
	s.mu.RLock()
	p := s.byPid[h.pid]
	s.mu.RUnlock()
	if p == nil {
		return LogEntry{}, false, false
	}
	n := int64(len(payload))
	p.mu.Lock()
	ok = !p.deleted && p.liveLocked(h.off, n, pos) && !p.inHolesLocked(h.off, n)
	marker = ok && p.lostEndsAtLocked(h.off)
	key := p.key
	p.mu.Unlock()
	if !ok {
		return LogEntry{}, false, false
	}
	return LogEntry{
		Topic:     key.topic,
		Partition: key.num,
		Offset:    h.off,
		Records:   append([]byte(nil), payload...),
		Time:      time.UnixMilli(h.ms),
	}, marker, true
}

// chunkAt finds the partition whose index has a chunk at log position pos,
// with its offset and length: the tails, fills and blocks not yet written
// out in memory, else the entries of the segment's .idx (a rare path:
// damage met by ReadLog).
func (s *Store) chunkAt(pos int64) (*partition, int64, int64, bool) {
	s.mu.RLock()
	for _, p := range s.parts {
		p.mu.Lock()
		for _, e := range append(p.tail[:len(p.tail):len(p.tail)], p.fills...) {
			if e.pos == pos {
				p.mu.Unlock()
				s.mu.RUnlock()
				return p, e.off, int64(e.n), true
			}
		}
		// Blocks a roll's sealing has not written into their .idx yet.
		for _, b := range p.blocks {
			if b.mem == nil {
				continue
			}
			for _, e := range b.mem.ents[:b.n] {
				if e.pos == pos {
					live := p.liveLocked(e.off, int64(e.n), pos)
					p.mu.Unlock()
					s.mu.RUnlock()
					return p, e.off, int64(e.n), live
				}
			}
		}
		p.mu.Unlock()
	}
	s.mu.RUnlock()
	s.segMu.RLock()
	g := s.segmentLocked(pos)
	s.segMu.RUnlock()
	if g == nil {
		return nil, 0, 0, false
	}
	g.idxMu.RLock()
	var b []byte
	if !g.removed {
		if size, err := g.idx.Size(); err == nil && size > idxHeaderLen {
			b = make([]byte, size-idxHeaderLen)
			if n, _ := g.idx.ReadAt(b, idxHeaderLen); n < len(b) {
				b = b[:n]
			}
		}
	}
	g.idxMu.RUnlock()
	for len(b) >= idxEntryLen {
		e := decodeEntry32(b)
		b = b[idxEntryLen:]
		if e.pos != pos {
			continue
		}
		s.mu.RLock()
		p := s.byPid[e.pid]
		s.mu.RUnlock()
		if p == nil {
			return nil, 0, 0, false
		}
		p.mu.Lock()
		live := p.liveLocked(e.off, int64(e.n), pos)
		p.mu.Unlock()
		return p, e.off, int64(e.n), live
	}
	return nil, 0, 0, false
}
