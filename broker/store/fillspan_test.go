package store

import (
	"bytes"
	"errors"
	"testing"
)

// TestRepairSpanningChunksFoundByReads: two neighbouring chunks found
// damaged while serving (each keeps its index entry, masked as lost) make
// one damaged range; a repair of the whole range in one piece (what a
// replica sends) is served at every offset in it, not only where a fill
// fits inside one chunk's entry.
func TestRepairSpanningChunksFoundByReads(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	want := damagedLog(t, dir, "a", 5, 6) // the checkpoint stays: no scan, reads find it

	s2 := openT(t, opts)
	defer s2.Close()
	// Read the partition through, record by record, so each damaged chunk
	// is found by a read of its own offset.
	for off := int64(0); off < int64(len(want[0])); {
		got, err := s2.Read("a", 0, off, 1<<20)
		var de *DamagedError
		switch {
		case errors.As(err, &de):
			off = de.Next
		case err != nil:
			t.Fatalf("read at %d: %v", off, err)
		default:
			off += int64(len(got))
		}
	}
	d := s2.Damaged()
	if len(d) != 1 {
		t.Fatalf("damage %v, want one merged range", d)
	}
	if n := len(decodeAll(t, want[0][d[0].From:d[0].To])); n != 2 {
		t.Fatalf("%d records in the range, want 2", n)
	}
	if err := s2.Repair(t.Context(), "a", 0, d[0].From, want[0][d[0].From:d[0].To]); err != nil {
		t.Fatal(err)
	}
	if got := s2.Damaged(); len(got) != 0 {
		t.Fatalf("damage after the repair: %v", got)
	}
	// Every record in the repaired range is served from its own offset.
	for off := d[0].From; off < d[0].To; {
		got, err := s2.Read("a", 0, off, 1<<20)
		if err != nil {
			t.Fatalf("read at %d in the repaired range [%d, %d): %v", off, d[0].From, d[0].To, err)
		}
		if !bytes.HasPrefix(want[0][off:], got) || len(got) == 0 {
			t.Fatalf("read at %d: %d bytes, not the partition's", off, len(got))
		}
		r := decodeAll(t, want[0][off:d[0].To])
		off += int64(RecordHeaderLen + len(r[0].Body))
	}
	checkParts(t, s2, "a", want)
}
