package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countFS counts the bytes read from log segments.
type countFS struct {
	OSFS
	logRead  atomic.Int64 // bytes read from log segments
	logReads atomic.Int64 // preads of log segments
	idxRead  atomic.Int64 // bytes read from .idx files
	idxReads atomic.Int64 // preads of .idx files
	logWait  atomic.Int64 // nanoseconds spent in preads of log segments
	idxWait  atomic.Int64 // nanoseconds spent in preads of .idx files
	logAhead atomic.Int64 // bytes of log segments asked for ahead (Prefetch)
	idxAhead atomic.Int64 // bytes of .idx files asked for ahead
}

type countFile struct {
	File
	fs *countFS
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) && !strings.HasSuffix(name, idxSuffix) {
		return f, err
	}
	return countFile{f, c}, nil
}

func (f countFile) ReadAt(b []byte, off int64) (int, error) {
	t := time.Now()
	n, err := f.File.ReadAt(b, off)
	d := int64(time.Since(t))
	if strings.HasSuffix(f.Name(), idxSuffix) {
		f.fs.idxRead.Add(int64(n))
		f.fs.idxReads.Add(1)
		f.fs.idxWait.Add(d)
	} else {
		f.fs.logRead.Add(int64(n))
		f.fs.logReads.Add(1)
		f.fs.logWait.Add(d)
	}
	return n, err
}

// Prefetch counts what is asked for ahead and passes it on.
func (f countFile) Prefetch(off, n int64) {
	if strings.HasSuffix(f.Name(), idxSuffix) {
		f.fs.idxAhead.Add(n)
	} else {
		f.fs.logAhead.Add(n)
	}
	prefetch(f.File, off, n)
}

// fill appends a mix of partitions; returns the expected partition bytes.
func fill(t *testing.T, s *Store, topic string, parts, rounds int) map[int][]byte {
	t.Helper()
	want := map[int][]byte{}
	for i := 0; i < rounds; i++ {
		for p := 0; p < parts; p++ {
			body := fmt.Sprintf("%s-r%d-p%d-%s", topic, i, p, strings.Repeat("b", (i*7+p)%300))
			a := mustAppend(t, s, topic, p, body)
			want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
		}
	}
	return want
}

func checkParts(t *testing.T, s *Store, topic string, want map[int][]byte) {
	t.Helper()
	for p, w := range want {
		if got := readAll(t, s, topic, p); !bytes.Equal(got, w) {
			t.Fatalf("%s-%d: %d bytes, want %d", topic, p, len(got), len(w))
		}
	}
}

func logFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "log", "*"+suffix))
	return m
}

func TestCleanReopenScansNothing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 64 << 10}
	s := openT(t, opts)
	want := fill(t, s, "k", 7, 150)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(logFiles(t, dir, segSuffix)); n < 4 {
		t.Fatalf("want several segments, have %d", n)
	}
	cfs := &countFS{}
	opts.FS = cfs
	s2 := openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("start-up after a clean close read %d log bytes", n)
	}
	checkParts(t, s2, "k", want)
	// appending after the reopen keeps offsets continuous
	a := mustAppend(t, s2, "k", 3, "more")
	if a[0].Offset != int64(len(want[3])) {
		t.Fatalf("append after reopen at %d, want %d", a[0].Offset, len(want[3]))
	}
}

