package store

import (
	"context"
	"fmt"
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
	for _, parts := range []int{16, 10000} {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			h := &rollTimes{}
			s, err := Open(Options{Dir: b.TempDir(), SegmentBytes: 64 << 20, Logger: slog.New(h)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for p := 0; p < parts; p++ {
				if err := s.CreatePartition("roll", p, 0); err != nil {
					b.Fatal(err)
				}
			}
			body := make([]byte, 1024)
			ctx := context.Background()
			sem := make(chan struct{}, 8)
			var wg sync.WaitGroup
			next := 0
			b.SetBytes(64 * int64(len(body)))
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				apps := make([]PartitionAppend, 64)
				for k := range apps {
					apps[k] = PartitionAppend{Topic: "roll", Partition: next, Msgs: []Message{{Body: body}}}
					next = (next + 1) % parts
				}
				sem <- struct{}{}
				wg.Add(1)
				s.AppendManyAsync(ctx, apps, func(outs []AppendOutcome) {
					for _, o := range outs {
						if o.Err != nil {
							b.Error(o.Err)
						}
					}
					<-sem
					wg.Done()
				})
			}
			wg.Wait()
			b.ReportMetric(float64(cpuTime()-c0)/float64(64*b.N), "cpu-ns/msg")
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
}
