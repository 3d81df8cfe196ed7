package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadLogKeepsUnitsWhole: ReadLog with a maxBytes that one partition's
// entry fills never ends between the entries of an AppendUnitAsync (a
// transaction's partitions at its commit), of three partitions here, read
// from the unit's start and from before it; the same appends through
// AppendManyAsync are read in maxBytes pieces as before. A replica that
// ships the log in ReadLog's pieces then holds all of a commit or none.
func TestReadLogKeepsUnitsWhole(t *testing.T) {
	s := openT(t, Options{})
	ctx := context.Background()
	body := strings.Repeat("u", 20<<10)
	group := func(topic string) []PartitionAppend {
		var apps []PartitionAppend
		for p := range 3 {
			apps = append(apps, PartitionAppend{Topic: topic, Partition: p, Msgs: []Message{{Body: []byte(body)}}})
		}
		return apps
	}
	write := func(unit bool, apps []PartitionAppend) {
		t.Helper()
		got := make(chan []AppendOutcome, 1)
		if unit {
			s.AppendUnitAsync(ctx, apps, func(o []AppendOutcome) { got <- o })
		} else {
			s.AppendManyAsync(ctx, apps, func(o []AppendOutcome) { got <- o })
		}
		for i, o := range <-got {
			if o.Err != nil {
				t.Fatalf("append %d: %v", i, o.Err)
			}
		}
	}
	start, _ := s.LogBounds()
	mustAppend(t, s, "before", 0, body)
	_, unitStart := s.LogBounds()
	write(true, group("commit"))
	_, plainStart := s.LogBounds()
	write(false, group("plain"))

	topics := func(ents []LogEntry) string {
		var names []string
		for _, e := range ents {
			names = append(names, e.Topic)
		}
		return strings.Join(names, ",")
	}
	for _, from := range []int64{start, unitStart} {
		ents, next, err := s.ReadLog(from, 8<<10)
		if err != nil {
			t.Fatal(err)
		}
		if from == start {
			if got := topics(ents); got != "before" {
				t.Fatalf("first read from %d: %s", from, got)
			}
			ents, next, err = s.ReadLog(next, 8<<10)
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := topics(ents); got != "commit,commit,commit" {
			t.Fatalf("read of the unit (from %d): entries of %s; the unit was cut", from, got)
		}
		if rest, _, err := s.ReadLog(next, 8<<10); err != nil || topics(rest) != "plain" {
			t.Fatalf("read after the unit (from %d): %s %v", next, topics(rest), err)
		}
	}
	ents, _, err := s.ReadLog(plainStart, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if got := topics(ents); got != "plain" {
		t.Fatalf("read of a group that is not a unit: %s", got)
	}
}

// writeUnit appends one message of body to partitions 0..n-1 of topic as
// one unit (AppendUnitAsync).
func writeUnit(t *testing.T, s *Store, topic string, n int, body string) {
	t.Helper()
	var apps []PartitionAppend
	for p := range n {
		apps = append(apps, PartitionAppend{Topic: topic, Partition: p, Msgs: []Message{{Body: []byte(body)}}})
	}
	got := make(chan []AppendOutcome, 1)
	s.AppendUnitAsync(context.Background(), apps, func(o []AppendOutcome) { got <- o })
	for i, o := range <-got {
		if o.Err != nil {
			t.Fatalf("unit append %d: %v", i, o.Err)
		}
	}
}

// readPieces reads the whole durable log from pos in ReadLog pieces of
// maxBytes and returns each piece's topics, and the entries.
func readPieces(t *testing.T, s *Store, pos int64, maxBytes int) ([]string, []LogEntry) {
	t.Helper()
	var pieces []string
	var all []LogEntry
	_, durable := s.LogBounds()
	for pos < durable {
		ents, next, err := s.ReadLog(pos, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Topic)
		}
		if len(names) > 0 {
			pieces = append(pieces, strings.Join(names, ","))
		}
		all = append(all, ents...)
		pos = next
	}
	return pieces, all
}

// TestUnitsWholeAfterRestart: a unit is still read whole after the store
// is closed and opened again, and after a start that scans the whole log
// (no checkpoint, as after kill -9 before any roll): the unit's bounds are
// in the log, not only in the memory of the process that wrote it.
func TestUnitsWholeAfterRestart(t *testing.T) {
	for _, scan := range []bool{false, true} {
		t.Run(map[bool]string{false: "reopen", true: "full scan"}[scan], func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, Options{Dir: dir})
			body := strings.Repeat("u", 20<<10)
			mustAppend(t, s, "before", 0, body)
			writeUnit(t, s, "commit", 3, body)
			var apps []PartitionAppend
			for p := range 3 {
				apps = append(apps, PartitionAppend{Topic: "plain", Partition: p, Msgs: []Message{{Body: []byte(body)}}})
			}
			got := make(chan []AppendOutcome, 1)
			s.AppendManyAsync(context.Background(), apps, func(o []AppendOutcome) { got <- o })
			<-got
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if scan {
				if err := os.Remove(filepath.Join(dir, ckptName)); err != nil {
					t.Fatal(err)
				}
			}
			s2 := openT(t, Options{Dir: dir})
			first, _ := s2.LogBounds()
			pieces, ents := readPieces(t, s2, first, 8<<10)
			want := []string{"before", "commit,commit,commit", "plain", "plain", "plain"}
			if !slices.Equal(pieces, want) {
				t.Fatalf("pieces read after the restart: %q, want %q (the unit was cut)", pieces, want)
			}
			if ents[1].Unit != 3 || ents[2].Unit != 0 || ents[0].Unit != 0 || ents[4].Unit != 0 {
				t.Fatalf("Unit of the entries: %d %d %d %d", ents[0].Unit, ents[1].Unit, ents[2].Unit, ents[4].Unit)
			}
		})
	}
}

