package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkEachRecord reads every record of want at its own offset with a
// small maxBytes, so that each lookup starts in the block (and segment)
// holding it rather than running on from the previous one.
func checkEachRecord(t *testing.T, s *Store, topic string, want map[int][]byte) {
	t.Helper()
	for p, w := range want {
		for off := 0; off < len(w); {
			n := RecordHeaderLen + int(binary.BigEndian.Uint32(w[off:]))
			got, err := s.Read(topic, p, int64(off), n)
			if err != nil {
				t.Fatalf("Read %s-%d at %d: %v", topic, p, off, err)
			}
			if !bytes.Equal(got, w[off:off+n]) {
				t.Fatalf("Read %s-%d at %d: got %q, want %q", topic, p, off, got, w[off:off+n])
			}
			off += n
		}
	}
}

// rebuilds counts the .idx files rebuilt from the log since start-up.
func rebuilds(s *Store) int {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	n := 0
	for _, g := range s.segs {
		n += int(g.idxGen.Load())
	}
	return n
}

// A sealed segment's .idx ends with a footer listing its blocks; a clean
// start-up reads no footer, and a lookup reads one only when it needs
// that segment. A footer that is cut short, has a flipped byte anywhere
// (blocks or trailer) or is gone with its file is never trusted: the .idx
// is rebuilt from its segment's log alone (at start-up when its size
// shows it, else at the first lookup), and every record is served right.
func TestFooterDamageRebuiltFromLog(t *testing.T) {
	for _, damage := range []string{"truncated", "flipped block", "flipped trailer", "extra bytes", "deleted"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 16 << 10, blockEntries: 8}
			s := openT(t, opts)
			want := fill(t, s, "f", 3, 250)
			s.Close()
			idx := logFiles(t, dir, idxSuffix)
			if len(idx) < 4 {
				t.Fatalf("want several segments, have %d", len(idx))
			}
			victim := idx[1]
			b, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			foot := len(b) - footTrailerLen - int(binary.BigEndian.Uint32(b[len(b)-footTrailerLen+12:]))*footBlockLen
			if binary.BigEndian.Uint32(b[len(b)-footTrailerLen:]) != footMagic || foot <= idxHeaderLen {
				t.Fatalf("%s has no footer", victim)
			}
			lazy := false
			switch damage {
			case "truncated":
				b = b[:len(b)-footTrailerLen/2]
			case "flipped block":
				b[foot+footBlockLen+17] ^= 0x08 // the second block's first offset
				lazy = true
			case "flipped trailer":
				b[len(b)-footTrailerLen+9] ^= 0x01 // its entry count
				lazy = true
			case "extra bytes":
				b = append(b, 0, 0, 0, 0)
			}
			if damage == "deleted" {
				os.Remove(victim)
			} else if err := os.WriteFile(victim, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cfs := &countFS{}
			opts.FS = cfs
			s2 := openT(t, opts)
			seg, _ := os.Stat(strings.TrimSuffix(victim, idxSuffix) + segSuffix)
			n := cfs.logRead.Load()
			if lazy && n != 0 {
				t.Fatalf("start-up read %d log bytes; a footer is only checked when read", n)
			}
			if !lazy && n != seg.Size() {
				t.Fatalf("start-up read %d log bytes, want only the damaged index's segment (%d)", n, seg.Size())
			}
			checkEachRecord(t, s2, "f", want)
			checkParts(t, s2, "f", want)
			if lazy && rebuilds(s2) != 1 {
				t.Fatalf("%d .idx rebuilt, want the damaged one", rebuilds(s2))
			}
			s2.Close()
			cfs2 := &countFS{}
			opts.FS = cfs2
			s3 := openT(t, opts)
			if n := cfs2.logRead.Load(); n != 0 {
				t.Fatalf("clean start-up after the rebuild read %d log bytes", n)
			}
			checkParts(t, s3, "f", want)
		})
	}
}

// A footer that is valid in itself but not the one the checkpoint
// recorded (an .idx from another copy of the directory) is not trusted.
func TestFooterFromAnotherCopyNotTrusted(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 16 << 10, blockEntries: 8}
	s := openT(t, opts)
	want := fill(t, s, "c", 2, 200)
	s.Close()
	victim := logFiles(t, dir, idxSuffix)[1]
	b, _ := os.ReadFile(victim)
	// Swap two blocks of the footer and re-seal it with a valid crc: the
	// file checks out alone, but its crc is not the checkpoint's.
	m := int(binary.BigEndian.Uint32(b[len(b)-footTrailerLen+12:]))
	foot := len(b) - footTrailerLen - m*footBlockLen
	fbs, _, err := decodeFooter(b[foot:], binary.BigEndian.Uint32(b[len(b)-footTrailerLen+8:]), int64(binary.BigEndian.Uint64(b[len(b)-footTrailerLen+16:])))
	if err != nil || len(fbs) < 2 {
		t.Fatalf("footer: %d blocks, %v", len(fbs), err)
	}
	fbs[0].ms++
	b = append(b[:foot], encodeFooter(fbs, binary.BigEndian.Uint32(b[len(b)-footTrailerLen+8:]), int64(binary.BigEndian.Uint64(b[len(b)-footTrailerLen+16:])))...)
	os.WriteFile(victim, b, 0o644)
	s2 := openT(t, opts)
	checkEachRecord(t, s2, "c", want)
	if rebuilds(s2) != 1 {
		t.Fatal("a footer the checkpoint does not vouch for was trusted")
	}
}

