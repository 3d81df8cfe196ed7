package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAppendManyWide: AppendManyAsync calls of 64 one-message parts,
// round robin over a topic's partitions, 8 calls in flight (the broker's
// put route under a pipelined load): the store's cost per message at 16
// and at 10,000 partitions, where each part is a chunk of its own. It
// reports the process's CPU time per message (cpu-ns/msg, user and system:
// steadier than ns/op, which follows the disk's fsync latency).
func BenchmarkAppendManyWide(b *testing.B) {
	for _, parts := range []int{16, 10000} {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for p := 0; p < parts; p++ {
				if err := s.CreatePartition("wide", p, 0); err != nil {
					b.Fatal(err)
				}
			}
			body := make([]byte, 1024)
			ctx := context.Background()
			sem := make(chan struct{}, 8)
			var wg sync.WaitGroup
			next := 0
			b.ReportAllocs()
			b.SetBytes(64 * int64(len(body)))
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				apps := make([]PartitionAppend, 64)
				for k := range apps {
					apps[k] = PartitionAppend{Topic: "wide", Partition: next, Msgs: []Message{{Body: body}}}
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
		})
	}
}
