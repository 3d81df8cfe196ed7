package store

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/clock"
	"metaq/internal/testutil"
)

func TestRetention(t *testing.T) {
	for _, mode := range []string{"delete", "archive", "zip"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			opts := Options{Dir: dir, SegmentBytes: 4096, Clock: fc, blockEntries: 4}
			s := openT(t, opts)
			pol := Policy{MaxAge: time.Hour, Archive: mode != "delete", ArchiveCompress: mode == "zip"}
			s.SetPolicy("old", pol)
			s.SetPolicy("keep", Policy{}) // MaxAge 0: forever
			body := strings.Repeat("o", 500)
			// hour 0: old data of both topics, several segments
			mustAppend(t, s, "keep", 0, "kept forever") // sits in the first segment
			old0 := fill(t, s, "old", 2, 60)
			firstSegs := logFiles(t, dir, segSuffix)
			if len(firstSegs) < 3 {
				t.Fatalf("want several segments, have %d", len(firstSegs))
			}
			fc.Advance(2 * time.Hour)
			newA := mustAppend(t, s, "old", 0, body)
			mustAppend(t, s, "old", 1, body)
			tNew := fc.Now()
			fc.Advance(10 * time.Minute)

			n, err := s.Retain("old", fc.Now())
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("removed %d segments although keep-0 pins them", n)
			}
			info, _ := s.Partition("old", 0)
			if info.Min != newA[0].Offset {
				t.Fatalf("old-0 Min %d, want %d", info.Min, newA[0].Offset)
			}
			_, err = s.Read("old", 0, 0, 100)
			var re *RangeError
			if !errors.As(err, &re) || re.Min != newA[0].Offset {
				t.Fatalf("read below Min: %v", err)
			}
			if off, _ := s.NearestOffset("old", 0, 0); off != newA[0].Offset {
				t.Fatalf("NearestOffset below Min = %d", off)
			}
			if off, _ := s.OffsetForTime("old", 0, tNew.Add(-time.Minute)); off != newA[0].Offset {
				t.Fatalf("OffsetForTime = %d", off)
			}
			b, err := s.Read("old", 0, info.Min, 1<<20)
			if err != nil || !bytes.Contains(b, []byte(body)) {
				t.Fatalf("read of kept data: %v", err)
			}

			// The keep topic's partition goes: now nothing pins the old segments.
			if err := s.DeletePartition("keep", 0); err != nil {
				t.Fatal(err)
			}
			n, err = s.Retain("old", fc.Now())
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("nothing removed")
			}
			segs := logFiles(t, dir, segSuffix)
			if len(segs) != len(logFiles(t, dir, segSuffix)) || len(segs) >= len(firstSegs)+1 {
				t.Fatalf("segments before %d, after %d", len(firstSegs), len(segs))
			}
			first, _ := s.LogBounds()
			if first == 0 {
				t.Fatal("LogBounds first did not move")
			}
			if _, _, err := s.ReadLog(0, 100); !errors.Is(err, ErrLogTruncated) {
				t.Fatalf("ReadLog below first: %v", err)
			}
			// The index files went with their segments, and so did every
			// in-memory reference to their blocks.
			idx := logFiles(t, dir, idxSuffix)
			if len(idx) != len(segs) {
				t.Fatalf("%d .idx files for %d segments after retention", len(idx), len(segs))
			}
			for _, f := range idx {
				if _, err := os.Stat(strings.TrimSuffix(f, idxSuffix) + segSuffix); err != nil {
					t.Fatalf("index %s left without its segment", f)
				}
			}
			for _, info := range s.Partitions() {
				p := s.lookup(info.Topic, info.Partition)
				p.mu.Lock()
				for _, b := range p.blocks {
					if b.g.removed {
						t.Fatalf("%s-%d keeps a block of a removed segment", info.Topic, info.Partition)
					}
				}
				for sp := range p.spans.All() {
					if s.spanSeg(sp.seg).removed {
						t.Fatalf("%s-%d keeps a span of a removed segment", info.Topic, info.Partition)
					}
				}
				p.mu.Unlock()
			}
			switch mode {
			case "delete":
				if len(logFiles(t, dir, ".arc"))+len(logFiles(t, dir, ".zip")) != 0 {
					t.Fatal("archived although policy deletes")
				}
			case "archive":
				if len(logFiles(t, dir, ".arc")) != n {
					t.Fatalf("%d .arc files, removed %d", len(logFiles(t, dir, ".arc")), n)
				}
			case "zip":
				zips := logFiles(t, dir, ".zip")
				if len(zips) != n {
					t.Fatalf("%d .zip files, removed %d", len(zips), n)
				}
				zr, err := zip.OpenReader(zips[0])
				if err != nil {
					t.Fatal(err)
				}
				rc, _ := zr.File[0].Open()
				data, _ := io.ReadAll(rc)
				rc.Close()
				zr.Close()
				name := strings.TrimSuffix(filepath.Base(zips[0]), ".zip")
				if zr.File[0].Name != name || len(data) == 0 {
					t.Fatalf("zip entry %q (%d bytes)", zr.File[0].Name, len(data))
				}
				if _, _, _, err := decodeEntry(data); err != nil {
					t.Fatalf("zipped segment does not start with an entry: %v", err)
				}
			}
			// the active segment is never removed, and new data is kept
			a := mustAppend(t, s, "old", 0, "fresh")
			_ = old0
			s.Close()
			s2 := openT(t, opts)
			info2, _ := s2.Partition("old", 0)
			if info2.Min != newA[0].Offset || info2.Max != a[0].Offset+25 {
				t.Fatalf("after reopen %+v", info2)
			}
			if got := readAll(t, s2, "old", 0); !bytes.HasSuffix(got, AppendRecord(nil, a[0].ID, 0, []byte("fresh"))) {
				t.Fatal("fresh record missing after reopen")
			}
			// Without the checkpoint, trimmed records still in the kept
			// segments become readable again (valid, contiguous) until the
			// next Retain trims them once more.
			s2.Close()
			os.Remove(filepath.Join(dir, ckptName))
			s3 := openT(t, opts)
			s3.SetPolicy("old", pol)
			info3, _ := s3.Partition("old", 0)
			if info3.Min > newA[0].Offset || info3.Max != info2.Max {
				t.Fatalf("after scan-only reopen %+v", info3)
			}
			if _, err := VerifyRecords(readAll(t, s3, "old", 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := s3.Retain("old", fc.Now()); err != nil {
				t.Fatal(err)
			}
			if info4, _ := s3.Partition("old", 0); info4.Min != newA[0].Offset {
				t.Fatalf("Retain after scan-only reopen: %+v", info4)
			}
		})
	}
}

