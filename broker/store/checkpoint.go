package store

// loadCheckpoint returns the log position from which recovery must scan.
func (s *Store) loadCheckpoint() int64 {
	if len(s.segs) == 0 {
		return 0
	}
	return s.segs[0].start
}

// sealed is called by the writer when a segment stops being active.
func (s *Store) sealed(g *segment) {}

// afterRoll is called by the writer after a new segment started.
func (s *Store) afterRoll() {}

// shutdown runs after the writer stopped: final fsync and checkpoint.
func (s *Store) shutdown() error {
	if s.Health() != nil {
		return nil
	}
	return s.syncNow()
}
