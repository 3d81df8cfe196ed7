package broker

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"metaq/broker/wire"
)

// BenchmarkPutPartitions: 1 KiB puts round robin over a topic of 16 and
// of 10,000 partitions, 4 connections each with up to 256 puts in flight,
// written 64 to a write (as metaq-bench's producers do), to an in-process
// broker with group commit. At 16 partitions a read's puts make a few
// batches of several puts each; at 10,000 every put is a batch (and a
// store chunk) of its own. It reports the process's CPU time per message
// (cpu-ns/msg: the broker and this load generator, user and system), which
// is what the comparison of the two is about: steadier than ns/op, which
// follows the disk's fsync latency and the machine's load.
// first-cpu-ns/msg is the same for the pass before the timer, which
// creates the partitions (two puts each at 10,000).
// METAQ_BENCH_DIR puts the store's folder under that directory (a tmpfs
// takes the disk out of the comparison).
func BenchmarkPutPartitions(b *testing.B) {
	for _, parts := range []int{16, 10000} {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) { benchPutPartitions(b, parts) })
	}
}

func benchPutPartitions(b *testing.B, parts int) {
	ini, err := os.ReadFile(filepath.Join(vectorDir, "server.ini"))
	if err != nil {
		b.Fatal(err)
	}
	cfg := parseConfig(b, fmt.Appendf(ini, "\n[topic=wide]\nnumPartitions=%d\n", parts))
	dir := b.TempDir()
	if d := os.Getenv("METAQ_BENCH_DIR"); d != "" {
		if dir, err = os.MkdirTemp(d, "put-partitions-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	brk := startBrokerDir(b, cfg, dir, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	const conns, window, perWrite = 4, 256, 64
	body := make([]byte, 1024)
	cls := make([]*client, conns)
	for i := range cls {
		cls[i] = dial(b, brk.Addr())
	}
	// put sends n puts over the connections (n/conns each) and waits for
	// every answer.
	next := make([]int32, conns)
	for i := range next {
		next[i] = int32(i * parts / conns)
	}
	put := func(n int) {
		var wg sync.WaitGroup
		errs := make(chan error, 2*conns)
		for i, cl := range cls {
			each := n / conns
			slots := make(chan struct{}, window)
			wg.Add(2)
			go func() {
				defer wg.Done()
				d := wire.NewDecoder(bufio.NewReaderSize(cl.nc, 256<<10))
				for k := 0; k < each; k++ {
					c, err := d.Decode()
					if err != nil {
						errs <- err
						return
					}
					if r, ok := c.(*wire.Result); !ok || !r.OK() {
						errs <- fmt.Errorf("put answered %v", c)
						return
					}
					<-slots
				}
			}()
			go func() {
				defer wg.Done()
				w := bufio.NewWriterSize(cl.nc, 256<<10)
				buf := make([]byte, 0, len(body)+128)
				for k := 0; k < each; k++ {
					slots <- struct{}{}
					next[i] = (next[i] + 1) % int32(parts)
					buf = (&wire.Put{Topic: "wide", Partition: next[i], Checksum: wire.Checksum(body), Body: body, Opaque: int32(k)}).AppendTo(buf[:0])
					w.Write(buf)
					if k%perWrite == perWrite-1 || len(slots) == window {
						if err := w.Flush(); err != nil {
							errs <- err
							return
						}
					}
				}
				if err := w.Flush(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	// Every partition created and written before the measured part. Its
	// CPU per message (first-cpu-ns/msg) is the first touch's: what a fresh
	// broker pays for the partitions' creation, two puts each at 10,000.
	first := 2 * max(parts, 1024)
	c0 := processCPU()
	put(first)
	firstCPU := float64(processCPU()-c0) / float64(first)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	c0 = processCPU()
	put(b.N - b.N%conns)
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N-b.N%conns), "cpu-ns/msg")
	b.ReportMetric(firstCPU, "first-cpu-ns/msg")
}