func TestRetainEverythingExpired(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openT(t, Options{SegmentBytes: 4096, Clock: fc})
	s.SetPolicy("x", Policy{MaxAge: time.Minute})
	fill(t, s, "x", 1, 30)
	fc.Advance(time.Hour)
	if _, err := s.Retain("x", fc.Now()); err != nil {
		t.Fatal(err)
	}
	info, _ := s.Partition("x", 0)
	if info.Min != info.Max || info.Max == 0 {
		t.Fatalf("expired partition %+v, want empty at its end", info)
	}
	s.segMu.RLock()
	n := len(s.segs)
	s.segMu.RUnlock()
	if n != 1 {
		t.Fatalf("%d segments left, want only the active one", n)
	}
	a := mustAppend(t, s, "x", 0, "next")
	if a[0].Offset != info.Max {
		t.Fatalf("append after expiry at %d, want %d", a[0].Offset, info.Max)
	}
}

func TestRetainConcurrent(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openT(t, Options{SegmentBytes: 4096, Clock: fc})
	s.SetPolicy("x", Policy{MaxAge: time.Minute})
	s.SetPolicy("y", Policy{MaxAge: time.Minute})
	fill(t, s, "x", 2, 40)
	fill(t, s, "y", 2, 40)
	fc.Advance(time.Hour)
	want := fill(t, s, "y", 1, 3) // new data stays
	s.segMu.RLock()
	before := len(s.segs)
	s.segMu.RUnlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			n, err := s.Retain([]string{"x", "y"}[i%2], fc.Now())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	s.segMu.RLock()
	after := len(s.segs)
	s.segMu.RUnlock()
	if total != before-after || total == 0 {
		t.Fatalf("removed %d in total, segments %d -> %d", total, before, after)
	}
	got := readAll(t, s, "y", 0)
	if !bytes.HasSuffix(got, want[0]) {
		t.Fatal("new data lost")
	}
	if err := s.Health(); err != nil {
		t.Fatal(err)
	}
}

