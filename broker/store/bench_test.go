package store

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"
)

// Benchmarks (never pass/fail). The exact command and figures are in BENCH.md.

const benchRecord = 1024 // bytes of a record on disk: 20 header + 1004 body

var benchBody = func() []byte {
	b := make([]byte, benchRecord-RecordHeaderLen)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

// result of the last run of a sub-benchmark, for the ratios.
type benchResult struct {
	mbps float64
	rps  float64
}

func report(b *testing.B, start time.Time, res *benchResult) {
	el := time.Since(start).Seconds()
	res.rps = float64(b.N) / el
	res.mbps = float64(b.N) * benchRecord / el / 1e6
	b.ReportMetric(res.rps, "records/s")
}

// diskBaseline: 1 KiB sequential writes to one file, fdatasync every
// syncEvery bytes.
func diskBaseline(b *testing.B, syncEvery int64, res *benchResult) {
	dir := b.TempDir()
	f, err := OSFS{}.OpenFile(filepath.Join(dir, "baseline"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, benchRecord)
	write := func(n int, pos *int64) {
		for i := 0; i < n; i++ {
			if _, err := f.WriteAt(buf, *pos); err != nil {
				b.Fatal(err)
			}
			*pos += benchRecord
			if *pos%syncEvery == 0 {
				if err := f.Datasync(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	var pos int64
	write(4096, &pos) // warm-up: touch memory and the file
	b.SetBytes(benchRecord)
	b.ResetTimer()
	start := time.Now()
	write(b.N, &pos)
	f.Datasync()
	report(b, start, res)
}

// appendLoad: writers goroutines each append batch records per call to
// random partitions of one topic under group commit.
func appendLoad(b *testing.B, parts, writers, batch, window int, res, base16, disk64, disk8 *benchResult) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// create the partitions (concurrently, so creation shares fsyncs)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for p := w; p < parts; p += 16 {
				if err := s.CreatePartition("bench", p, 0); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i] = Message{Body: benchBody}
	}
	run := func(total int) {
		var wg sync.WaitGroup
		per := (total + writers*batch - 1) / (writers * batch)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				rnd := rand.New(rand.NewSource(int64(w)))
				if window > 0 {
					left := per
					if _, err := pipelinedWriter(s, parts, window, rnd, func() bool { left--; return left >= 0 }); err != nil {
						b.Error(err)
					}
					return
				}
				for i := 0; i < per; i++ {
					if _, err := s.Append(ctx, "bench", rnd.Intn(parts), msgs); err != nil {
						b.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
	}
	run(8192) // warm-up
	b.SetBytes(benchRecord)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(b.N)
	report(b, start, res)
	// Ratios against the runs before this one in the same invocation.
	if base16 != nil && base16.mbps > 0 {
		b.ReportMetric(res.mbps/base16.mbps, "x16parts")
	}
	if disk64 != nil && disk64.mbps > 0 {
		b.ReportMetric(res.mbps/disk64.mbps, "xdisk64K")
	}
	if disk8 != nil && disk8.mbps > 0 {
		b.ReportMetric(res.mbps/disk8.mbps, "xdisk8K")
	}
}

// pipelinedWriter appends single records to random partitions with
// AppendAsync, keeping up to window appends in flight (as a broker
// connection does for a pipelining producer), until more reports false.
// It returns the records acknowledged.
func pipelinedWriter(s *Store, parts, window int, rnd *rand.Rand, more func() bool) (int, error) {
	msg := []Message{{Body: benchBody}}
	ctx := context.Background()
	var pending []*PendingAppend
	n := 0
	wait := func() error {
		_, err := pending[0].Result()
		pending = pending[1:]
		n++
		return err
	}
	for more() {
		if len(pending) == window {
			if err := wait(); err != nil {
				return n, err
			}
		}
		pending = append(pending, s.AppendAsync(ctx, "bench", rnd.Intn(parts), msg, nil))
	}
	for len(pending) > 0 {
		if err := wait(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// readLoad reads one partition sequentially from the page cache, one
// 1 MiB get (MetaQ's default fetch size) per op, wrapping at the end.
// interleaved: its chunks alternate with 15 other partitions' (one record
// per append, as single puts leave them); else 64 records per chunk.
// small > 0: instead, records of small body bytes, one per append,
// rotating over 4 partitions (BenchmarkBacklog's layout, thousands of
// chunks per get).
func readLoad(b *testing.B, interleaved bool, small int, res *benchResult) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// Setup without an fsync per append; Flush at the end.
	s.SetPolicy("read", Policy{UnflushThreshold: 100000})
	const partBytes = 32 << 20
	if small > 0 {
		msg := []Message{{Body: benchBody[:small]}}
		var pending []*PendingAppend
		for i := 0; i < (8<<20)/(RecordHeaderLen+small); i++ {
			for p := 0; p < 4; p++ {
				pending = append(pending, s.AppendAsync(ctx, "read", p, msg, nil))
			}
			if len(pending) >= 1024 {
				for _, pa := range pending {
					if _, err := pa.Result(); err != nil {
						b.Fatal(err)
					}
				}
				pending = pending[:0]
			}
		}
		for _, pa := range pending {
			if _, err := pa.Result(); err != nil {
				b.Fatal(err)
			}
		}
	} else if interleaved {
		msg := []Message{{Body: benchBody}}
		for i := 0; i < partBytes/benchRecord; i++ {
			for p := 0; p < 16; p++ {
				if _, err := s.Append(ctx, "read", p, msg); err != nil {
					b.Fatal(err)
				}
			}
		}
	} else {
		msgs := make([]Message, 64)
		for i := range msgs {
			msgs[i] = Message{Body: benchBody}
		}
		for i := 0; i < partBytes/benchRecord/64; i++ {
			if _, err := s.Append(ctx, "read", 0, msgs); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	info, _ := s.Partition("read", 0)
	off := info.Min
	get := func() int {
		if off >= info.Max {
			off = info.Min
		}
		d, err := s.Read("read", 0, off, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		off += int64(len(d))
		return len(d)
	}
	for off < info.Max { // warm-up
		get()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	total := 0
	for i := 0; i < b.N; i++ {
		total += get()
	}
	el := time.Since(start).Seconds()
	res.mbps = float64(total) / el / 1e6
	b.ReportMetric(res.mbps, "MB/s")
	// CPU time moves less than wall time when other jobs share the cores.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(total), "cpu-ms/MB") // ns per byte
}

// BenchmarkStore runs the disk baselines, group-commit appends at 16, 1,024
// and 10,000 partitions (8 writers, one and sixteen 1 KiB records per
// Append), and sequential reads. Each append line carries x16parts (its
// MB/s over the 16-partition run of the same batch size), xdisk64K (over
// the disk baseline with an fsync every 64 KiB) and, for batch=1, xdisk8K
// (over the disk with an fsync every 8 KiB: the most eight writers that each
// wait for their one record can put into one fsync).
func BenchmarkStore(b *testing.B) {
	var disk, disk8 benchResult
	b.Run("disk/1KiB-fsync-every-64KiB", func(b *testing.B) { diskBaseline(b, 64<<10, &disk) })
	// Eight writers that each wait for their one record can put at most
	// 8 KiB in one fsync: this is the disk's limit for that pattern.
	b.Run("disk/1KiB-fsync-every-8KiB", func(b *testing.B) { diskBaseline(b, 8<<10, &disk8) })
	ap := map[string]*benchResult{}
	for _, batch := range []int{1, 16} {
		for _, parts := range []int{16, 1024, 10000} {
			name := fmt.Sprintf("append/writers=8/batch=%d/partitions=%d", batch, parts)
			res := &benchResult{}
			ap[fmt.Sprint(batch, "/", parts)] = res
			base := ap[fmt.Sprint(batch, "/16")]
			var d8 *benchResult
			if batch == 1 {
				d8 = &disk8 // what the disk does with the same bytes per fsync
			}
			b.Run(name, func(b *testing.B) { appendLoad(b, parts, 8, batch, 0, res, base, &disk, d8) })
		}
	}
	// Single-record appends from 8 writers that pipeline (64 in flight
	// each, AppendAsync), as the broker's connections do: many records
	// share each fsync.
	var pipe16 benchResult
	for _, parts := range []int{16, 10000} {
		res, base := &pipe16, (*benchResult)(nil)
		if parts != 16 {
			res, base = &benchResult{}, &pipe16
		}
		b.Run(fmt.Sprintf("append/writers=8/pipelined=64/batch=1/partitions=%d", parts), func(b *testing.B) {
			appendLoad(b, parts, 8, 1, 64, res, base, &disk, nil)
		})
	}
	// Single-record puts from more connections: more records share each fsync.
	b.Run("append/writers=64/batch=1/partitions=1024", func(b *testing.B) {
		appendLoad(b, 1024, 64, 1, 0, &benchResult{}, nil, &disk, &disk8)
	})
	var rc, ri benchResult
	b.Run("read/contiguous", func(b *testing.B) { readLoad(b, false, 0, &rc) })
	b.Run("read/interleaved-16", func(b *testing.B) { readLoad(b, true, 0, &ri) })
	b.Run("read/100B-rotating-4", func(b *testing.B) { readLoad(b, false, 100, &benchResult{}) })
}

// BenchmarkScaling measures the same loads as BenchmarkStore in alternating
// half-second rounds (disk 64 KiB, disk 8 KiB, then every partition count
// and batch size, eleven times over) and reports the median of each, so that
// drift in a shared machine's disk and CPU hits every configuration alike.
// Run it with -benchtime=1x; the medians and ratios are its metrics.
func BenchmarkScaling(b *testing.B) {
	const rounds = 11
	const roundTime = 500 * time.Millisecond
	type cfg struct {
		name         string
		parts, batch int
		window       int // > 0: single records, AppendAsync with this many in flight
		s            *Store
		mbps         []float64
	}
	var cfgs []*cfg
	for _, batch := range []int{1, 16} {
		for _, parts := range []int{16, 1024, 10000} {
			cfgs = append(cfgs, &cfg{name: fmt.Sprintf("p%d_b%d", parts, batch), parts: parts, batch: batch})
		}
	}
	for _, parts := range []int{16, 10000} {
		cfgs = append(cfgs, &cfg{name: fmt.Sprintf("p%d_pipe64", parts), parts: parts, batch: 1, window: 64})
	}
	ctx := context.Background()
	for _, c := range cfgs {
		s, err := Open(Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for p := w; p < c.parts; p += 16 {
					s.CreatePartition("bench", p, 0)
				}
			}(w)
		}
		wg.Wait()
		c.s = s
	}
	appendFor := func(c *cfg, d time.Duration) float64 {
		msgs := make([]Message, c.batch)
		for i := range msgs {
			msgs[i] = Message{Body: benchBody}
		}
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		var mu sync.Mutex
		records := 0
		start := time.Now()
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				rnd := rand.New(rand.NewSource(time.Now().UnixNano() + int64(w)))
				n := 0
				if c.window > 0 {
					var err error
					if n, err = pipelinedWriter(c.s, c.parts, c.window, rnd, func() bool { return time.Now().Before(deadline) }); err != nil {
						b.Error(err)
					}
				}
				for c.window == 0 && time.Now().Before(deadline) {
					if _, err := c.s.Append(ctx, "bench", rnd.Intn(c.parts), msgs); err != nil {
						b.Error(err)
						return
					}
					n += c.batch
				}
				mu.Lock()
				records += n
				mu.Unlock()
			}(w)
		}
		wg.Wait()
		return float64(records) * benchRecord / time.Since(start).Seconds() / 1e6
	}
	diskFor := func(f File, pos *int64, syncEvery int64, d time.Duration) float64 {
		buf := make([]byte, benchRecord)
		deadline := time.Now().Add(d)
		start, n := time.Now(), 0
		for time.Now().Before(deadline) {
			for i := 0; i < 64; i++ {
				if _, err := f.WriteAt(buf, *pos); err != nil {
					b.Fatal(err)
				}
				*pos += benchRecord
				n++
				if *pos%syncEvery == 0 {
					if err := f.Datasync(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		return float64(n) * benchRecord / time.Since(start).Seconds() / 1e6
	}
	f, err := OSFS{}.OpenFile(filepath.Join(b.TempDir(), "baseline"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var pos int64
	var disk64, disk8 []float64
	// warm-up
	diskFor(f, &pos, 64<<10, 200*time.Millisecond)
	for _, c := range cfgs {
		appendFor(c, 200*time.Millisecond)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			disk64 = append(disk64, diskFor(f, &pos, 64<<10, roundTime))
			disk8 = append(disk8, diskFor(f, &pos, 8<<10, roundTime))
			for _, c := range cfgs {
				c.mbps = append(c.mbps, appendFor(c, roundTime))
			}
		}
	}
	b.StopTimer()
	med := func(x []float64) float64 {
		y := append([]float64(nil), x...)
		sort.Float64s(y)
		return y[len(y)/2]
	}
	d64, d8 := med(disk64), med(disk8)
	b.ReportMetric(d64, "MB/s_disk64K")
	b.ReportMetric(d8, "MB/s_disk8K")
	m := map[string]float64{}
	for _, c := range cfgs {
		m[c.name] = med(c.mbps)
		b.ReportMetric(m[c.name], "MB/s_"+c.name)
	}
	b.ReportMetric(m["p10000_b1"]/m["p16_b1"], "ratio10000/16_b1")
	b.ReportMetric(m["p10000_b16"]/m["p16_b16"], "ratio10000/16_b16")
	b.ReportMetric(m["p16_b1"]/d64, "xdisk64K_p16_b1")
	b.ReportMetric(m["p16_b1"]/d8, "xdisk8K_p16_b1")
	b.ReportMetric(m["p16_b16"]/d64, "xdisk64K_p16_b16")
	b.ReportMetric(m["p10000_b16"]/d64, "xdisk64K_p10000_b16")
	b.ReportMetric(m["p10000_pipe64"]/m["p16_pipe64"], "ratio10000/16_pipe64")
	b.ReportMetric(m["p16_pipe64"]/d64, "xdisk64K_p16_pipe64")
	b.ReportMetric(m["p10000_pipe64"]/d64, "xdisk64K_p10000_pipe64")
}

// BenchmarkOpenAfterCleanClose measures start-up after a clean shutdown on a
// 256 MiB log of 1 KiB single-record chunks over 1,024 partitions (the
// worst case for index size), reporting ms per GiB of log and the heap the
// indexes take per GiB.
func BenchmarkOpenAfterCleanClose(b *testing.B) {
	dir := b.TempDir()
	const logBytes = 256 << 20
	s, err := Open(Options{Dir: dir, SegmentBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	s.SetPolicy("open", Policy{UnflushThreshold: 1 << 20}) // no fsync per append while filling
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			msg := []Message{{Body: benchBody}}
			for i := w; i < logBytes/benchRecord; i += 8 {
				if _, err := s.Append(ctx, "open", i%1024, msg); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	b.ResetTimer()
	var heap uint64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := Open(Options{Dir: dir, SegmentBytes: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		s.Close()
		b.StartTimer()
	}
	b.StopTimer()
	gib := float64(logBytes) / (1 << 30)
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/gib, "ms/GiB")
	b.ReportMetric(float64(heap)/gib/(1<<20), "heapMiB/GiB")
}
