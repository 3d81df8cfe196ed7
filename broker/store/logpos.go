package store

import "fmt"

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
	p.mu.RLock()
	durable, lo := p.durable, p.min
	p.mu.RUnlock()
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
