package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"metaq/internal/clock"
)

func TestOffsetForTime(t *testing.T) {
	// In one segment (the active one's blocks and tail), and over many
	// sealed segments whose footers are read through a small cache.
	t.Run("one segment", func(t *testing.T) { testOffsetForTime(t, Options{blockEntries: 16}) })
	t.Run("sealed segments", func(t *testing.T) {
		testOffsetForTime(t, Options{blockEntries: 16, SegmentBytes: 4096, summaryBudget: 8})
	})
}

func testOffsetForTime(t *testing.T, opts Options) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	opts.Clock = fc
	s := openT(t, opts)
	type point struct {
		at  time.Time
		off int64
	}
	var pts []point
	for i := 0; i < 400; i++ {
		// uneven steps: bursts within a millisecond and long pauses
		switch {
		case i%50 == 0:
			fc.Advance(3 * time.Second)
		case i%3 == 0:
			fc.Advance(70 * time.Millisecond)
		}
		a := mustAppend(t, s, "tm", 0, "x")
		pts = append(pts, point{fc.Now(), a[0].Offset})
	}
	info, _ := s.Partition("tm", 0)
	p := s.lookup("tm", 0)
	p.mu.Lock()
	nBlocks, nTail := len(p.blocks), len(p.tail)
	p.mu.Unlock()
	if n := countSegs(s); opts.SegmentBytes > 0 && n < 4 {
		t.Fatalf("want several segments, have %d", n)
	}
	if opts.SegmentBytes == 0 && (nBlocks != 400/16 || nTail != 0) {
		t.Fatalf("index has %d blocks and %d tail entries for 400 chunks in blocks of 16", nBlocks, nTail)
	}
	want := func(q time.Time) int64 {
		for _, x := range pts {
			if !x.at.Before(q) {
				return x.off
			}
		}
		return info.Max
	}
	for q := t0.Add(-time.Hour); q.Before(fc.Now().Add(2 * time.Second)); q = q.Add(37 * time.Millisecond) {
		if q.Before(t0) && q.After(t0.Add(-59*time.Minute)) {
			q = t0.Add(-time.Millisecond)
		}
		got, err := s.OffsetForTime("tm", 0, q)
		if err != nil {
			t.Fatal(err)
		}
		if w := want(q); got != w {
			t.Fatalf("OffsetForTime(%v) = %d, want %d", q.Sub(t0), got, w)
		}
	}
	if _, err := s.OffsetForTime("none", 0, t0); !errors.Is(err, ErrNoPartition) {
		t.Fatalf("missing partition: %v", err)
	}
	// the answers survive a restart (times come from the log)
	dir := s.dir
	s.Close()
	opts.Dir = dir
	s2 := openT(t, opts)
	for _, i := range []int{0, 1, 77, 150, 399} {
		got, _ := s2.OffsetForTime("tm", 0, pts[i].at)
		if w := want(pts[i].at); got != w {
			t.Fatalf("after reopen OffsetForTime(point %d) = %d, want %d", i, got, w)
		}
	}
}

func TestClosedAndContext(t *testing.T) {
	s := openT(t, Options{})
	mustAppend(t, s, "c", 0, "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Append(ctx, "c", 0, []Message{{Body: []byte("b")}}); !errors.Is(err, context.Canceled) {
		// a cancelled context may still win the race to queue; then it is stored
		if err != nil {
			t.Fatalf("append with cancelled context: %v", err)
		}
	}
	_, d := s.LogBounds()
	done := make(chan error, 1)
	go func() { done <- s.WaitDurable(context.Background(), d+1000) }()
	s.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitDurable after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Read("c", 0, 0, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, _, err := s.ReadLog(0, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadLog after Close: %v", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	if _, err := s.Retain("c", time.Now()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Retain after Close: %v", err)
	}
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
	if _, err := Open(Options{Dir: t.TempDir(), BrokerID: 1024}); err == nil {
		t.Fatal("Open with BrokerID 1024 succeeded")
	}
}

func TestIDsRiseAcrossRestartWithClockBack(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openT(t, Options{Dir: dir, Clock: fc})
	a := mustAppend(t, s, "id", 0, "a", "b", "c")
	s.Close()
	fc2 := clock.NewFake(time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)) // a year back
	s2 := openT(t, Options{Dir: dir, Clock: fc2})
	b := mustAppend(t, s2, "id", 0, "d")
	if b[0].ID <= a[2].ID {
		t.Fatalf("id after restart %d <= %d", b[0].ID, a[2].ID)
	}
	if off, _ := s2.OffsetForTime("id", 0, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC)); off != 0 {
		t.Fatalf("OffsetForTime = %d", off)
	}
}
