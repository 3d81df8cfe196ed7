package store

import (
	"fmt"
	"time"
)

// ReadLog returns whole log entries from pos, at most about maxBytes, only
// durable ones, and the position after the last. ErrLogTruncated if pos < first.
// Only data of live partitions is returned; definitions, deletions, data of
// deleted partitions and quarantined ranges are skipped (the returned
// position still moves past them). pos must be a position ReadLog or
// LogBounds returned; another position gives ErrCorrupt.
func (s *Store) ReadLog(pos int64, maxBytes int) ([]LogEntry, int64, error) {
	if s.isClosed() {
		return nil, pos, ErrClosed
	}
	durable := s.durable()
	var out []LogEntry
	total := 0
	for pos < durable && (total == 0 || total < maxBytes) {
		s.segMu.RLock()
		if len(s.segs) == 0 || pos < s.segs[0].start {
			s.segMu.RUnlock()
			return nil, pos, ErrLogTruncated
		}
		for _, q := range s.quarantine {
			if pos >= q.from && pos < q.to {
				pos = q.to
			}
		}
		g := s.segmentLocked(pos)
		if g == nil || pos >= durable {
			s.segMu.RUnlock()
			break
		}
		if pos >= g.end() {
			s.segMu.RUnlock()
			break
		}
		limit := min(durable, g.end()) - g.start
		r := newSegReader(g.f, limit)
		r.window = min(max(maxBytes+entryHeaderLen, 64<<10), 1<<20)
		x := pos - g.start
		var err error
		for x < limit && (total == 0 || total < maxBytes) {
			if q := s.quarantinedAt(g.start + x); q > 0 {
				x = q - g.start
				continue
			}
			h, payload, n, derr := r.entryAt(x)
			if derr != nil {
				if g.start+x > pos {
					// a boundary we found ourselves, not one the caller
					// passed in: this is damage
					s.corruptionFound(g.start+x, derr)
				}
				err = fmt.Errorf("store: read log at %d (%s+%d): %w", g.start+x, g.path, x, derr)
				break
			}
			if h.typ == entryData {
				if e, ok := s.liveEntry(h, payload, g.start+x); ok {
					out = append(out, e)
					total += len(payload)
				}
			}
			x += int64(n)
		}
		s.segMu.RUnlock()
		if err != nil {
			if len(out) > 0 {
				return out, g.start + x, nil
			}
			return nil, pos, err
		}
		pos = g.start + x
	}
	return out, pos, nil
}

// quarantinedAt returns the end of the quarantined range holding pos, or 0.
// Caller holds segMu.
func (s *Store) quarantinedAt(pos int64) int64 {
	for _, q := range s.quarantine {
		if pos >= q.from && pos < q.to {
			return q.to
		}
	}
	return 0
}

// liveEntry turns a data entry into a LogEntry if its partition still
// serves that chunk.
func (s *Store) liveEntry(h entryHeader, payload []byte, pos int64) (LogEntry, bool) {
	s.mu.RLock()
	p := s.byPid[h.pid]
	s.mu.RUnlock()
	if p == nil {
		return LogEntry{}, false
	}
	p.mu.RLock()
	i := p.chunkIndexLocked(h.off)
	ok := i >= 0 && p.chunks[i].pos == pos && p.chunks[i].off == h.off
	key := p.key
	p.mu.RUnlock()
	if !ok {
		return LogEntry{}, false
	}
	return LogEntry{
		Topic:     key.topic,
		Partition: key.num,
		Offset:    h.off,
		Records:   append([]byte(nil), payload...),
		Time:      time.UnixMilli(h.ms),
	}, true
}
