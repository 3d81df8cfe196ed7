package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"metaq/internal/testutil"
)

// ackedRecord is one acknowledged record: where it landed and its bytes.
type ackedRecord struct {
	part int
	off  int64
	rec  []byte
}

// readRecords reads a partition from Min to Max, skipping damaged ranges,
// and returns its records by offset. Every record must decode.
func readRecords(t *testing.T, s *Store, topic string, part int) map[int64][]byte {
	t.Helper()
	info, err := s.Partition(topic, part)
	if err != nil {
		t.Fatalf("Partition %s-%d: %v", topic, part, err)
	}
	out := map[int64][]byte{}
	var run []byte
	runStart := info.Min
	flush := func() {
		for x := 0; x < len(run); {
			_, n, err := DecodeRecord(run[x:])
			if err != nil {
				t.Fatalf("%s-%d: record at %d: %v", topic, part, runStart+int64(x), err)
			}
			out[runStart+int64(x)] = run[x : x+n]
			x += n
		}
	}
	for off := info.Min; off < info.Max; {
		b, err := s.Read(topic, part, off, 1<<20)
		var de *DamagedError
		if errors.As(err, &de) {
			flush()
			run, runStart, off = nil, de.Next, de.Next
			continue
		}
		if err != nil || len(b) == 0 {
			t.Fatalf("Read %s-%d at %d: %d bytes, %v", topic, part, off, len(b), err)
		}
		run = append(run, b...)
		off += int64(len(b))
	}
	flush()
	return out
}

// countSurvivors checks every acknowledged record against what the store
// serves: each one either reads back byte-identical at its offset or lies
// in a reported damaged range. It returns the number lost.
func countSurvivors(t *testing.T, s *Store, topic string, parts int, acked []ackedRecord) int {
	t.Helper()
	got := map[int]map[int64][]byte{}
	for p := 0; p < parts; p++ {
		got[p] = readRecords(t, s, topic, p)
	}
	damaged := s.Damaged()
	inDamage := func(p int, off int64) bool {
		for _, d := range damaged {
			if d.Topic == topic && d.Partition == p && off >= d.From && off < d.To {
				return true
			}
		}
		return false
	}
	lost := 0
	for _, a := range acked {
		r, ok := got[a.part][a.off]
		switch {
		case ok && bytes.Equal(r, a.rec):
		case ok:
			t.Fatalf("%s-%d at %d serves a different record", topic, a.part, a.off)
		case !inDamage(a.part, a.off):
			t.Fatalf("%s-%d at %d: acknowledged record missing outside any reported damage %v", topic, a.part, a.off, damaged)
		default:
			lost++
		}
	}
	served := 0
	for _, m := range got {
		served += len(m)
	}
	if served != len(acked)-lost {
		t.Fatalf("served %d records, %d acknowledged, %d lost", served, len(acked), lost)
	}
	return lost
}

// flipMiddle flips n bytes in the middle of the file at path.
func flipMiddle(t *testing.T, path string, n int) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := len(b) / 2
	for i := 0; i < n; i++ {
		b[at+i] ^= 0xFF
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return int64(at)
}

