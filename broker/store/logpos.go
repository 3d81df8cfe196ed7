package store

import (
	"context"
	"fmt"
)

// LogPosition returns the log position of the entry that holds offset in
// the partition, or of its first retained entry when offset is below it:
// reading the log from there reaches every record from offset on. An offset
// at or beyond the partition's end needs nothing from the log; the answer is
// then the durable log end. Replication uses it to resume a slave that
// followed another master by its partition ends.
func (s *Store) LogPosition(topic string, partition int, offset int64) (int64, error) {
	p := s.lookup(topic, partition)
	if p == nil {
		return 0, ErrNoPartition
	}
	if offset < 0 {
		return 0, fmt.Errorf("%w: offset %d", ErrBadArgument, offset)
	}
	p.mu.Lock()
	durable, lo := p.durable.Load(), p.min
	p.mu.Unlock()
	if offset >= durable {
		return s.durable(), nil
	}
	ents, err := s.chunks(p, max(offset, lo), 1)
	if err != nil {
		return 0, fmt.Errorf("store: log position of %s-%d@%d: %w", topic, partition, offset, err)
	}
	if len(ents) == 0 {
		return s.durable(), nil
	}
	return ents[0].pos, nil
}

// UnitStart returns where a read must start to keep whole the unit that
// pos lies in (see AppendUnitAsync): the position of the unit entry when
// pos is the start of one of the unit's later entries, else pos. ReadLog
// keeps a unit whole only from its unit entry on, and a position worked
// out from partition ends (LogPosition: a slave resumed by its ends)
// falls inside a commit the slave lacks, just after that entry. The log
// is walked entry by entry from at most maxUnitBytes before pos (a larger
// unit is not kept whole anyway); a walk that does not land on pos (pos is
// not the start of an entry, or damage) answers pos.
func (s *Store) UnitStart(pos int64) int64 {
	if s.isClosed() {
		return pos
	}
	durable := s.durable()
	s.segMu.RLock()
	g := s.segmentLocked(pos)
	s.segMu.RUnlock()
	if g == nil || pos <= g.start || pos >= durable {
		return pos // a unit lies in one segment: one starting a segment is whole
	}
	g.logMu.RLock()
	defer g.logMu.RUnlock()
	if g.logClosed {
		return pos
	}
	x := pos - g.start
	r := newSegReader(g.f, min(durable, g.end())-g.start)
	y := int64(0)
	if from := x - maxUnitBytes - entryHeaderLen; from > 0 {
		// Find an entry boundary to walk from; a unit entry before it
		// cannot reach pos.
		if y = r.resync(from); y < 0 {
			return pos
		}
	}
	unit := int64(-1)
	for y < x {
		h, _, n, err := r.entryAt(y)
		if err != nil {
			return pos
		}
		if h.typ == entryUnit && h.off <= maxUnitBytes && y+int64(n)+h.off > x {
			unit = y
		}
		y += int64(n)
	}
	if y != x || unit < 0 {
		return pos
	}
	return g.start + unit
}

// TruncatePartition cuts the partition back to offset, which must be the
// start of one of its entries or its end: the records from offset on are no
// longer served and later appends reuse their offsets. The cut is durable
// when it returns (a define entry with the new end is fsynced; recovery
// replays it, so a crash does not bring the records back). A former master
// rejoining as a slave uses it to drop the tail the new master never had.
func (s *Store) TruncatePartition(topic string, partition int, offset int64) error {
	p := s.lookup(topic, partition)
	if p == nil {
		return ErrNoPartition
	}
	p.mu.Lock()
	end := p.end
	p.mu.Unlock()
	if offset == end {
		return nil
	}
	if offset < 0 || offset > end {
		return fmt.Errorf("%w: cut %s-%d at %d outside [0, %d]", ErrBadArgument, topic, partition, offset, end)
	}
	if err := s.submit(context.Background(), &request{kind: reqFence, p: p, at: offset}); err != nil {
		return fmt.Errorf("store: cut %s-%d at %d: %w", topic, partition, offset, err)
	}
	p.mu.Lock()
	end = p.end
	p.mu.Unlock()
	if end != offset {
		return fmt.Errorf("%w: cannot cut %s-%d at %d: not the start of an entry (the end is %d)", ErrBadArgument, topic, partition, offset, end)
	}
	return nil
}