func TestRebuildIndexes(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, old []byte)
	}{
		{"no checkpoint", func(t *testing.T, dir string, _ []byte) { os.Remove(filepath.Join(dir, ckptName)) }},
		{"no idx files", func(t *testing.T, dir string, _ []byte) {
			for _, f := range logFiles(t, dir, idxSuffix) {
				os.Remove(f)
			}
		}},
		{"short idx", func(t *testing.T, dir string, _ []byte) {
			f := logFiles(t, dir, idxSuffix)[1]
			st, _ := os.Stat(f)
			os.Truncate(f, st.Size()-5)
		}},
		{"corrupt checkpoint", func(t *testing.T, dir string, _ []byte) {
			p := filepath.Join(dir, ckptName)
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x55
			os.WriteFile(p, b, 0o644)
		}},
		{"stale checkpoint", func(t *testing.T, dir string, old []byte) {
			os.WriteFile(filepath.Join(dir, ckptName), old, 0o644)
		}},
		{"checkpoint beyond log", func(t *testing.T, dir string, _ []byte) {
			segs := logFiles(t, dir, segSuffix)
			last := segs[len(segs)-1]
			st, _ := os.Stat(last)
			f, _ := os.OpenFile(last, os.O_WRONLY, 0)
			f.Truncate(st.Size() - 10)
			f.Close()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 32 << 10}
			s := openT(t, opts)
			want := fill(t, s, "r", 5, 40)
			s.Close()
			old, _ := os.ReadFile(filepath.Join(dir, ckptName))
			s = openT(t, opts)
			more := fill(t, s, "r", 5, 60)
			for p := range want {
				want[p] = append(want[p], more[p]...)
			}
			s.Close()
			c.damage(t, dir, old)
			s2 := openT(t, opts)
			if c.name == "checkpoint beyond log" {
				// the last record of the last chunk was cut: every partition
				// but one is whole, and all are valid prefixes.
				for p, w := range want {
					got := readAll(t, s2, "r", p)
					if !bytes.Equal(got, w[:len(got)]) || len(w)-len(got) > 400 {
						t.Fatalf("partition %d: %d of %d bytes", p, len(got), len(w))
					}
				}
				return
			}
			checkParts(t, s2, "r", want)
			// and the rebuilt state is written back: a clean reopen agrees
			s2.Close()
			s3 := openT(t, opts)
			checkParts(t, s3, "r", want)
		})
	}
}

func TestTornTail(t *testing.T) {
	for _, keepCkpt := range []bool{true, false} {
		t.Run(fmt.Sprint("checkpoint=", keepCkpt), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir}
			s := openT(t, opts)
			want := fill(t, s, "t", 3, 20)
			s.Close()
			if !keepCkpt {
				os.Remove(filepath.Join(dir, ckptName))
			}
			seg := logFiles(t, dir, segSuffix)[0]
			orig, _ := os.ReadFile(seg)
			good := int64(len(orig))
			// a half-written entry: a real frame cut short
			frame := appendEntry(nil, entryHeader{typ: entryData, pid: 0, off: int64(len(want[0])), ms: 1},
				AppendRecord(nil, 1, 0, []byte("torn-away")))
			f, _ := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(frame[:len(frame)-4])
			f.Close()
			s2 := openT(t, opts)
			// the torn bytes are gone: the file is the old one plus whole
			// entries (start-up re-states the partitions)
			now, _ := os.ReadFile(seg)
			if int64(len(now)) < good || !bytes.Equal(now[:good], orig) {
				t.Fatal("recovery changed the valid part of the segment")
			}
			for x := good; x < int64(len(now)); {
				h, _, n, err := decodeEntry(now[x:])
				if err != nil || h.typ != entryDefine {
					t.Fatalf("after the repaired tail at %d: %+v %v", x, h, err)
				}
				x += int64(n)
			}
			checkParts(t, s2, "t", want)
			if len(logFiles(t, dir, ".bad")) != 0 {
				t.Fatal("a torn tail was quarantined as corruption")
			}
			a := mustAppend(t, s2, "t", 0, "after")
			if a[0].Offset != int64(len(want[0])) {
				t.Fatalf("append after repair at %d", a[0].Offset)
			}
			want[0] = AppendRecord(want[0], a[0].ID, 0, []byte("after"))
			s2.Close()
			checkParts(t, openT(t, opts), "t", want)
		})
	}
}

// entryPositions lists the log positions of data entries of pid in seg.
func entryPositions(t *testing.T, seg string, pid uint32) []int64 {
	t.Helper()
	b, _ := os.ReadFile(seg)
	var out []int64
	for x := 0; x < len(b); {
		h, _, n, err := decodeEntry(b[x:])
		if err != nil {
			t.Fatalf("decode %s at %d: %v", seg, x, err)
		}
		if h.typ == entryData && h.pid == pid {
			out = append(out, int64(x))
		}
		x += n
	}
	return out
}