// damagedLog fills a store at dir with 20 records in each of two
// partitions of topic and closes it, then flips a payload byte of each of
// partition 0's log entries numbered by entries (from 0, in the log's
// first segment). The checkpoint stays: a start-up from it scans nothing
// and reads find the damage. It returns what fill wrote.
func damagedLog(t *testing.T, dir, topic string, entries ...int) map[int][]byte {
	t.Helper()
	s := openT(t, Options{Dir: dir})
	want := fill(t, s, topic, 2, 20)
	s.Close()
	seg := logFiles(t, dir, segSuffix)[0]
	pos := entryPositions(t, seg, 0)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b[pos[e]+entryHeaderLen+3] ^= 0x10
	}
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestCorruptionCostsOnlyDamagedRecords flips 64 bytes in the middle of an
// older, sealed log segment of a real store and restarts it: only the
// records in the damaged entries are lost; everything after them stays
// readable at its original offsets, offsets are not handed out again, and
// the damage is reported with its range.
func TestCorruptionCostsOnlyDamagedRecords(t *testing.T) {
	for _, mode := range []string{"clean checkpoint", "full scan", "unclean", "across two entries"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 64 << 10}
			s := openT(t, opts)
			const parts = 4
			var acked []ackedRecord
			ends := make([]int64, parts)
			for i := 0; i < 1500; i++ {
				p := i % parts
				body := fmt.Sprintf("rec-%d-%s", i, strings.Repeat("x", 60+i%200))
				a := mustAppend(t, s, "c", p, body)
				acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte(body))})
				ends[p] = a[0].Offset + int64(RecordHeaderLen+len(body))
			}
			if mode == "unclean" {
				// Every append was acknowledged after fdatasync: a copy of
				// the files now is what kill -9 would leave (no final
				// checkpoint).
				crashed := t.TempDir()
				testutil.CopyTree(t, dir, crashed)
				s.Close()
				dir = crashed
				opts.Dir = dir
			} else {
				s.Close()
			}
			if mode == "full scan" || mode == "across two entries" {
				os.Remove(filepath.Join(dir, ckptName))
			}
			segs := logFiles(t, dir, segSuffix)
			if len(segs) < 4 {
				t.Fatalf("want several segments, have %d", len(segs))
			}
			wantLost := 1
			if mode == "across two entries" {
				// the tail of one data entry and the header of the next
				b, _ := os.ReadFile(segs[1])
				x := 0
				for x < len(b)/2 {
					_, _, n, err := decodeEntry(b[x:])
					if err != nil {
						t.Fatal(err)
					}
					x += n
				}
				for i := x - 32; i < x+32; i++ {
					b[i] ^= 0xFF
				}
				os.WriteFile(segs[1], b, 0o644)
				wantLost = 2
			} else {
				flipMiddle(t, segs[1], 64)
			}

			s2 := openT(t, opts)
			lost := countSurvivors(t, s2, "c", parts, acked)
			if lost != wantLost {
				t.Fatalf("lost %d of %d acknowledged records, want the %d in the damaged bytes", lost, len(acked), wantLost)
			}
			t.Logf("%s: %d of %d acknowledged records lost to 64 flipped bytes", mode, lost, len(acked))
			dmg := s2.Damaged()
			if len(dmg) == 0 {
				t.Fatal("damage not reported")
			}
			// offsets are never handed out twice
			for p := 0; p < parts; p++ {
				a := mustAppend(t, s2, "c", p, "after")
				if a[0].Offset < ends[p] {
					t.Fatalf("partition %d: append at %d reuses offsets below %d", p, a[0].Offset, ends[p])
				}
				acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte("after"))})
			}
			// the same after a clean and after an unclean restart
			s2.Close()
			s3 := openT(t, opts)
			if n := countSurvivors(t, s3, "c", parts, acked); n != lost {
				t.Fatalf("after a clean restart %d lost, before %d", n, lost)
			}
			if fmt.Sprint(s3.Damaged()) != fmt.Sprint(dmg) {
				t.Fatalf("damage after restart %v, before %v", s3.Damaged(), dmg)
			}
			s3.Close()
			os.Remove(filepath.Join(dir, ckptName))
			s4 := openT(t, opts)
			if n := countSurvivors(t, s4, "c", parts, acked); n != lost {
				t.Fatalf("after a full scan %d lost, before %d", n, lost)
			}
			for p := 0; p < parts; p++ {
				info, _ := s4.Partition("c", p)
				a := mustAppend(t, s4, "c", p, "again")
				if a[0].Offset != info.Max {
					t.Fatalf("partition %d: append at %d, end %d", p, a[0].Offset, info.Max)
				}
			}
		})
	}
}