// The partition table lives in the log: after the segments holding a
// partition's creation are retained away and the checkpoint is lost, the
// defines repeated at each segment start still describe it.
func TestPartitionTableSurvivesRetention(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := Options{Dir: dir, SegmentBytes: 4096, Clock: fc}
	s := openT(t, opts)
	s.SetPolicy("quiet", Policy{MaxAge: time.Hour})
	s.SetPolicy("busy", Policy{MaxAge: time.Hour})
	a := mustAppend(t, s, "quiet", 0, "only record")
	if err := s.CreatePartition("empty", 3, 500); err != nil {
		t.Fatal(err)
	}
	fill(t, s, "busy", 2, 40)
	fc.Advance(2 * time.Hour)
	want := fill(t, s, "busy", 2, 30)
	for _, topic := range []string{"quiet", "busy"} {
		if _, err := s.Retain(topic, fc.Now()); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := s.LogBounds()
	if first == 0 {
		t.Fatal("no segment was removed")
	}
	s.Close()
	os.Remove(filepath.Join(dir, ckptName))
	s2 := openT(t, opts)
	q, err := s2.Partition("quiet", 0)
	if err != nil || q.Min != a[0].Offset+int64(RecordHeaderLen+len("only record")) || q.Max != q.Min {
		t.Fatalf("quiet-0 after retention and a lost checkpoint: %+v %v", q, err)
	}
	e, err := s2.Partition("empty", 3)
	if err != nil || e.Min != 500 || e.Max != 500 {
		t.Fatalf("empty-3: %+v %v", e, err)
	}
	for p, w := range want {
		got := readAll(t, s2, "busy", p)
		if !bytes.HasSuffix(got, w) {
			t.Fatalf("busy-%d lost its recent data", p)
		}
	}
	if a2 := mustAppend(t, s2, "quiet", 0, "next"); a2[0].Offset != q.Max {
		t.Fatalf("quiet-0 continues at %d, want %d", a2[0].Offset, q.Max)
	}
}

// A retention pass over a topic of many partitions logs one line for the
// topic, not one per partition (with 10,000 partitions a pass wrote 10,000
// lines, each under its partition's lock).
func TestRetainLogsOnceForTheTopic(t *testing.T) {
	var logb testutil.SyncBuffer
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openT(t, Options{SegmentBytes: 4096, Clock: fc, Logger: slog.New(slog.NewTextHandler(&logb, nil))})
	const parts = 40
	s.SetPolicy("x", Policy{MaxAge: time.Minute})
	fill(t, s, "x", parts, 3)
	fc.Advance(time.Hour)
	for p := 0; p < parts; p++ {
		mustAppend(t, s, "x", p, "kept")
	}
	if _, err := s.Retain("x", fc.Now()); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(logb.String(), "\n") {
		if strings.Contains(l, "retention moved") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "topic=x") || !strings.Contains(lines[0], fmt.Sprintf("partitions=%d", parts)) {
		t.Fatalf("want one retention line for topic x naming %d partitions, got %d:\n%s", parts, len(lines), strings.Join(lines, "\n"))
	}
	for p := 0; p < parts; p++ {
		info, _ := s.Partition("x", p)
		b, err := s.Read("x", p, info.Min, 1<<20)
		if info.Min == 0 || err != nil || !bytes.Contains(b, []byte("kept")) || bytes.Contains(b, []byte("x-r")) {
			t.Fatalf("partition %d after retention: %+v, read %q, %v", p, info, b, err)
		}
	}
}
