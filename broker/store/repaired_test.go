package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRepairedRangeStaysServed: a range found damaged while serving and
// repaired is served from its repair from then on: reading it again does
// not find the damaged bytes again (no new "not served", no new damage),
// and a restart, whose replay meets the damage before the repair, reports
// the range repaired, not lost.
func TestRepairedRangeStaysServed(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 64 << 10, ScrubRate: 1 << 30, ScrubDelay: time.Hour}
	s := openT(t, opts)
	want := map[int64][]byte{}
	var all []byte
	for i := 0; i < 60; i++ {
		bodies := []string{fmt.Sprintf("%04d-%s", i, strings.Repeat("a", 1500)), fmt.Sprintf("%04d-%s", i, strings.Repeat("b", 1500))}
		for j, a := range mustAppend(t, s, "z", 0, bodies...) {
			want[a.Offset] = AppendRecord(nil, a.ID, 0, []byte(bodies[j]))
			all = append(all, want[a.Offset]...)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// flip a byte of the second record of the first entry in the first
	// (sealed) segment's middle
	seg := logFiles(t, dir, segSuffix)[0]
	poss := entryPositions(t, seg, 0)
	pos := poss[len(poss)/2]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, entryHeaderLen)
	f.ReadAt(hdr, pos)
	off := int64(binary.BigEndian.Uint64(hdr[20:]))
	first := want[off]
	at := pos + entryHeaderLen + int64(len(first)) + 30 // in the second record's body
	b := []byte{0}
	f.ReadAt(b, at)
	b[0] ^= 0x40
	f.WriteAt(b, at)
	f.Close()

	// the scrub starts (a fresh store with a short delay)
	s.Close()
	opts.ScrubDelay = time.Millisecond
	var logb syncBuf
	opts.Logger = slog.New(slog.NewTextHandler(&logb, nil))
	s = openT(t, opts)
	waitFor(t, func() bool { return s.Scrub().Passes > 0 })
	if st := s.Scrub(); st.Damaged != 1 {
		t.Fatalf("scrub status %+v: want one damaged range", st)
	}
	d := s.Damaged()
	lostOff := off + int64(len(first))
	if len(d) != 1 || d[0].From != lostOff || d[0].To != lostOff+int64(len(want[lostOff])) {
		t.Fatalf("damage %v, want the second record [%d, %d)", d, lostOff, lostOff+int64(len(want[lostOff])))
	}
	for _, read := range []func() error{
		func() error { _, err := s.Read("z", 0, lostOff, 1<<20); return err },
		func() error { _, err := s.ReadRun("z", 0, lostOff, 1<<20); return err },
	} {
		var de *DamagedError
		if err := read(); !errors.As(err, &de) {
			t.Fatalf("read of the damaged record: %v, want a DamagedError", err)
		}
	}
	if got, err := s.Read("z", 0, off, len(first)); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the intact first record of the entry: %v", err)
	}
	if err := s.Repair(t.Context(), "z", 0, lostOff, want[lostOff]); err != nil {
		t.Fatal(err)
	}
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damage after repair: %v", d)
	}
	repairedAt := len(logb.String())
	for range 2 {
		if got := readAll(t, s, "z", 0); !bytes.Equal(got, all) {
			t.Fatal("partition differs from what was written after the repair")
		}
		if _, err := s.ReadRun("z", 0, off, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if after := logb.String()[repairedAt:]; strings.Contains(after, "not served") {
		t.Fatalf("the repaired range is reported damaged again:\n%s", after)
	}
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damage after reading the repaired range: %v", d)
	}
	s.Close()
	restartAt := len(logb.String())
	s = openT(t, opts)
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damage after a restart: %v", d)
	}
	if got := readAll(t, s, "z", 0); !bytes.Equal(got, all) {
		t.Fatal("partition differs after a restart")
	}
	after := logb.String()[restartAt:]
	if strings.Contains(after, "not served") || !strings.Contains(after, "repaired earlier are served from their repairs") {
		t.Fatalf("restart log does not say the range is repaired:\n%s", after)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }
