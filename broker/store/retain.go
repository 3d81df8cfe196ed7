package store

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Retain applies a topic's retention policy at now; returns segments removed.
//
// Step 1 trims every partition of topic: Min moves to the first chunk
// appended at or after now-MaxAge (the partition may become empty at its
// end). Step 2 removes, oldest first, the sealed log segments that no
// longer hold a live chunk of any partition; they are archived instead when
// a topic with data in them asks for it. A checkpoint is written before any
// file goes, so the new Min values survive a restart. See doc.go.
func (s *Store) Retain(topic string, now time.Time) (int, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	// One retention pass at a time: two passes would pick the same dead
	// segments.
	s.retainMu.Lock()
	defer s.retainMu.Unlock()
	pol := s.policy(topic)
	if pol.MaxAge > 0 {
		cutoff := now.Add(-pol.MaxAge)
		s.mu.RLock()
		var ps []*partition
		for k, p := range s.parts {
			if k.topic == topic {
				ps = append(ps, p)
			}
		}
		s.mu.RUnlock()
		moved, dropped := 0, int64(0)
		for _, p := range ps {
			if n := s.trim(p, cutoff); n > 0 {
				moved++
				dropped += n
			}
		}
		// One line per pass, not per partition: a topic of 10,000
		// partitions would log 10,000 lines each time.
		if moved > 0 {
			s.log.Info("STORE: retention moved partition starts", "topic", topic, "partitions", moved,
				"of", len(ps), "bytes", dropped, "cutoff", cutoff)
		}
	}
	return s.removeDeadSegments()
}

func (s *Store) isClosed() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	return s.closed
}

// trim drops p's chunks appended before cutoff; returns how far its Min
// moved (bytes), 0 if it did not.
func (s *Store) trim(p *partition, cutoff time.Time) int64 {
	newMin, err := s.OffsetForTime(p.key.topic, p.key.num, cutoff)
	if err != nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	newMin = min(newMin, p.durable.Load())
	if newMin <= p.min {
		return 0
	}
	// Spans and blocks wholly below newMin go (blocks copied so the
	// dropped part of the array is freed); the one holding newMin stays.
	// The spans before the one holding newMin end at or below it; that
	// one too when it is the last and its chunks end there.
	j := p.spanIndexLocked(newMin)
	if n := p.spans.Len(); j >= 0 && j == n-1 && p.spanEndLocked(j) <= newMin {
		j = n
	}
	p.spans.DropFront(j)
	i := 0
	for i < len(p.blocks) && p.blockEndLocked(i) <= newMin {
		i++
	}
	if i > 0 {
		p.blocks = append([]blockRef(nil), p.blocks[i:]...)
	}
	segs := []int64{newMin}
	for _, x := range p.segs {
		if x > newMin {
			segs = append(segs, x)
		}
	}
	p.setSegsLocked(segs)
	p.trimDamageLocked(newMin)
	moved := newMin - p.min
	p.min = newMin
	return moved
}

