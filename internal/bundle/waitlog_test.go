package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"metaq/internal/siterole"
)

// recordLog is a slog.Handler that keeps every record.
type recordLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// messages returns the message and "why" of every record kept.
func (h *recordLog) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		why := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "why" {
				why = a.Value.String()
			}
			return true
		})
		out = append(out, r.Message+": "+why)
	}
	return out
}

// TestAutoFailoverWaitLoggedOncePerReason: while a sibling gossip declared
// down keeps this site from promoting itself, automatic failover ticks
// every quarter second with a reason that holds how long ago the sibling
// was declared down. It is logged when the reason changes and once a
// minute while it lasts, not at every tick (before, every tick logged
// "not promoting automatically yet").
func TestAutoFailoverWaitLoggedOncePerReason(t *testing.T) {
	t.Parallel()
	h := &recordLog{}
	w := waitLog{log: slog.New(h), every: time.Minute}
	const msg = "FAILOVER: not promoting automatically yet"
	start := time.Now()
	tick := func(at time.Duration, down bool) {
		p := siterole.Peer{Site: "gz", Role: siterole.Slave, Follows: true, LogPos: 4096, Alive: !down, DownFor: at}
		_, why := siterole.PositionFinal(p)
		w.note(start.Add(at), slog.LevelInfo, msg, why)
	}
	for at := time.Duration(0); at < 10*time.Second; at += 250 * time.Millisecond {
		tick(at, true)
	}
	if got := h.messages(); len(got) != 1 {
		t.Fatalf("40 ticks with the same sibling declared down logged %d records, want 1: %q", len(got), got)
	}
	// Another reason: logged at once.
	tick(10*time.Second, false)
	// The first one again, then for a minute and a bit: logged when it
	// came back and once the minute is up.
	for at := 10250 * time.Millisecond; at < 72*time.Second; at += 250 * time.Millisecond {
		tick(at, true)
	}
	if got := h.messages(); len(got) != 4 {
		t.Fatalf("logged %d records, want 4 (down, follows, down again, down a minute later): %q", len(got), got)
	}
	// After a reset (the master is back) the same reason is logged again.
	w.reset()
	tick(72*time.Second, true)
	if got := h.messages(); len(got) != 5 {
		t.Fatalf("logged %d records after a reset, want 5: %s", len(got), fmt.Sprint(got))
	}
}
