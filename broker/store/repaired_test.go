package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestRepairedRangeStaysServed: a range found damaged while serving and
// repaired is served from its repair from then on: reading it again does
// not find the damaged bytes again (no new "not served", no new damage),
// and a restart, whose replay meets the damage before the repair, reports
// the range repaired, not lost.
func TestRepairedRangeStaysServed(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentBytes: 64 << 10, ScrubRate: 1 << 30, ScrubDelay: time.Hour}
	p := writeFlippedPartition(t, opts)
	all, off := p.all, p.off
	// the scrub starts (a fresh store with a short delay)
	opts.ScrubDelay = time.Millisecond
	var logb testutil.SyncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logb, nil))
	s := openT(t, opts)
	p.scrubFindsAndRepairs(t, s)
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
