package georeplicator

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed: the Shipper was closed.
var ErrClosed = errors.New("georeplicator: closed")

// ErrSitesTimeout is what a synchronous put's wait ends with when too few
// slave sites fsynced its record in time.
var ErrSitesTimeout = errors.New("georeplicator: too few slave sites fsynced the record in time")

// siteWaits holds the waits of synchronous topics' puts (Shipper.AwaitDurable):
// each for a master log position to be fsynced at n slave sites, a site
// being a slave group (a datacenter may run several slaves of one group).
// The slaves report what they fsynced in ack.Synced.
type siteWaits struct {
	// urgent is the highest position waited for: the builders send the
	// frames below it at once, without lingering, flagged flagSyncNow.
	urgent atomic.Int64

	mu     sync.Mutex
	synced map[slaveKey]int64 // from this process's acks only
	waits  map[*siteWait]struct{}
	closed bool
}

type siteWait struct {
	pos   int64
	n     int
	done  func(error)
	timer *time.Timer
}

func newSiteWaits() *siteWaits {
	w := &siteWaits{synced: map[slaveKey]int64{}, waits: map[*siteWait]struct{}{}}
	w.urgent.Store(-1)
	return w
}

// sitesAtLocked counts the slave groups with a slave that fsynced pos.
func (w *siteWaits) sitesAtLocked(pos int64) int {
	var groups []string
	for k, p := range w.synced {
		if p < pos {
			continue
		}
		seen := false
		for _, g := range groups {
			seen = seen || g == k.Group
		}
		if !seen {
			groups = append(groups, k.Group)
		}
	}
	return len(groups)
}

// add registers a wait; done runs exactly once, on another goroutine or
// before add returns, and must not block.
func (w *siteWaits) add(pos int64, n int, timeout time.Duration, done func(error)) {
	sw := &siteWait{pos: pos, n: n, done: done}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		done(fmt.Errorf("georeplicator: wait for %d slave sites: %w", n, ErrClosed))
		return
	}
	if w.sitesAtLocked(pos) >= n {
		w.mu.Unlock()
		done(nil)
		return
	}
	w.waits[sw] = struct{}{}
	for {
		u := w.urgent.Load()
		if u >= pos || w.urgent.CompareAndSwap(u, pos) {
			break
		}
	}
	sw.timer = time.AfterFunc(timeout, func() {
		w.mu.Lock()
		_, ok := w.waits[sw]
		delete(w.waits, sw)
		got := w.sitesAtLocked(pos)
		w.mu.Unlock()
		if ok {
			done(fmt.Errorf("%w: %d of %d slave sites fsynced log position %d within %s", ErrSitesTimeout, got, n, pos, timeout))
		}
	})
	w.mu.Unlock()
}

// ack records that a slave fsynced the log up to synced and ends the waits
// that now have their sites. The latest ack wins, so a slave that came
// back with less (its store was replaced) no longer counts for what it lost.
func (w *siteWaits) ack(k slaveKey, synced int64) {
	var ready []*siteWait
	w.mu.Lock()
	old, ok := w.synced[k]
	w.synced[k] = synced
	if ok && synced <= old {
		w.mu.Unlock()
		return
	}
	for sw := range w.waits {
		if w.sitesAtLocked(sw.pos) >= sw.n {
			ready = append(ready, sw)
			delete(w.waits, sw)
		}
	}
	w.mu.Unlock()
	for _, sw := range ready {
		sw.timer.Stop()
		sw.done(nil)
	}
}

// close ends every wait with ErrClosed.
func (w *siteWaits) close() {
	w.mu.Lock()
	w.closed = true
	waits := w.waits
	w.waits = map[*siteWait]struct{}{}
	w.mu.Unlock()
	for sw := range waits {
		sw.timer.Stop() // its func finds the wait gone and does nothing
		sw.done(fmt.Errorf("georeplicator: wait for %d slave sites: %w", sw.n, ErrClosed))
	}
}

// ConnectedSites is the number of slave sites (distinct slave groups) with
// a slave connected now.
func (s *Shipper) ConnectedSites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	groups := map[string]struct{}{}
	for k := range s.sessions {
		groups[k.Group] = struct{}{}
	}
	return len(groups)
}

// AwaitDurable calls done once n slave sites have fsynced the master's log
// up to its durable end as of the call (which covers every record whose
// group commit has returned), or with an error wrapping ErrSitesTimeout
// after timeout, or ErrClosed. done runs exactly once, possibly before
// AwaitDurable returns, and must not block. The frames up to that position
// are sent at once and the slaves asked to fsync them (flagSyncNow).
func (s *Shipper) AwaitDurable(n int, timeout time.Duration, done func(error)) {
	_, pos := s.opts.Source.LogBounds()
	s.waits.add(pos, n, timeout, done)
	s.mu.Lock()
	for _, ss := range s.sessions {
		signal(ss.urgentWake)
	}
	s.mu.Unlock()
}