// A crash while a segment is being sealed (after its footer was written,
// in part or whole, and before the checkpoint that records it) loses
// nothing: the old checkpoint still sees the segment active, so the footer
// is cut away, the segment re-indexed from the checkpoint's position and
// sealed again.
func TestCrashDuringSealing(t *testing.T) {
	for _, cut := range []string{"footer whole", "footer torn", "footer not written"} {
		t.Run(cut, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 16 << 10, blockEntries: 8}
			s := openT(t, opts)
			want := fill(t, s, "k", 3, 30)
			s.Close()
			// The checkpoint of a clean stop in the middle of segment N...
			ck, _ := os.ReadFile(filepath.Join(dir, ckptName))
			active := logFiles(t, dir, idxSuffix)
			victim := active[len(active)-1]
			s = openT(t, opts)
			more := fill(t, s, "k", 3, 200)
			for p, b := range more {
				want[p] = append(want[p], b...)
			}
			s.Close()
			// ...put back as if the process died after N's footer was
			// written and before the checkpoint after the roll.
			if err := os.WriteFile(filepath.Join(dir, ckptName), ck, 0o644); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(victim)
			if binary.BigEndian.Uint32(b[len(b)-footTrailerLen:]) != footMagic {
				t.Fatalf("%s was not sealed", victim)
			}
			m := int(binary.BigEndian.Uint32(b[len(b)-footTrailerLen+12:]))
			foot := len(b) - footTrailerLen - m*footBlockLen
			switch cut {
			case "footer torn":
				os.Truncate(victim, int64(foot+footBlockLen+5))
			case "footer not written":
				os.Truncate(victim, int64(foot))
			}
			s2 := openT(t, opts)
			checkEachRecord(t, s2, "k", want)
			s2.Close()
			cfs := &countFS{}
			opts.FS = cfs
			s3 := openT(t, opts)
			if n := cfs.logRead.Load(); n != 0 {
				t.Fatalf("clean start-up after recovery read %d log bytes", n)
			}
			checkParts(t, s3, "k", want)
		})
	}
}

// A partition cut back (TruncatePartition) to an offset in a sealed
// segment serves the records before the cut and the ones appended after
// it, not the cut ones still listed in that segment's footer, also after
// a restart.
func TestCutIntoSealedSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 16 << 10, blockEntries: 8}
	s := openT(t, opts)
	want := fill(t, s, "t", 2, 300)
	// A record boundary in the first half of partition 0 (a sealed segment).
	w := want[0]
	cut := 0
	for cut < len(w)/3 {
		cut += RecordHeaderLen + int(binary.BigEndian.Uint32(w[cut:]))
	}
	if err := s.TruncatePartition("t", 0, int64(cut)); err != nil {
		t.Fatal(err)
	}
	want[0] = append([]byte(nil), w[:cut]...)
	for i := 0; i < 100; i++ {
		body := fmt.Sprintf("after-%d", i)
		a := mustAppend(t, s, "t", 0, body)
		if a[0].Offset != int64(len(want[0])) {
			t.Fatalf("append after the cut at %d, want %d", a[0].Offset, len(want[0]))
		}
		want[0] = AppendRecord(want[0], a[0].ID, 0, []byte(body))
	}
	checkEachRecord(t, s, "t", want)
	s.Close()
	s = openT(t, opts)
	checkEachRecord(t, s, "t", want)
	checkParts(t, s, "t", want)
}