// TestRepairAndSkip: a damaged range is filled byte-identically from a
// copy (as fetched from a replica), served again and kept across restarts;
// a replica's SkipTo leaves a hole its master reported.
func TestRepairAndSkip(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	want := damagedLog(t, dir, "r", 5)
	os.Remove(filepath.Join(dir, ckptName))

	s2 := openT(t, opts)
	d := s2.Damaged()
	if len(d) != 1 {
		t.Fatalf("damage %v", d)
	}
	lostBytes := want[0][d[0].From:d[0].To]
	// refused: bad records, wrong offset, too long
	bad := bytes.Clone(lostBytes)
	bad[len(bad)-1] ^= 1
	ctx := t.Context()
	if err := s2.Repair(ctx, "r", 0, d[0].From, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("repair with corrupt records: %v", err)
	}
	if err := s2.Repair(ctx, "r", 0, d[0].From+1, lostBytes); err == nil {
		t.Fatal("repair at an offset inside the range accepted")
	}
	if err := s2.Repair(ctx, "r", 0, d[0].From, want[0][d[0].From:]); err == nil {
		t.Fatal("repair longer than the damaged range accepted")
	}
	if err := s2.Repair(ctx, "r", 0, d[0].From, lostBytes); err != nil {
		t.Fatal(err)
	}
	if len(s2.Damaged()) != 0 || s2.Degraded() != nil {
		t.Fatalf("still damaged after repair: %v", s2.Damaged())
	}
	checkParts(t, s2, "r", want)
	s2.Close()
	checkParts(t, openT(t, opts), "r", want)
	os.Remove(filepath.Join(dir, ckptName))
	s3 := openT(t, opts)
	checkParts(t, s3, "r", want)
	if len(s3.Damaged()) != 0 {
		t.Fatalf("damage after a full scan of the repaired log: %v", s3.Damaged())
	}

	// SkipTo: a replica follows its master past lost records.
	if err := s3.SkipTo(ctx, "r", 1, int64(len(want[1]))+100); err != nil {
		t.Fatal(err)
	}
	if err := s3.SkipTo(ctx, "r", 1, 5); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("skip backwards: %v", err)
	}
	a := mustAppend(t, s3, "r", 1, "after skip")
	if a[0].Offset != int64(len(want[1]))+100 {
		t.Fatalf("append after skip at %d", a[0].Offset)
	}
	s3.Close()
	os.Remove(filepath.Join(dir, ckptName))
	s4 := openT(t, opts)
	got := readRecords(t, s4, "r", 1)
	if r := got[a[0].Offset]; !bytes.Equal(r, AppendRecord(nil, a[0].ID, 0, []byte("after skip"))) {
		t.Fatal("record after the skipped range lost across a full scan")
	}
	if d := s4.Damaged(); len(d) != 1 || d[0].From != int64(len(want[1])) || d[0].To != a[0].Offset {
		t.Fatalf("skipped range reported as %v", d)
	}
}

