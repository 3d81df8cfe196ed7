package store

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The scrub reads every sealed segment (and the part of the active one
// that recovery did not scan) in the background, at most
// Options.ScrubRate bytes per second, checking every entry's crc as
// recovery does. Damage it finds takes the path of damage met by a read
// (damageFound: quarantine, hole, the intact records written back, and
// the hole listed by Damaged for repair from a replica). A segment it
// finished is marked checked, so gets may send its bytes unread (ReadRun);
// see the zero-copy rule in doc.go.

// ScrubStatus reports the background scrub.
type ScrubStatus struct {
	Enabled  bool      `json:"enabled"`
	Rate     int64     `json:"rateBytesPerSec"`
	Passes   int64     `json:"passes"`            // full passes finished since start-up
	Bytes    int64     `json:"bytes"`             // bytes checked since start-up
	Damaged  int64     `json:"damaged"`           // damaged ranges found since start-up
	Position int64     `json:"position"`          // log position the current pass has reached
	LastPass time.Time `json:"lastPass,omitzero"` // when the last full pass ended
	// Unchecked is the log bytes below the position recovery scanned from
	// that no pass has checked yet: gets of them are checked on the way.
	Unchecked int64 `json:"unchecked"`
}

// scrubState is the scrub goroutine's state; mu is a leaf lock.
type scrubState struct {
	mu       sync.Mutex
	st       ScrubStatus
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Scrub returns the scrub's status.
func (s *Store) Scrub() ScrubStatus {
	s.scrub.mu.Lock()
	st := s.scrub.st
	s.scrub.mu.Unlock()
	st.Enabled = s.opts.ScrubRate > 0
	st.Rate = s.opts.ScrubRate
	from := s.checkedFrom.Load()
	if tab := s.segTab.Load(); tab != nil {
		for _, g := range *tab {
			if g.start < from && !g.checked.Load() {
				st.Unchecked += min(g.end(), from) - g.start
			}
		}
	}
	return st
}

// startScrub starts the scrub goroutine (Open).
func (s *Store) startScrub() {
	s.scrub.stop = make(chan struct{})
	s.scrub.done = make(chan struct{})
	if s.opts.ScrubRate <= 0 {
		close(s.scrub.done)
		return
	}
	go func() {
		defer close(s.scrub.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.scrub.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		lim := rate.NewLimiter(rate.Limit(s.opts.ScrubRate), scrubBurst)
		select {
		case <-s.clk.After(s.opts.ScrubDelay):
		case <-ctx.Done():
			return
		}
		for {
			if err := s.scrubPass(ctx, lim); err != nil {
				return
			}
			select {
			case <-s.clk.After(s.opts.ScrubInterval):
			case <-ctx.Done():
				return
			}
		}
	}()
}

// stopScrub stops the scrub goroutine and waits for it (Close).
func (s *Store) stopScrub() {
	if s.scrub.stop == nil {
		return
	}
	s.scrub.stopOnce.Do(func() { close(s.scrub.stop) })
	<-s.scrub.done
}

// scrubBurst is the most the scrub reads at once (its rate limiter's
// burst): one window of the segment reader.
const scrubBurst = 1 << 20

// scrubPass checks every sealed segment, and the part of the active one
// below checkedFrom, once; it returns only ctx's error.
func (s *Store) scrubPass(ctx context.Context, lim *rate.Limiter) error {
	tab := s.segTab.Load()
	if tab == nil {
		return nil
	}
	segs := append([]*segment(nil), *tab...)
	for _, g := range segs {
		limit := g.size.Load()
		if !g.isSealed() {
			// The active segment: what this process wrote or recovery
			// scanned needs no scrub.
			limit = min(limit, s.checkedFrom.Load()-g.start)
			if limit <= 0 {
				continue
			}
		}
		if err := s.scrubSegment(ctx, lim, g, limit); err != nil {
			return err
		}
	}
	s.scrub.mu.Lock()
	s.scrub.st.Passes++
	s.scrub.st.LastPass = s.clk.Now()
	s.scrub.mu.Unlock()
	return nil
}

// scrubSegment checks the entries of g's first limit bytes and marks g
// checked. A segment retention takes away meanwhile is left.
func (s *Store) scrubSegment(ctx context.Context, lim *rate.Limiter, g *segment, limit int64) error {
	if !g.pin() {
		return nil
	}
	defer g.unpin()
	sf, done := scrubFile(g.f, limit)
	defer done()
	r := newSegReader(sf, limit)
	r.window = scrubBurst
	var damaged []posRange
	// paid: bytes read and not yet paid for to the rate limiter, in
	// pieces of at most its burst.
	var paid int64
	pay := func() error {
		for paid > 0 {
			k := min(paid, scrubBurst)
			if err := lim.WaitN(ctx, int(k)); err != nil {
				return err
			}
			paid -= k
		}
		return nil
	}
	for x := int64(0); x < limit; {
		if paid >= scrubBurst {
			s.scrub.mu.Lock()
			s.scrub.st.Position = g.start + x
			s.scrub.st.Bytes += paid
			s.scrub.mu.Unlock()
			if err := pay(); err != nil {
				return err
			}
			if g.isClosed() {
				return nil
			}
		}
		s.segMu.RLock()
		q := s.quarantinedAt(g.start + x)
		s.segMu.RUnlock()
		if q > 0 {
			x = q - g.start
			continue
		}
		_, _, n, err := r.entryAt(x)
		if err != nil {
			y := r.resync(x + 1)
			if y < 0 {
				y = limit
			}
			s.log.Error("STORE: damaged log entry found by the scrub", "position", g.start+x, "err", err)
			damaged = append(damaged, posRange{g.start + x, g.start + y})
			paid += y - x
			x = y
			continue
		}
		paid += int64(n)
		x += int64(n)
	}
	s.scrub.mu.Lock()
	s.scrub.st.Bytes += paid
	s.scrub.st.Position = g.start + limit
	s.scrub.st.Damaged += int64(len(damaged))
	s.scrub.mu.Unlock()
	if len(damaged) > 0 {
		s.damagedRanges(damaged)
	}
	g.checked.Store(true)
	return pay()
}

// scrubFile returns f for the scrub's reads of its first limit bytes, and
// a function to call when the scrub is done with it. Where f can tell what
// is in the page cache (pageCacher), the pieces the scrub read that had no
// page cached before its reads (and before the kernel's read-ahead for
// them) are dropped from the page cache once read, so a pass over cold
// segments does not push the data readers use out of it; pieces that were
// cached, even in part, are left as they were.
func scrubFile(f File, limit int64) (File, func()) {
	pc, ok := f.(pageCacher)
	if !ok {
		return f, func() {}
	}
	c := &cacheNeutralFile{File: f, pc: pc, limit: limit}
	return c, c.finish
}

// scrubPiece is the unit the scrub asks about and drops: small enough
// that a partly cached window is mostly dropped where it was cold, large
// enough that the calls cost nothing beside the read (16 per MiB).
const scrubPiece = 64 << 10

// scrubLookahead is how far past a read its pieces are classified, before
// the read: the kernel's read-ahead may bring in that much after it (up to
// the device's read_ahead_kb; more than this is left cached).
const scrubLookahead = 16 << 20

// cacheNeutralFile is a File read forward by the scrub. Each piece of its
// first limit bytes is classified (cold: no page cached) before the first
// read that could bring it in, and a cold piece is dropped once the reads
// have moved past it (reads never go back before the last read's start)
// or at finish.
type cacheNeutralFile struct {
	File
	pc      pageCacher
	limit   int64
	cold    []bool // per piece from 0, classified so far
	dropped int    // pieces below this are dealt with
}

func (f *cacheNeutralFile) ReadAt(b []byte, off int64) (int, error) {
	for end := min(off+int64(len(b))+scrubLookahead, f.limit); int64(len(f.cold))*scrubPiece < end; {
		p := int64(len(f.cold)) * scrubPiece
		c, ok := f.pc.CachedBytes(p, scrubPiece)
		f.cold = append(f.cold, ok && c == 0)
	}
	f.drop(int(off / scrubPiece))
	return f.File.ReadAt(b, off)
}

// drop drops the cold pieces below piece to from the page cache.
func (f *cacheNeutralFile) drop(to int) {
	to = min(to, len(f.cold))
	for i := f.dropped; i < to; i++ {
		if f.cold[i] {
			f.pc.DropCache(int64(i)*scrubPiece, scrubPiece)
		}
	}
	f.dropped = max(f.dropped, to)
}

func (f *cacheNeutralFile) finish() { f.drop(len(f.cold)) }
