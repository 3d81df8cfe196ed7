package store

import (
	"sync"
	"sync/atomic"
)

// growWaits holds, by partition, the channel that those waiting for the
// partition to grow share (Grown), with the lowest end one of them waits
// past. A group commit (or flush) that raises a partition's readable end
// past it closes the channel and drops the entry: one close per partition
// and commit, however many gets wait on it. mu is a leaf; n, the number of
// entries, is read without it, so a commit with nobody waiting pays one
// atomic load.
type growWaits struct {
	mu sync.Mutex
	m  map[*partition]growWait
	n  atomic.Int64
}

type growWait struct {
	ch  chan struct{}
	end int64 // the lowest end waited past
}

// Grown returns a channel that is closed once the partition's readable end
// may be past end: at once when it already is, otherwise by the group
// commit (or flush) that makes records past the lowest end waited on the
// partition readable. Everyone waiting on a partition shares one channel,
// so a commit wakes them with one close per partition, not one per put or
// per waiter; a waiter past a higher end may be woken before its end is
// passed and checks again. A partition that never grows (or is deleted, or
// a store that is closed) never closes it: callers bound their wait.
// ErrNoPartition when partition num of topic does not exist.
func (s *Store) Grown(topic string, num int, end int64) (<-chan struct{}, error) {
	p := s.lookup(topic, num)
	if p == nil {
		return nil, ErrNoPartition
	}
	g := &s.grow
	g.mu.Lock()
	defer g.mu.Unlock()
	// Under mu, after the writer raised durable and before it takes mu to
	// wake (wakeGrown): a raise this misses finds the entry.
	if p.durable.Load() > end {
		return closedChan, nil
	}
	w, ok := g.m[p]
	if !ok {
		if g.m == nil {
			g.m = make(map[*partition]growWait)
		}
		w = growWait{ch: make(chan struct{}), end: end}
	}
	w.end = min(w.end, end)
	g.m[p] = w
	g.n.Store(int64(len(g.m)))
	return w.ch, nil
}

// wakeGrown closes the channels of the partitions among parts whose
// readable end passed what is waited for (writer goroutine, after it
// raised their durable ends; no other lock held). With parts nil it checks
// every partition waited on.
func (s *Store) wakeGrown(parts []partEnd) {
	g := &s.grow
	if g.n.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	wake := func(p *partition, w growWait) {
		if p.durable.Load() > w.end {
			close(w.ch)
			delete(g.m, p)
		}
	}
	if parts == nil || len(g.m) <= len(parts) {
		for p, w := range g.m {
			wake(p, w)
		}
	} else {
		for _, x := range parts {
			if w, ok := g.m[x.p]; ok {
				wake(x.p, w)
			}
		}
	}
	g.n.Store(int64(len(g.m)))
}
