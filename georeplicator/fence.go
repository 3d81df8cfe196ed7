package georeplicator

import (
	"errors"
	"fmt"
	"time"

	"metaq/broker/store"
)

// Fence is the master's write permission as replication sees it. While
// Fenced the bundle refuses client writes (retriable), so that two masters
// of one brokerId never acknowledge writes at the same time.
type Fence struct {
	Fenced bool
	// SteppedDown: a newer generation exists (Newer); this master must
	// become a slave. Otherwise a fence is a lost lease and lifts when
	// enough slaves ack again.
	SteppedDown bool
	Newer       uint64
	Reason      string
}

// Fence returns the master's current fence.
func (s *Shipper) Fence() Fence {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	return s.fence
}

// ObserveGeneration tells the master about a generation seen elsewhere
// (ZooKeeper, gossip, a slave's hello). A newer one than its own fences it
// for good: it steps down.
func (s *Shipper) ObserveGeneration(gen uint64, from string) {
	if gen <= s.opts.Generation {
		return
	}
	s.setFence(Fence{Fenced: true, SteppedDown: true, Newer: gen,
		Reason: fmt.Sprintf("generation %d (seen at %s) is newer than this master's %d: stepping down", gen, from, s.opts.Generation)})
}

// setFence records f and reports a change. A step-down is final.
func (s *Shipper) setFence(f Fence) {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	if s.fence.SteppedDown || s.fence == f {
		return
	}
	s.fence = f
	if f.Fenced {
		s.log.Warn("REPLICATION: master fenced: not acknowledging writes", "reason", f.Reason)
	} else {
		s.log.Info("REPLICATION: master lease confirmed by a majority of sites")
	}
	if s.opts.OnFence != nil {
		s.opts.OnFence(f)
	}
}

// majority is how many sites (this master included) must confirm it.
func (s *Shipper) majority() int { return s.opts.Sites/2 + 1 }

// leaseLoop keeps the lease: every half keepalive it counts the slaves
// that acked within Lease. A master confirms itself only once Lease and a
// keepalive have passed since it started, and counts a slave only once that
// long has passed since the slave connected: by then any master the slave
// (or this site, before a promotion) confirmed before has lost that
// confirmation, so two masters are never confirmed at once.
func (s *Shipper) leaseLoop() {
	if s.opts.Sites <= 1 {
		return
	}
	settle := s.opts.Lease + s.opts.Keepalive
	started := s.opts.Clock.Now()
	check := func() {
		now := s.opts.Clock.Now()
		if now.Sub(started) < settle {
			return
		}
		confirmed := 1
		s.mu.Lock()
		for _, ss := range s.sessions {
			last := ss.lastAck.Load()
			if now.Sub(ss.connectedAt) >= settle && last != 0 && now.Sub(time.Unix(0, last)) < s.opts.Lease {
				confirmed++
			}
		}
		s.mu.Unlock()
		if confirmed >= s.majority() {
			s.setFence(Fence{})
			return
		}
		s.setFence(Fence{Fenced: true, Reason: fmt.Sprintf("only %d of %d sites confirmed this master within %s", confirmed, s.opts.Sites, s.opts.Lease)})
	}
	t := s.opts.Clock.NewTicker(max(s.opts.Keepalive/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C():
			check()
		}
	}
}

// fenceAtStart fences a master that holds a lease before Start returns, so
// that it never acknowledges a write before a majority confirmed it.
func (s *Shipper) fenceAtStart() {
	if s.opts.Sites > 1 {
		s.setFence(Fence{Fenced: true, Reason: "waiting for a majority of sites to confirm this master"})
	}
}

// history is the history of this master's log: History, else this
// master's own epoch when it was promoted (PromotionEnds), else none (the
// first master's log).
func (s *Shipper) history() []Epoch {
	if s.opts.History != nil {
		return s.opts.History
	}
	if s.opts.PromotionEnds != nil {
		return []Epoch{{Generation: s.opts.Generation, Ends: s.opts.PromotionEnds}}
	}
	return []Epoch{}
}

// cutEnds is where a slave that resumes by partition ends must cut its
// partitions for this master's sake: where this master's generations its
// log lacks start (from its lineage, see forkEnds; common is the newest
// generation both hold, ok false without a lineage), else this master's
// promotion ends (a slave that predates histories).
func (s *Shipper) cutEnds(h hello) (cuts map[string]int64, common uint64, ok bool) {
	if !h.HasLineage {
		return s.opts.PromotionEnds, 0, false
	}
	hist := s.history()
	common = commonGeneration(hist, h.Lineage)
	return cutsAbove(hist, common, h.Ends), common, true
}

// positionLocator is implemented by stores that can map a partition offset
// to a log position (*store.Store); others are scanned.
type positionLocator interface {
	LogPosition(topic string, partition int, offset int64) (int64, error)
}

// unitLocator is implemented by stores that write units (*store.Store):
// it moves a log position inside a unit back to the unit's start.
type unitLocator interface {
	UnitStart(pos int64) int64
}

// startForEnds finds where a slave that followed another master's log
// resumes on this one: the lowest log position that covers every
// partition's end it reported, or of where it cuts (cuts, see cutEnds),
// whichever is lower (partitions it lacks from their start). The
// receiver verifies and skips what it already holds.
func (s *Shipper) startForEnds(ends []partEnd, cuts map[string]int64) (start int64, truncated bool, err error) {
	first, durable := s.opts.Source.LogBounds()
	have := make(map[pkey]int64, len(ends))
	for _, e := range ends {
		have[pkey{e.Topic, e.Partition}] = e.End
	}
	start = durable
	for _, p := range s.opts.Source.Partitions() {
		from, ok := have[pkey{p.Topic, p.Partition}]
		if pe, cut := cuts[PartKey(p.Topic, p.Partition)]; ok && cut && from > pe {
			from = pe // the slave cuts what it holds beyond (see Receiver.cutTail)
		}
		if !ok || from < p.Min {
			truncated = truncated || ok
			from = p.Min
		}
		if from >= p.Max {
			continue
		}
		pos, err := s.logPosition(p.Topic, p.Partition, from, first, durable)
		if err != nil {
			return 0, false, fmt.Errorf("georeplicator: log position of %s-%d@%d: %w", p.Topic, p.Partition, from, err)
		}
		start = min(start, pos)
	}
	if u, ok := s.opts.Source.(unitLocator); ok {
		// The lowest end may fall inside a commit the slave lacks: start
		// at its unit entry so that the commit is shipped whole.
		start = u.UnitStart(start)
	}
	if start < first {
		start, truncated = first, true
	}
	return start, truncated, nil
}

func (s *Shipper) logPosition(topic string, part int, off, first, durable int64) (int64, error) {
	if l, ok := s.opts.Source.(positionLocator); ok {
		pos, err := l.LogPosition(topic, part, off)
		if !errors.Is(err, store.ErrNoPartition) {
			return pos, err
		}
		return durable, nil
	}
	// Scan the log: entries carry no position of their own, so the start of
	// the read that found the first entry ending beyond off is the answer
	// (a little early at most; the receiver skips what it holds).
	for pos := first; pos < durable; {
		entries, next, err := s.opts.Source.ReadLog(pos, 64<<10)
		if err != nil {
			return 0, err
		}
		for _, e := range entries {
			if e.Topic == topic && e.Partition == part && e.Offset+int64(len(e.Records)) > off {
				return pos, nil
			}
		}
		if next <= pos {
			break
		}
		pos = next
	}
	return durable, nil
}