// TestDamageOfLastChunk: damage to a partition's last chunk in the part of
// the log that recovery scans, with no later entry of that partition to say
// where it ended: its next offset still never goes below what was handed
// out. With the damaged entry's header intact the lost range is exact; with
// the header destroyed every partition that has no later entry moves up by
// the damaged range's payload size.
func TestDamageOfLastChunk(t *testing.T) {
	for _, where := range []string{"payload", "header"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir}
			s := openT(t, opts)
			ends := map[int]int64{}
			put := func(p int, body string) {
				a := mustAppend(t, s, "z", p, body)
				ends[p] = a[0].Offset + int64(RecordHeaderLen+len(body))
			}
			for i := 0; i < 10; i++ {
				for p := 0; p < 4; p++ {
					put(p, fmt.Sprintf("r%d-p%d-%s", i, p, strings.Repeat("y", 50)))
				}
			}
			put(1, strings.Repeat("L", 200)) // partition 1's last chunk: damaged below
			for i := 0; i < 5; i++ {
				put(0, "later-0")
				put(2, "later-2")
			}
			s.Close()
			os.Remove(filepath.Join(dir, ckptName))
			seg := logFiles(t, dir, segSuffix)[0]
			pos := entryPositions(t, seg, 1)
			last := pos[len(pos)-1]
			b, _ := os.ReadFile(seg)
			if where == "payload" {
				b[last+entryHeaderLen+100] ^= 0xFF
			} else {
				b[last+5] ^= 0x40 // the length: the entry's own header can no longer be trusted
			}
			os.WriteFile(seg, b, 0o644)

			s2 := openT(t, opts)
			for p := 0; p < 4; p++ {
				info, _ := s2.Partition("z", p)
				if info.Max < ends[p] {
					t.Fatalf("partition %d ends at %d after recovery, %d were handed out", p, info.Max, ends[p])
				}
				a := mustAppend(t, s2, "z", p, "next")
				if a[0].Offset < ends[p] {
					t.Fatalf("partition %d: append at %d reuses offsets below %d", p, a[0].Offset, ends[p])
				}
			}
			d := s2.Damaged()
			lost := Damage{Topic: "z", Partition: 1, From: ends[1] - RecordHeaderLen - 200, To: ends[1]}
			if where == "payload" {
				if len(d) != 1 || d[0] != lost {
					t.Fatalf("damage %v, want exactly %v", d, lost)
				}
				return
			}
			// partitions 0 and 2 have later chunks: untouched. 1 and 3 are
			// moved up by the damaged payload size.
			want := []Damage{lost, {Topic: "z", Partition: 3, From: ends[3], To: ends[3] + RecordHeaderLen + 200}}
			if fmt.Sprint(d) != fmt.Sprint(want) {
				t.Fatalf("damage %v, want %v", d, want)
			}
		})
	}
}

// TestRepairAdjacentDamage: two neighbouring damaged chunks make one
// reported range; it can be repaired at once or piece by piece.
func TestRepairAdjacentDamage(t *testing.T) {
	for _, whole := range []bool{true, false} {
		t.Run(fmt.Sprint("whole=", whole), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir}
			want := damagedLog(t, dir, "a", 5, 6)
			os.Remove(filepath.Join(dir, ckptName))
			s2 := openT(t, opts)
			d := s2.Damaged()
			if len(d) != 1 {
				t.Fatalf("damage %v, want one merged range", d)
			}
			recs := decodeAll(t, want[0][d[0].From:d[0].To])
			if len(recs) != 2 {
				t.Fatalf("%d records in the range", len(recs))
			}
			if whole {
				if err := s2.Repair(t.Context(), "a", 0, d[0].From, want[0][d[0].From:d[0].To]); err != nil {
					t.Fatal(err)
				}
			} else {
				mid := d[0].From + int64(RecordHeaderLen+len(recs[0].Body))
				if err := s2.Repair(t.Context(), "a", 0, d[0].From, want[0][d[0].From:mid]); err != nil {
					t.Fatal(err)
				}
				if got := s2.Damaged(); len(got) != 1 || got[0].From != mid || got[0].To != d[0].To {
					t.Fatalf("after the first half: %v", got)
				}
				if err := s2.Repair(t.Context(), "a", 0, mid, want[0][mid:d[0].To]); err != nil {
					t.Fatal(err)
				}
			}
			checkParts(t, s2, "a", want)
			s2.Close()
			os.Remove(filepath.Join(dir, ckptName))
			s3 := openT(t, opts)
			checkParts(t, s3, "a", want)
			if len(s3.Damaged()) != 0 {
				t.Fatalf("damage after a full scan: %v", s3.Damaged())
			}
			s3.Close()
			s4 := openT(t, opts) // from the checkpoint and .idx files
			checkParts(t, s4, "a", want)
		})
	}
}