// The summary cache holds at most its budget of footer blocks however many
// sealed segments are read, and evicted summaries are read again.
func TestSummaryCacheBounded(t *testing.T) {
	opts := Options{SegmentBytes: 8 << 10, blockEntries: 4, summaryBudget: 20}
	s := openT(t, opts)
	want := fill(t, s, "e", 2, 300)
	if n := countSegs(s); n < 10 {
		t.Fatalf("want many segments, have %d", n)
	}
	for round := 0; round < 2; round++ {
		checkEachRecord(t, s, "e", want)
		if segs, blocks := s.sums.size(); blocks > 20 || segs == 0 {
			t.Fatalf("cache holds %d segments, %d blocks; budget 20 blocks", segs, blocks)
		}
	}
	if _, err := s.OffsetForTime("e", 1, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// A directory written by the format-2 store (testdata/v2store, written by
// that code: every block in the checkpoint, .idx files without footers) is
// upgraded in place from its checkpoint, reading no log: the sealed
// segments' .idx get footers, every .idx the format-3 header, and the
// checkpoint is format 3 from the next one on. Its data is served
// unchanged. A crash in the middle of the upgrade (the format-2 checkpoint
// still there, some files already rewritten) is upgraded again.
func TestOpenFormat2Directory(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v2store")); err != nil {
		t.Fatal(err)
	}
	v2ck, _ := os.ReadFile(filepath.Join(dir, ckptName))
	if v := binary.BigEndian.Uint32(v2ck[4:]); v != formatV2 {
		t.Fatalf("testdata checkpoint has format %d", v)
	}
	cfs := &countFS{}
	opts := Options{Dir: dir, SegmentBytes: 8192, FS: cfs}
	check := func(s *Store) {
		t.Helper()
		for p := 0; p < 3; p++ {
			recs := decodeAll(t, readAll(t, s, "old", p))
			if len(recs) != 60 {
				t.Fatalf("old-%d: %d records, want 60", p, len(recs))
			}
			for i, r := range recs {
				if body := fmt.Sprintf("v2-%d-%d-%s", p, i, strings.Repeat("y", 69)); string(r.Body) != body {
					t.Fatalf("old-%d record %d: body %q", p, i, r.Body)
				}
			}
		}
	}
	s := openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("the upgrade read %d log bytes; the checkpoint has all it needs", n)
	}
	check(s)
	s.Close()
	ck, _ := os.ReadFile(filepath.Join(dir, ckptName))
	if v := binary.BigEndian.Uint32(ck[4:]); v != ckptFormat {
		t.Fatalf("checkpoint still has format %d after the upgrade", v)
	}
	idx := logFiles(t, dir, idxSuffix)
	for i, f := range idx {
		b, _ := os.ReadFile(f)
		if len(b) < idxHeaderLen || binary.BigEndian.Uint32(b[4:]) != formatV3 {
			t.Fatalf("%s not upgraded", f)
		}
		if sealed := binary.BigEndian.Uint32(b[len(b)-footTrailerLen:]) == footMagic; sealed != (i < len(idx)-1) {
			t.Fatalf("%s: footer %v", f, sealed)
		}
	}
	// As if the upgrade had crashed before its first format-3 checkpoint.
	os.WriteFile(filepath.Join(dir, ckptName), v2ck, 0o644)
	s = openT(t, opts)
	check(s)
	s.Close()
	cfs.logRead.Store(0)
	s = openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("start-up after the upgrade read %d log bytes", n)
	}
	check(s)
	if rebuilds(s) != 0 {
		t.Fatalf("%d .idx rebuilt after the upgrade", rebuilds(s))
	}
	mustAppend(t, s, "old", 0, "new")
}

// Lookups of old data through footers and a small summary cache stay
// right while the writer rolls and seals segments, retention trims
// another topic's spans and readers evict each other's summaries.
func TestSealedLookupsUnderLoad(t *testing.T) {
	opts := Options{SegmentBytes: 8 << 10, blockEntries: 4, summaryBudget: 16}
	s := openT(t, opts)
	s.SetPolicy("z", Policy{MaxAge: time.Millisecond})
	want := fill(t, s, "u", 3, 150)
	fill(t, s, "z", 2, 100)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // more data, more rolls, footers and checkpoints
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mustAppend(t, s, []string{"u", "z"}[i%2], i%3%2, fmt.Sprintf("more-%d", i))
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := s.Retain("z", time.Now()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var readers sync.WaitGroup
	for r := 0; r < 3; r++ {
		readers.Add(1)
		go func(r int) {
			defer readers.Done()
			for round := 0; round < 3; round++ {
				for p, w := range want {
					for off := 0; off < len(w); {
						n := RecordHeaderLen + int(binary.BigEndian.Uint32(w[off:]))
						got, err := s.Read("u", p, int64(off), n)
						if err != nil || !bytes.Equal(got, w[off:off+n]) {
							t.Errorf("reader %d: Read u-%d at %d: %v", r, p, off, err)
							return
						}
						off += n
						for k := 0; k < r+1 && off < len(w); k++ { // skip a few records
							off += RecordHeaderLen + int(binary.BigEndian.Uint32(w[off:]))
						}
					}
				}
				if _, err := s.OffsetForTime("u", r%3, time.Now().Add(-time.Minute)); err != nil {
					t.Errorf("reader %d: OffsetForTime: %v", r, err)
					return
				}
			}
		}(r)
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	if err := s.Health(); err != nil {
		t.Fatal(err)
	}
	if rebuilds(s) != 0 {
		t.Fatalf("%d .idx rebuilt: a lookup took a sound footer or block for damaged", rebuilds(s))
	}
}
