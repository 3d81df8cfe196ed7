package store

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// rollTimes is a slog handler that keeps the took and seal attributes of
// every roll the store logs (STORE: rolled log segment): how long the
// writer stopped, and how much of it went to sealing the segment left.
type rollTimes struct {
	mu   sync.Mutex
	took []time.Duration
	seal time.Duration
}

func (h *rollTimes) Enabled(context.Context, slog.Level) bool { return true }
func (h *rollTimes) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *rollTimes) WithGroup(string) slog.Handler            { return h }
func (h *rollTimes) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "STORE: rolled log segment" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "took":
			h.mu.Lock()
			h.took = append(h.took, a.Value.Duration())
			h.mu.Unlock()
		case "seal":
			h.mu.Lock()
			h.seal += a.Value.Duration()
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// BenchmarkRoll: 1 KiB messages round robin over 16 or 10,000 partitions
// (AppendManyAsync calls of 64 parts, 8 in flight) into 64 MiB segments,
// so that the run rolls every 60,000 or so messages; it reports how long
// each roll stopped the writer (roll-ms, the mean; roll-max-ms), the part
// of it spent sealing the segment left (seal-ms, the mean) and the CPU
// time per message.
func BenchmarkRoll(b *testing.B) {
	forWidths(b, func(b *testing.B, parts int) {
		h := &rollTimes{}
		s := openBench(b, Options{SegmentBytes: 64 << 20, Logger: slog.New(h)})
		defer s.Close()
		createParts(b, s, "roll", parts)
		appendRoundRobin(b, s, "roll", parts)
		h.mu.Lock()
		defer h.mu.Unlock()
		var sum, most time.Duration
		for _, d := range h.took {
			sum += d
			most = max(most, d)
		}
		if n := len(h.took); n > 0 {
			b.ReportMetric(float64(sum.Microseconds())/1e3/float64(n), "roll-ms")
			b.ReportMetric(float64(h.seal.Microseconds())/1e3/float64(n), "seal-ms")
			b.ReportMetric(float64(most.Microseconds())/1e3, "roll-max-ms")
			b.ReportMetric(float64(n), "rolls")
		}
	})
}