// TestDamagedBatchKeepsIntactRecords: one log entry holds a whole batch of
// puts (up to 256 from one connection); 64 flipped bytes inside it lose
// only the records they hit, found by each record's own checksum, whether
// recovery or a read finds the damage.
func TestDamagedBatchKeepsIntactRecords(t *testing.T) {
	for _, mode := range []string{"full scan", "found by a read", "length of a record"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir}
			s := openT(t, opts)
			var acked []ackedRecord
			put := func(p int, bodies ...string) {
				msgs := make([]Message, len(bodies))
				for i, b := range bodies {
					msgs[i] = Message{Body: []byte(b)}
				}
				as, err := s.Append(t.Context(), "b", p, msgs)
				if err != nil {
					t.Fatal(err)
				}
				for i, a := range as {
					acked = append(acked, ackedRecord{p, a.Offset, AppendRecord(nil, a.ID, 0, []byte(bodies[i]))})
				}
			}
			put(1, "before")
			var batch []string
			for i := 0; i < 200; i++ {
				batch = append(batch, fmt.Sprintf("batch-%03d-%s", i, strings.Repeat("q", 100+i%50)))
			}
			put(0, batch...)
			put(1, "after")
			put(0, "after")
			s.Close()
			seg := logFiles(t, dir, segSuffix)[0]
			at := entryPositions(t, seg, 1)[0] + entryHeaderLen // b-1 is pid 0, b-0 pid 1
			b, _ := os.ReadFile(seg)
			// the 100th record of the batch starts here
			x := at
			for i := 0; i < 100; i++ {
				_, n, err := DecodeRecord(b[x:])
				if err != nil {
					t.Fatal(err)
				}
				x += int64(n)
			}
			switch mode {
			case "length of a record":
				b[x+1] ^= 0x7F // the record's length: framing lost from here
			default:
				for i := x + RecordHeaderLen + 10; i < x+RecordHeaderLen+74; i++ {
					b[i] ^= 0xFF
				}
			}
			os.WriteFile(seg, b, 0o644)
			if mode != "found by a read" {
				os.Remove(filepath.Join(dir, ckptName))
			}
			s2 := openT(t, opts)
			lost := countSurvivors(t, s2, "b", 2, acked)
			if lost != 1 {
				t.Fatalf("lost %d of %d records, want only the damaged one", lost, len(acked))
			}
			a := mustAppend(t, s2, "b", 0, "next")
			acked = append(acked, ackedRecord{0, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte("next"))})
			s2.Close()
			if n := countSurvivors(t, openT(t, opts), "b", 2, acked); n != 1 {
				t.Fatalf("after a restart %d lost", n)
			}
			os.Remove(filepath.Join(dir, ckptName))
			if n := countSurvivors(t, openT(t, opts), "b", 2, acked); n != 1 {
				t.Fatalf("after a full scan %d lost", n)
			}
		})
	}
}

func TestSalvage(t *testing.T) {
	var p []byte
	var starts []int
	for i := 0; i < 5; i++ {
		starts = append(starts, len(p))
		p = AppendRecord(p, int64(i+1), 0, []byte(strings.Repeat("s", 30+i)))
	}
	flip := func(at int) []byte { c := bytes.Clone(p); c[at] ^= 0x20; return c }
	for _, c := range []struct {
		name string
		b    []byte
		a, e int
	}{
		{"body of record 2", flip(starts[2] + RecordHeaderLen + 3), starts[2], starts[3]},
		{"length of record 2", flip(starts[2] + 2), starts[2], starts[3]},
		{"checksum of record 0", flip(4), 0, starts[1]},
		{"body of the last record", flip(len(p) - 1), starts[4], len(p)},
		{"id of record 1: not located", flip(starts[1] + 9), 0, len(p)},
	} {
		if a, e := salvage(c.b); a != c.a || e != c.e {
			t.Errorf("%s: damaged [%d, %d), want [%d, %d)", c.name, a, e, c.a, c.e)
		}
	}
}