// removeDeadSegments removes the leading sealed segments without live data.
func (s *Store) removeDeadSegments() (int, error) {
	// The lowest log position any partition still serves.
	low := int64(-1)
	s.mu.RLock()
	for _, p := range s.parts {
		p.mu.Lock()
		first := int64(-1) // the start of the segment holding p's first live chunk
		if n := p.spans.Len(); n > 0 && p.min < p.spanEndLocked(n-1) {
			first = s.spanSeg(p.spans.At(max(p.spanIndexLocked(p.min), 0)).seg).start
		} else if n := len(p.blocks); n > 0 && p.min < p.blockEndLocked(n-1) {
			first = p.blocks[max(p.blockIndexLocked(p.min), 0)].g.start
		} else if k := p.tailIndexLocked(p.min); len(p.tail) > 0 && p.min < p.end {
			for _, e := range p.tail[max(k, 0):] {
				if !e.hole() {
					first = e.pos
					break
				}
			}
		}
		if p.adoptedLow >= 0 && (first < 0 || p.adoptedLow < first) {
			first = p.adoptedLow
		}
		for _, f := range p.fills {
			// records written back into holes sit later in the log than
			// the chunks around them
			if f.off+int64(f.n) > p.min && (first < 0 || f.pos < first) {
				first = f.pos
			}
		}
		if first >= 0 && (low < 0 || first < low) {
			low = first
		}
		p.mu.Unlock()
	}
	s.mu.RUnlock()
	s.segMu.RLock()
	var dead []*segment
	for _, g := range s.segs[:len(s.segs)-1] { // never the active segment
		if low >= 0 && g.end() > low {
			break
		}
		dead = append(dead, g)
	}
	s.segMu.RUnlock()
	if len(dead) == 0 {
		return 0, nil
	}
	// Persist the trimmed state first: after a crash the checkpoint must
	// not point below the first remaining segment.
	if err := s.submit(context.Background(), &request{kind: reqCheckpoint}); err != nil {
		return 0, fmt.Errorf("store: retention checkpoint: %w", err)
	}
	archive, compress := s.archivePolicy(dead)
	s.segMu.Lock()
	s.segs = s.segs[len(dead):]
	s.publishSegs()
	s.segMu.Unlock()
	removed := 0
	var firstErr error
	for _, g := range dead {
		g.close()
		s.sums.drop(g)
		var err error
		switch {
		case archive && compress:
			err = s.zipSegment(g)
		case archive:
			err = s.fs.Rename(g.path, g.path+".arc")
		default:
			err = s.fs.Remove(g.path)
		}
		if rerr := s.fs.Remove(idxPathOf(g.path)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = rerr
		}
		if err != nil {
			s.log.Error("STORE: cannot remove expired segment", "segment", g.path, "err", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("store: remove segment %s: %w", g.path, err)
			}
			continue
		}
		removed++
		s.log.Info("STORE: retention removed log segment", "segment", g.path, "archived", archive, "compressed", compress)
	}
	if err := s.fs.SyncDir(s.logDir); err != nil && firstErr == nil {
		firstErr = fmt.Errorf("store: sync %s: %w", s.logDir, err)
	}
	return removed, firstErr
}

// archivePolicy reports whether any topic with data in the segments wants
// them archived (and compressed).
func (s *Store) archivePolicy(dead []*segment) (archive, compress bool) {
	topics := map[string]bool{}
	for _, g := range dead {
		pids, err := s.segmentPids(g)
		if err != nil {
			// unreadable: keep the bytes, archiving is the safe choice
			return true, false
		}
		s.mu.RLock()
		for pid := range pids {
			if p := s.byPid[pid]; p != nil {
				topics[p.key.topic] = true
			}
		}
		s.mu.RUnlock()
	}
	for t := range topics {
		p := s.policy(t)
		archive = archive || p.Archive
		compress = compress || (p.Archive && p.ArchiveCompress)
	}
	return archive, compress
}

// zipSegment writes g into <segment>.zip (one entry named after the file,
// as MetaQ's ArchiveDeletePolicy) and removes the segment.
func (s *Store) zipSegment(g *segment) error {
	src, err := s.fs.OpenFile(g.path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	size, err := src.Size()
	if err != nil {
		return err
	}
	tmp := g.path + ".zip.tmp"
	f, err := s.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	w, err := zw.Create(filepath.Base(g.path))
	if err == nil {
		_, err = io.Copy(w, io.NewSectionReader(src, 0, size))
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Datasync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, g.path+".zip")
	}
	if err != nil {
		s.fs.Remove(tmp)
		return err
	}
	return s.fs.Remove(g.path)
}

// segmentPids returns the partitions with data in segment g, from its
// footer (every chunk's block is listed there; blocks of chunks cut back
// since only add a topic), or from the log when the footer cannot be read.
func (s *Store) segmentPids(g *segment) (map[uint32]bool, error) {
	pids := map[uint32]bool{}
	if sm, err := s.summary(g); err == nil {
		for _, b := range sm.blocks {
			pids[b.pid] = true
		}
		return pids, nil
	}
	size := g.size.Load()
	r := newSegReader(g.f, size)
	for x := int64(0); x < size; {
		h, _, n, err := r.entryAt(x)
		if err != nil {
			return nil, fmt.Errorf("store: read %s at %d: %w", g.path, x, err)
		}
		if h.typ == entryData {
			pids[h.pid] = true
		}
		x += int64(n)
	}
	return pids, nil
}
