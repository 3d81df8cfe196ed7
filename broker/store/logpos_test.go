package store

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestTruncatePartitionSurvivesRecovery: records cut by TruncatePartition
// are not served, later appends reuse their offsets, and neither a clean
// reopen nor a full scan without the checkpoint brings them back.
func TestTruncatePartitionSurvivesRecovery(t *testing.T) {
	for _, name := range []string{"checkpoint", "full scan"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 32 << 10}
			s := openT(t, opts)
			mustAppend(t, s, "t", 0, "a1", "a2")
			mustAppend(t, s, "u", 0, "other")
			keep := readAll(t, s, "t", 0)
			cut := mustAppend(t, s, "t", 0, "tail1", "tail2")[0].Offset
			mustAppend(t, s, "t", 0, "tail3")
			if err := s.TruncatePartition("t", 0, cut+1); !errors.Is(err, ErrBadArgument) {
				t.Fatalf("cut inside an entry: %v, want ErrBadArgument", err)
			}
			if err := s.TruncatePartition("t", 0, cut); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, s, "t", 0); !bytes.Equal(got, keep) {
				t.Fatalf("after the cut %d bytes are served, want %d", len(got), len(keep))
			}
			if a := mustAppend(t, s, "t", 0, "new"); a[0].Offset != cut {
				t.Fatalf("append after the cut at %d, want %d", a[0].Offset, cut)
			}
			want := readAll(t, s, "t", 0)
			other := readAll(t, s, "u", 0)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if name == "full scan" {
				os.Remove(filepath.Join(dir, ckptName))
			}
			s2 := openT(t, opts)
			if got := readAll(t, s2, "t", 0); !bytes.Equal(got, want) {
				t.Fatalf("after reopening: %d bytes, want %d (cut records back?)", len(got), len(want))
			}
			if got := readAll(t, s2, "u", 0); !bytes.Equal(got, other) {
				t.Fatal("another partition changed")
			}
			if pos, err := s2.LogPosition("t", 0, cut); err != nil || pos <= 0 {
				t.Fatalf("LogPosition at the cut: %d %v", pos, err)
			}
		})
	}
}

// levelCounter counts log records at or above ERROR.
type levelCounter struct{ errors *atomic.Int32 }

func (h levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h levelCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	return nil
}
func (h levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelCounter) WithGroup(string) slog.Handler      { return h }

// TestTruncatePartitionIsNotDamage: cutting a former master's tail is an
// ordinary step of a failover, not damage: it logs no error.
func TestTruncatePartitionIsNotDamage(t *testing.T) {
	var n atomic.Int32
	s := openT(t, Options{Dir: t.TempDir(), Logger: slog.New(levelCounter{&n})})
	mustAppend(t, s, "t", 0, "a1")
	cut := mustAppend(t, s, "t", 0, "tail")[0].Offset
	if err := s.TruncatePartition("t", 0, cut); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 0 {
		t.Fatalf("TruncatePartition logged %d errors", n.Load())
	}
}