// TestSalvageForgedEmptyRecord: zeroed bytes read as an empty record (a
// length and a checksum of 0 pass for an empty body), so an empty record
// next to the damage is never kept; one inside a checked run is.
func TestSalvageForgedEmptyRecord(t *testing.T) {
	bodies := []string{strings.Repeat("a", 40), "", strings.Repeat("b", 60), strings.Repeat("c", 60), strings.Repeat("d", 40)}
	var p []byte
	var starts []int
	for i, body := range bodies {
		starts = append(starts, len(p))
		p = AppendRecord(p, int64(i+1), 0, []byte(body))
	}
	zero := func(from, to int) []byte { c := bytes.Clone(p); clear(c[from:to]); return c }
	for _, c := range []struct {
		name string
		b    []byte
		a, e int
	}{
		// the real empty record 1 lies inside the kept prefix
		{"body of record 3", zero(starts[3]+RecordHeaderLen+5, starts[3]+RecordHeaderLen+9), starts[3], starts[4]},
		// record 2's length and checksum zeroed: a forged empty record,
		// then its body fails; the real empty record 1 before it, next
		// to the damage, goes too
		{"length and checksum of record 2", zero(starts[2]+3, starts[2]+8), starts[1], starts[3]},
		// the end of record 2's body and all of record 3 (80 bytes) zeroed:
		// record 2 fails (and record 1 before it goes), four forged empty
		// records tile up to record 4
		{"record 3 zeroed", zero(starts[3]-1, starts[4]), starts[1], starts[4]},
	} {
		a, e := salvage(c.b)
		if a != c.a || e != c.e {
			t.Errorf("%s: damaged [%d, %d), want [%d, %d)", c.name, a, e, c.a, c.e)
		}
		if !bytes.Equal(c.b[:a], p[:a]) || !bytes.Equal(c.b[e:], p[e:]) {
			t.Errorf("%s: kept bytes that differ from the records written there", c.name)
		}
	}
}

func FuzzSalvage(f *testing.F) {
	p := AppendRecord(AppendRecord(nil, 1, 0, []byte("first")), 2, 0, []byte("second"))
	f.Add(p, uint16(3))
	f.Add(p[:len(p)-2], uint16(30))
	f.Add([]byte{0, 0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		if len(b) > 0 {
			b[int(at)%len(b)] ^= 0x5A
		}
		a, e := salvage(b)
		if a < 0 || a > e || e > len(b) {
			t.Fatalf("damaged [%d, %d) of %d bytes", a, e, len(b))
		}
		if _, err := VerifyRecords(b[:a]); err != nil {
			t.Fatalf("kept prefix fails: %v", err)
		}
		if _, err := VerifyRecords(b[e:]); err != nil {
			t.Fatalf("kept suffix fails: %v", err)
		}
	})
}

// FuzzSalvageZeroed zeroes a run of bytes of a payload of records (some of
// them empty) and checks that salvage keeps only bytes that sit where they
// were written: zeroed bytes read as empty records, which must not be kept.
func FuzzSalvageZeroed(f *testing.F) {
	f.Add([]byte{40, 0, 60, 60, 40}, uint16(83), uint16(5))
	f.Add([]byte{10, 0, 0, 30}, uint16(100), uint16(41))
	f.Fuzz(func(t *testing.T, lens []byte, at, n uint16) {
		var p []byte
		for i, l := range lens {
			p = AppendRecord(p, int64(i+1), 0, bytes.Repeat([]byte{'a' + byte(i%26)}, int(l)))
		}
		if len(p) == 0 {
			return
		}
		from := int(at) % len(p)
		b := bytes.Clone(p)
		clear(b[from:min(len(b), from+int(n))])
		a, e := salvage(b)
		if a < 0 || a > e || e > len(b) {
			t.Fatalf("damaged [%d, %d) of %d bytes", a, e, len(b))
		}
		if !bytes.Equal(b[:a], p[:a]) || !bytes.Equal(b[e:], p[e:]) {
			t.Fatalf("zeroed [%d, %d): kept [0, %d) and [%d, %d), which differ from what was written", from, from+int(n), a, e, len(b))
		}
	})
}

