package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkCheckpointStall: how long a checkpoint request (retention asks
// for one before it removes files) stops the writer, at 16 and at 10,000
// partitions. Each iteration appends a round of one-message chunks to
// every partition (about 20,000 chunks, so every tail holds entries, as
// under a load spread over the partitions), then queues a checkpoint
// request and right behind it an append: stall-ms is the mean time from
// the request to that append's answer (the writer's stop), ckpt-ms to the
// checkpoint's (on disk).
func BenchmarkCheckpointStall(b *testing.B) {
	forWidths(b, func(b *testing.B, parts int) {
		s := openBench(b, Options{})
		defer s.Close()
		body := make([]byte, 1024)
		ctx := context.Background()
		apps := make([]PartitionAppend, 0, 20000+parts)
		for p := 0; p < parts; p++ {
			for k := 0; k < 20000/parts+1; k++ {
				apps = append(apps, PartitionAppend{Topic: "wide", Partition: p, Msgs: []Message{{Body: body}}})
			}
		}
		var stall, took time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			done := make(chan struct{})
			s.AppendManyAsync(ctx, apps, func(outs []AppendOutcome) {
				for _, o := range outs {
					if o.Err != nil {
						b.Error(o.Err)
					}
				}
				close(done)
			})
			<-done
			ck := &request{kind: reqCheckpoint}
			t0 := time.Now()
			if err := s.enqueue(ctx, ck); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Append(ctx, "wide", 0, []Message{{Body: body}}); err != nil {
				b.Fatal(err)
			}
			stall += time.Since(t0)
			<-ck.done
			if ck.err != nil {
				b.Fatal(ck.err)
			}
			took += time.Since(t0)
		}
		b.ReportMetric(float64(stall.Microseconds())/float64(b.N)/1000, "stall-ms")
		b.ReportMetric(float64(took.Microseconds())/float64(b.N)/1000, "ckpt-ms")
	})
}