// TestTornUnitCutWhole: a crash that tore a unit's write (its last entry
// cut short, the rest on disk) leaves none of the unit after the restart,
// so the log never holds part of a commit; what came before stays.
func TestTornUnitCutWhole(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	mustAppend(t, s, "before", 0, "b")
	_, unitStart := s.LogBounds()
	writeUnit(t, s, "commit", 3, strings.Repeat("u", 4<<10))
	_, unitEnd := s.LogBounds()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, ckptName))
	seg := logFiles(t, dir, segSuffix)[0]
	// The unit ends with partition 2's data entry and its define (a new
	// partition's define again after its first records): cut into the
	// data entry.
	if err := os.Truncate(seg, unitEnd-60-4<<10); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, Options{Dir: dir})
	for p := range 3 {
		if info, err := s2.Partition("commit", p); err == nil && info.Written > info.Min {
			t.Fatalf("after the torn unit, partition commit-%d holds %d bytes of it", p, info.Written-info.Min)
		}
	}
	if got := readAll(t, s2, "before", 0); len(got) == 0 {
		t.Fatal("the entry before the unit was lost")
	}
	if st, _ := os.Stat(seg); st.Size() < unitStart {
		t.Fatalf("segment cut to %d, below the unit's start %d", st.Size(), unitStart)
	}
	if len(logFiles(t, dir, ".bad")) != 0 {
		t.Fatal("a torn unit was quarantined as corruption")
	}
}

// TestAppendRawUnit: a replica's unit (AppendRawUnit) is written as one
// unit, which its own ReadLog keeps whole; one part not at its
// partition's end writes none of it.
func TestAppendRawUnit(t *testing.T) {
	src := openT(t, Options{})
	body := strings.Repeat("r", 20<<10)
	writeUnit(t, src, "commit", 3, body)
	first, _ := src.LogBounds()
	_, ents := readPieces(t, src, first, 1<<20)
	if len(ents) != 3 || ents[0].Unit != 3 {
		t.Fatalf("source entries: %d, unit %d", len(ents), ents[0].Unit)
	}
	dst := openT(t, Options{})
	mustAppend(t, dst, "commit", 1, "x") // partition 1 is ahead here
	var raws []RawAppend
	for _, e := range ents {
		raws = append(raws, RawAppend{Topic: e.Topic, Partition: e.Partition, At: e.Offset, Records: e.Records})
	}
	if _, err := dst.AppendRawUnit(context.Background(), raws); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("unit with a part not at its end: %v", err)
	}
	for _, p := range []int{0, 2} {
		if info, err := dst.Partition("commit", p); err == nil && info.Written > info.Min {
			t.Fatalf("a refused unit wrote %d bytes to commit-%d", info.Written-info.Min, p)
		}
	}
	dst2 := openT(t, Options{})
	ends, err := dst2.AppendRawUnit(context.Background(), raws)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if want := e.Offset + int64(len(e.Records)); ends[i] != want {
			t.Fatalf("end of part %d: %d, want %d", i, ends[i], want)
		}
	}
	from, _ := dst2.LogBounds()
	pieces, got := readPieces(t, dst2, from, 8<<10)
	if !slices.Equal(pieces, []string{"commit,commit,commit"}) || got[0].Unit != 3 {
		t.Fatalf("the replica's unit read as %q (unit %d)", pieces, got[0].Unit)
	}
	for i := range got {
		if !bytes.Equal(got[i].Records, ents[i].Records) {
			t.Fatalf("part %d differs from the source's", i)
		}
	}
}

// TestUnitStart: the log position of a commit's second partition
// (LogPosition, as a slave resumed by partition ends gets it) lies inside
// the unit, and a read from there cuts it; UnitStart moves it, and the
// first partition's position, back to the unit entry, from where the read
// keeps the unit whole. Positions outside a unit stay as they are.
func TestUnitStart(t *testing.T) {
	s := openT(t, Options{})
	body := strings.Repeat("u", 20<<10)
	mustAppend(t, s, "commit", 0, "before")
	mustAppend(t, s, "commit", 1, "before")
	_, unitAt := s.LogBounds()
	var ends [3]int64 // where the unit's records start
	for p := range ends {
		if info, err := s.Partition("commit", p); err == nil {
			ends[p] = info.Written
		}
	}
	writeUnit(t, s, "commit", 3, body)
	_, after := s.LogBounds()
	mustAppend(t, s, "after", 0, body)

	pos := func(p int) int64 {
		t.Helper()
		x, err := s.LogPosition("commit", p, ends[p])
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	second := pos(1)
	before, err := s.LogPosition("commit", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _, err := s.ReadLog(second, 8<<10); err != nil || len(ents) != 1 {
		t.Fatalf("read from inside the unit: %d entries, %v; want 1 (the unit cut), else this test shows nothing", len(ents), err)
	}
	for _, c := range []struct {
		name string
		pos  int64
		want int64
	}{
		{"unit entry", unitAt, unitAt},
		{"first partition", pos(0), unitAt},
		{"second partition", second, unitAt},
		{"third partition", pos(2), unitAt},
		{"after the unit", after, after},
		{"before the unit", before, before},
	} {
		if got := s.UnitStart(c.pos); got != c.want {
			t.Errorf("UnitStart(%s at %d) = %d, want %d", c.name, c.pos, got, c.want)
		}
	}
	ents, _, err := s.ReadLog(s.UnitStart(second), 8<<10)
	if err != nil || len(ents) != 3 || ents[0].Unit != 3 {
		t.Fatalf("read from UnitStart: %d entries (unit %v), %v; want the unit's 3", len(ents), ents, err)
	}
}