// TestLostDefinition: damage to the entry that created a partition loses
// none of its records: the chunks met before any surviving definition are
// kept and placed once a later segment's definition names the partition.
func TestLostDefinition(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 16 << 10}
	s := openT(t, opts)
	var acked []ackedRecord
	put := func(p int, body string) {
		a := mustAppend(t, s, "d", p, body)
		acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte(body))})
	}
	for i := 0; i < 40; i++ {
		put(0, fmt.Sprintf("zero-%d-%s", i, strings.Repeat("z", 200)))
	}
	for i := 0; i < 200; i++ { // partition 1 is created mid-segment
		put(1, fmt.Sprintf("one-%d-%s", i, strings.Repeat("o", 100)))
		put(0, fmt.Sprintf("zero-more-%d", i))
	}
	s.Close()
	os.Remove(filepath.Join(dir, ckptName))
	segs := logFiles(t, dir, segSuffix)
	// the define that created d-1 (pid 1): the first define of pid 1
	var seg string
	var at int64 = -1
	for _, g := range segs {
		b, _ := os.ReadFile(g)
		for x := 0; x < len(b); {
			h, _, n, err := decodeEntry(b[x:])
			if err != nil {
				t.Fatal(err)
			}
			if h.typ == entryDefine && h.pid == 1 {
				seg, at = g, int64(x)
				break
			}
			x += n
		}
		if at >= 0 {
			break
		}
	}
	if seg == segs[len(segs)-1] {
		t.Fatal("want the creating define in a sealed segment")
	}
	b, _ := os.ReadFile(seg)
	b[at+entryHeaderLen+3] ^= 0xFF // in the topic name
	os.WriteFile(seg, b, 0o644)

	s2 := openT(t, opts)
	if n := countSurvivors(t, s2, "d", 2, acked); n != 0 {
		t.Fatalf("lost %d records to a damaged definition", n)
	}
	if d := s2.Damaged(); len(d) != 0 {
		t.Fatalf("damage reported: %v", d)
	}
	end := acked[len(acked)-2]
	a := mustAppend(t, s2, "d", 1, "next")
	if a[0].Offset != end.off+int64(len(end.rec)) {
		t.Fatalf("append at %d, want %d", a[0].Offset, end.off+int64(len(end.rec)))
	}
	acked = append(acked, ackedRecord{1, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte("next"))})
	s2.Close()
	if n := countSurvivors(t, openT(t, opts), "d", 2, acked); n != 0 {
		t.Fatalf("after a clean restart %d lost", n)
	}
	os.Remove(filepath.Join(dir, ckptName))
	if n := countSurvivors(t, openT(t, opts), "d", 2, acked); n != 0 {
		t.Fatalf("after a full scan %d lost", n)
	}
}

// TestLostDefinitionOfNewPartition: a partition created in the active
// segment writes its define again after its first records, so damage to
// the first one loses nothing there either.
func TestLostDefinitionOfNewPartition(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	s := openT(t, opts)
	var acked []ackedRecord
	for i := 0; i < 30; i++ {
		p := i % 2
		body := fmt.Sprintf("new-%d-%s", i, strings.Repeat("n", 80))
		a := mustAppend(t, s, "nd", p, body)
		acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, []byte(body))})
	}
	s.Close()
	os.Remove(filepath.Join(dir, ckptName))
	seg := logFiles(t, dir, segSuffix)[0]
	b, _ := os.ReadFile(seg)
	for x := 0; x < len(b); {
		h, _, n, err := decodeEntry(b[x:])
		if err != nil {
			t.Fatal(err)
		}
		if h.typ == entryDefine && h.pid == 1 {
			b[x+entryHeaderLen+3] ^= 0xFF // the define that created nd-1
			break
		}
		x += n
	}
	os.WriteFile(seg, b, 0o644)
	s2 := openT(t, opts)
	if n := countSurvivors(t, s2, "nd", 2, acked); n != 0 {
		t.Fatalf("lost %d records to a damaged definition", n)
	}
	last := acked[len(acked)-1]
	a := mustAppend(t, s2, "nd", 1, "next")
	if a[0].Offset != last.off+int64(len(last.rec)) {
		t.Fatalf("append at %d, want %d", a[0].Offset, last.off+int64(len(last.rec)))
	}
}