func TestMidLogCorruption(t *testing.T) {
	for _, what := range []string{"payload", "length"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir}
			s := openT(t, opts)
			want := fill(t, s, "m", 3, 30) // pids 0,1,2 interleaved
			s.Close()
			os.Remove(filepath.Join(dir, ckptName)) // as after a crash: scan all
			seg := logFiles(t, dir, segSuffix)[0]
			pos := entryPositions(t, seg, 1)
			bad := pos[10]
			b, _ := os.ReadFile(seg)
			if what == "payload" {
				b[bad+entryHeaderLen+25] ^= 0xFF
			} else {
				b[bad+5] ^= 0x40 // length field: the framing itself is lost
			}
			os.WriteFile(seg, b, 0o644)

			s2 := openT(t, opts)
			// partitions 0 and 2 are untouched
			checkParts(t, s2, "m", map[int][]byte{0: want[0], 2: want[2]})
			// partition 1 loses only the damaged chunk: the records after
			// it stay readable at their offsets
			checkHoles(t, s2, "m", 1, want[1], 10)
			bads := logFiles(t, dir, ".bad")
			if len(bads) != 1 || !strings.Contains(bads[0], fmt.Sprintf(".%d.bad", bad)) {
				t.Fatalf("quarantine copies: %v", bads)
			}
			// ReadLog skips the damage, ships a hole marker and the rest
			first, _ := s2.LogBounds()
			ents, _, err := s2.ReadLog(first, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			checkShipped(t, ents, 1, want[1], 10)
			// the partition continues at its old end, and all of it
			// survives a clean and an unclean restart
			a := mustAppend(t, s2, "m", 1, "continues")
			if a[0].Offset != int64(len(want[1])) {
				t.Fatalf("append at %d, want %d", a[0].Offset, len(want[1]))
			}
			w1 := AppendRecord(bytes.Clone(want[1]), a[0].ID, 0, []byte("continues"))
			s2.Close()
			s3 := openT(t, opts)
			checkParts(t, s3, "m", map[int][]byte{0: want[0], 2: want[2]})
			checkHoles(t, s3, "m", 1, w1, 10)
			s3.Close()
			os.Remove(filepath.Join(dir, ckptName))
			s4 := openT(t, opts)
			checkParts(t, s4, "m", map[int][]byte{0: want[0], 2: want[2]})
			checkHoles(t, s4, "m", 1, w1, 10)
			if _, err := s4.Append(context.Background(), "m", 1, []Message{{Body: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			if err := s4.Health(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkHoles checks that partition part serves every record of want
// except record number lostRec (counted from 0), at its offset, and that
// the store reports exactly that record's range as damaged.
func checkHoles(t *testing.T, s *Store, topic string, part int, want []byte, lostRec int) {
	t.Helper()
	got := readRecords(t, s, topic, part)
	var from, to int64
	for i, x := 0, 0; x < len(want); i++ {
		_, n, err := DecodeRecord(want[x:])
		if err != nil {
			t.Fatal(err)
		}
		r, ok := got[int64(x)]
		switch {
		case i == lostRec && ok:
			t.Fatalf("damaged record %d at %d served", i, x)
		case i == lostRec:
			from, to = int64(x), int64(x+n)
		case !ok || !bytes.Equal(r, want[x:x+n]):
			t.Fatalf("%s-%d: record %d at %d not served as written", topic, part, i, x)
		}
		x += n
	}
	if len(got) != len(decodeAll(t, want))-1 {
		t.Fatalf("%s-%d: %d records served", topic, part, len(got))
	}
	d := s.Damaged()
	if len(d) != 1 || d[0] != (Damage{Topic: topic, Partition: part, From: from, To: to}) {
		t.Fatalf("damage reported %v, want %s-%d [%d, %d)", d, topic, part, from, to)
	}
}

// checkShipped checks ReadLog's entries of partition part: every record of
// want but number lostRec, in offset order, with a hole marker before the
// records after the lost one.
func checkShipped(t *testing.T, ents []LogEntry, part int, want []byte, lostRec int) {
	t.Helper()
	var got []byte
	next := int64(0)
	markers := 0
	for _, e := range ents {
		if e.Partition != part {
			continue
		}
		if len(e.Records) == 0 {
			markers++
			got = append(got, want[next:e.Offset]...) // what the marker skips
			next = e.Offset
			continue
		}
		if e.Offset != next {
			t.Fatalf("partition %d shipped at %d, expected %d", part, e.Offset, next)
		}
		got = append(got, e.Records...)
		next += int64(len(e.Records))
	}
	wantMarkers := 0
	if lostRec < len(decodeAll(t, want)) {
		wantMarkers = 1
	}
	if markers != wantMarkers || !bytes.Equal(got, want) {
		t.Fatalf("partition %d: %d hole markers, %d of %d bytes", part, markers, len(got), len(want))
	}
}

func TestCorruptionFoundWhileReading(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	want := damagedLog(t, dir, "q", 5) // bit rot below the checkpoint

	s2 := openT(t, opts) // clean checkpoint: nothing is scanned, damage unseen
	got, err := s2.Read("q", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	recs := decodeAll(t, got)
	if len(recs) != 5 || !bytes.Equal(got, want[0][:len(got)]) {
		t.Fatalf("served %d records before the damage, want 5", len(recs))
	}
	var de *DamagedError
	if _, err := s2.Read("q", 0, int64(len(got)), 100); !errors.As(err, &de) || de.Next <= int64(len(got)) {
		t.Fatalf("read at the damaged chunk: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ckptName)); !os.IsNotExist(err) {
		t.Fatal("checkpoint kept after damage was found")
	}
	checkHoles(t, s2, "q", 0, want[0], 5)
	a := mustAppend(t, s2, "q", 0, "after damage")
	if a[0].Offset != int64(len(want[0])) {
		t.Fatalf("append after damage at %d, want %d", a[0].Offset, len(want[0]))
	}
	w0 := AppendRecord(bytes.Clone(want[0]), a[0].ID, 0, []byte("after damage"))
	checkHoles(t, s2, "q", 0, w0, 5)
	checkParts(t, s2, "q", map[int][]byte{1: want[1]})
	s2.Close()
	// the next start-up scans everything, quarantines the damage and
	// reaches the same partitions
	s3 := openT(t, opts)
	checkHoles(t, s3, "q", 0, w0, 5)
	checkParts(t, s3, "q", map[int][]byte{1: want[1]})
	if len(logFiles(t, dir, ".bad")) != 1 {
		t.Fatal("damage not quarantined at the next start-up")
	}
}

// A crash between creating a segment and writing its define entries leaves
// an empty last segment: the next chunk of a partition then starts exactly
// where its previous chunk (at the end of the previous file) ends. Reads must
// not treat the two as one file region.
func TestChunksAdjacentAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 4096}
	s := openT(t, opts)
	var want []byte
	for len(logFiles(t, dir, segSuffix)) < 2 {
		a := mustAppend(t, s, "adj", 0, strings.Repeat("a", 300))
		want = AppendRecord(want, a[0].ID, 0, []byte(strings.Repeat("a", 300)))
	}
	s.Close()
	segs := logFiles(t, dir, segSuffix)
	// The roll runs after the ack, so the last append may already sit in
	// the new segment: it goes with the truncation below.
	if n := len(entryPositions(t, segs[len(segs)-1], 0)); n > 0 {
		want = want[:len(want)-n*320]
	}
	os.Truncate(segs[len(segs)-1], 0) // killed before the defines were written
	os.Remove(filepath.Join(dir, ckptName))
	s2 := openT(t, opts)
	a := mustAppend(t, s2, "adj", 0, "next")
	want = AppendRecord(want, a[0].ID, 0, []byte("next"))
	got, err := s2.Read("adj", 0, 0, 1<<20)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read across the segment end: %d bytes (want %d), %v", len(got), len(want), err)
	}
	if info, _ := s2.Partition("adj", 0); info.Max != int64(len(want)) {
		t.Fatalf("partition fenced: %+v", info)
	}
}

func TestCorruptionFoundByReadLog(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	s := openT(t, opts)
	want := fill(t, s, "rl", 3, 20)
	s.Close()
	seg := logFiles(t, dir, segSuffix)[0]
	pos := entryPositions(t, seg, 1)[7]
	b, _ := os.ReadFile(seg)
	b[pos+entryHeaderLen+2] ^= 0x01
	os.WriteFile(seg, b, 0o644)

	s2 := openT(t, opts)
	first, _ := s2.LogBounds()
	var ents []LogEntry
	for p := first; ; {
		e, next, err := s2.ReadLog(p, 512)
		if err != nil {
			t.Fatalf("ReadLog at %d: %v", p, err)
		}
		ents = append(ents, e...)
		if next == p {
			break
		}
		p = next
	}
	// the other partitions replicate in full; partition 1 loses only the
	// damaged chunk, which becomes a hole
	checkShipped(t, ents, 0, want[0], 1<<20)
	checkShipped(t, ents, 2, want[2], 1<<20)
	checkShipped(t, ents, 1, want[1], 7)
	checkHoles(t, s2, "rl", 1, want[1], 7)
}

func (f countFile) AdviseRandom() { adviseRandom(f.File) }
