package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// benchWidths are the partition counts the wide benchmarks run at: few,
// and as many as MetaQ's one-file-set-per-partition layout cannot serve.
var benchWidths = []int{16, 10000}

// forWidths runs bench as a sub-benchmark p<N> for each of benchWidths.
func forWidths(b *testing.B, bench func(b *testing.B, parts int)) {
	for _, parts := range benchWidths {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) { bench(b, parts) })
	}
}

// openBench opens a store with opts in a directory of its own (Dir is
// set). The caller closes it (in the timed region, as the benchmarks
// always did).
func openBench(b *testing.B, opts Options) *Store {
	b.Helper()
	opts.Dir = b.TempDir()
	s, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// createParts creates partitions 0 to parts-1 of topic.
func createParts(b *testing.B, s *Store, topic string, parts int) {
	b.Helper()
	for p := 0; p < parts; p++ {
		if err := s.CreatePartition(topic, p, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// appendRoundRobin makes b.N AppendManyAsync calls of 64 one-message parts
// of 1 KiB, round robin over partitions 0 to parts-1 of topic, 8 calls in
// flight (the broker's put route under a pipelined load), and reports the
// process's CPU time per message (cpu-ns/msg, user and system). The timer
// starts with the first call.
func appendRoundRobin(b *testing.B, s *Store, topic string, parts int) {
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
			apps[k] = PartitionAppend{Topic: topic, Partition: next, Msgs: []Message{{Body: body}}}
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
}

// BenchmarkAppendManyWide: AppendManyAsync calls of 64 one-message parts,
// round robin over a topic's partitions, 8 calls in flight (the broker's
// put route under a pipelined load): the store's cost per message at 16
// and at 10,000 partitions, where each part is a chunk of its own. It
// reports the process's CPU time per message (cpu-ns/msg, user and system:
// steadier than ns/op, which follows the disk's fsync latency).
func BenchmarkAppendManyWide(b *testing.B) {
	forWidths(b, func(b *testing.B, parts int) {
		s := openBench(b, Options{})
		defer s.Close()
		createParts(b, s, "wide", parts)
		b.ReportAllocs()
		appendRoundRobin(b, s, "wide", parts)
	})
}
