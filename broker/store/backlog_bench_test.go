package store

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkBacklog fills a store with a backlog of single-record chunks
// (one 100-byte message per put, the index's worst case) and measures what
// retention scale costs: memory per retained record, start-up after a clean
// stop and after kill -9, put throughput against an empty store, random
// gets and sequential reads of old data. Every measurement runs in a child
// process (this test binary), so memory is that of a fresh start-up.
// The size is a flag; the default is small so CI never runs the big one:
//
//	go test -run '^$' -bench BenchmarkBacklog -benchtime 1x ./broker/store/ \
//	    -backlog.bytes 24e9 -backlog.dir /work/backlog
//
// To compare two builds' sequential reads on one data directory, run their
// test binaries alternately as children in mode "seqread" (see backlogChild):
//
//	METAQ_STORE_BACKLOG_CHILD=seqread METAQ_STORE_BACKLOG_CHILD_DIR=<dir> \
//	    METAQ_STORE_BACKLOG_CHILD_ROUNDS=1 ./store.test
//
// after one run in mode "gen" (with _PARTS, _BODY and _TARGET) made the data.
var (
	backlogBytes = flag.Float64("backlog.bytes", 256<<20, "BenchmarkBacklog: log bytes to generate")
	backlogDir   = flag.String("backlog.dir", "", "BenchmarkBacklog: data directory, removed afterwards (default: a temporary one)")
	backlogParts = flag.Int("backlog.partitions", 4, "BenchmarkBacklog: partitions")
	backlogBody  = flag.Int("backlog.body", 100, "BenchmarkBacklog: message body bytes")
	backlogCold  = flag.Bool("backlog.dropcaches", true, "BenchmarkBacklog: evict the data directory from the page cache before start-ups and reads")
	backlogProf  = flag.String("backlog.cpuprofile", "", "BenchmarkBacklog: write a CPU profile of the sequential reads to this file")
	backlogWait  = flag.Duration("backlog.settle", 5*time.Second, "BenchmarkBacklog: wait after each eviction before a sequential-read pass (longer than the kernel's free page reporting delay)")
)

const backlogChildEnv = "METAQ_STORE_BACKLOG_CHILD"

func BenchmarkBacklog(b *testing.B) {
	dir := *backlogDir
	if dir == "" {
		dir = b.TempDir()
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	recBytes := int64(RecordHeaderLen + *backlogBody)
	chunk := recBytes + entryHeaderLen
	total := int64(*backlogBytes)
	cold := "warm"
	if *backlogCold {
		if err := dropCaches(dir); err != nil {
			b.Logf("cannot drop the page cache (%v): start-ups and reads are warm", err)
			*backlogCold = false
		} else {
			cold = "cold"
		}
	}
	child := func(mode string, env ...string) (map[string]float64, *exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), backlogChildEnv+"="+mode, backlogChildEnv+"_DIR="+dir,
			fmt.Sprintf("%s_PARTS=%d", backlogChildEnv, *backlogParts), fmt.Sprintf("%s_BODY=%d", backlogChildEnv, *backlogBody))
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		return nil, cmd, bufio.NewScanner(out)
	}
	// run runs a child to its end and returns its "STAT k=v ..." figures.
	run := func(mode string, env ...string) map[string]float64 {
		_, cmd, sc := child(mode, env...)
		stats := map[string]float64{}
		for sc.Scan() {
			parseStats(sc.Text(), stats)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("child %s: %v", mode, err)
		}
		return stats
	}
	drop := func() {
		if *backlogCold {
			dropCaches(dir)
		}
	}
	b.ResetTimer()
	// 1. A quarter of the backlog, clean stop, fresh start-up.
	t0 := time.Now()
	run("gen", fmt.Sprintf("%s_TARGET=%d", backlogChildEnv, total/4))
	drop()
	s1 := run("open")
	ckpt1 := fileSize(filepath.Join(dir, ckptName))
	b.Logf("quarter: %.0f records, open %.3f s (%s), RSS %.1f MB, heap %.1f MB, checkpoint %d bytes",
		s1["records"], s1["open_s"], cold, s1["rss"]/1e6, s1["heap"]/1e6, ckpt1)
	// 2. The rest, then appends through the store killed with SIGKILL
	// after a few seconds (so the active segment holds data the last
	// checkpoint does not cover).
	run("gen", fmt.Sprintf("%s_TARGET=%d", backlogChildEnv, total))
	_, cmd, sc := child("fill", fmt.Sprintf("%s_TARGET=%d", backlogChildEnv, 0), backlogChildEnv+"_KILL=1")
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "READY") {
			break
		}
	}
	time.Sleep(3 * time.Second)
	cmd.Process.Kill()
	cmd.Wait()
	gen := time.Since(t0)
	drop()
	s2 := run("open")
	b.Logf("after kill -9: %.0f records, open %.3f s (%s), recovery scanned %.1f MB of log",
		s2["records"], s2["open_s"], cold, s2["scanned"]/1e6)
	// 3. Clean stop (the open above closed cleanly), fresh start-up, and
	// the reads and puts.
	drop()
	s3 := run("measure", fmt.Sprintf("%s_COLD=%v", backlogChildEnv, *backlogCold), backlogChildEnv+"_PROFILE="+*backlogProf,
		fmt.Sprintf("%s_SETTLE=%s", backlogChildEnv, *backlogWait))
	slope := (s3["rss"] - s1["rss"]) / (s3["records"] - s1["records"])
	heapSlope := (s3["heap"] - s1["heap"]) / (s3["records"] - s1["records"])
	logBytes := s3["records"] * float64(chunk)
	b.Logf("full: %.0f records, %.2f GB of log, generated in %v", s3["records"], logBytes/1e9, gen.Round(time.Second))
	b.Logf("clean start-up %.3f s (%s); RSS %.1f MB, Go heap %.1f MB", s3["open_s"], cold, s3["rss"]/1e6, s3["heap"]/1e6)
	b.Logf("memory slope: RSS %.4f, heap %.4f bytes per retained record", slope, heapSlope)
	b.Logf("index in memory: %.0f spans in %.0f bytes (%.0f at a quarter: %.4f bytes per retained record), %.0f active-segment block references of 40 bytes (%.0f at a quarter)",
		s3["spans"], s3["span_bytes"], s1["span_bytes"], (s3["span_bytes"]-s1["span_bytes"])/(s3["records"]-s1["records"]), s3["blocks"], s1["blocks"])
	ckpt3 := fileSize(filepath.Join(dir, ckptName))
	b.Logf("checkpoint %d bytes (%d at a quarter); RSS after the reads and puts %.1f MB, heap %.1f MB",
		ckpt3, ckpt1, s3["rss_after"]/1e6, s3["heap_after"]/1e6)
	b.ReportMetric(float64(ckpt3), "checkpoint-B")
	if raw, err := os.ReadFile(filepath.Join(dir, ckptName)); err == nil {
		if c, err := decodeCheckpoint(raw); err == nil {
			spans, spanBytes := 0, 0
			for _, p := range c.parts {
				spans += p.spans.n
				spanBytes += len(p.spans.b)
			}
			b.Logf("checkpoint spans: %d in %d bytes, %.1f per span (20 in format 3)", spans, spanBytes, float64(spanBytes)/float64(max(spans, 1)))
		}
	}
	b.Logf("put throughput with the backlog %.0f msgs/s, empty store %.0f msgs/s: ratio %.3f",
		s3["put_backlog"], s3["put_empty"], s3["put_backlog"]/s3["put_empty"])
	b.Logf("random get (16 KiB at old offsets, %s): p50 %.3f ms, p99 %.3f ms", cold, s3["get_p50"]*1e3, s3["get_p99"]*1e3)
	b.Logf("sequential read of old data (1 MiB gets, %s, medians of 3 rounds): %.1f MB/s of partition data, %.1f MB/s of log passed over, %.2f CPU s per GB of data, %.2f log preads of %.0f KiB and %.2f index reads per MB",
		cold, s3["seq_mbps"], s3["seq_log_mbps"], s3["seq_cpu_s_per_gb"], s3["seq_preads_per_mb"], s3["seq_pread_kb"], s3["seq_idx_reads_per_mb"])
	best := max(s3["disk_mbps"], s3["ahead_mbps"], s3["direct_mbps"])
	b.Logf("the same log range read with 4 MiB preads (%s): %.1f MB/s through the page cache, %.1f MB/s asking for the next pread ahead, %.1f MB/s with O_DIRECT; log ratios %.2f, %.2f and %.2f (%.2f of the best)",
		cold, s3["disk_mbps"], s3["ahead_mbps"], s3["direct_mbps"], s3["seq_log_mbps"]/s3["disk_mbps"], s3["seq_log_mbps"]/s3["ahead_mbps"], s3["seq_log_mbps"]/s3["direct_mbps"], s3["seq_log_mbps"]/best)
	b.ReportMetric(s3["records"], "records")
	b.ReportMetric(s3["rss"]/1e6, "RSS-MB")
	b.ReportMetric(slope, "RSS-B/record")
	b.ReportMetric(heapSlope, "heap-B/record")
	b.ReportMetric(s3["open_s"], "open-clean-s")
	b.ReportMetric(s2["open_s"], "open-kill9-s")
	b.ReportMetric(s3["put_backlog"]/s3["put_empty"], "put-ratio")
	b.ReportMetric(s3["get_p99"]*1e3, "get-p99-ms")
	b.ReportMetric(s3["seq_log_mbps"]/s3["disk_mbps"], "seq-log/disk")
	b.ReportMetric(s3["seq_log_mbps"]/s3["direct_mbps"], "seq-log/direct")
	b.ReportMetric(s3["seq_log_mbps"]/best, "seq-log/best")
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

func parseStats(line string, into map[string]float64) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "STAT" {
		return
	}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if x, err := strconv.ParseFloat(v, 64); ok && err == nil {
			into[k] = x
		}
	}
}

// dropCaches evicts dir's files from the page cache (written back first):
// only this benchmark's data, leaving other processes' caches alone. A
// host's cache under a virtual disk is out of reach.
func dropCaches(dir string) error {
	exec.Command("sync").Run()
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil // retention removed it meanwhile
		}
		defer f.Close()
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
}

// backlogChild is one step of BenchmarkBacklog in its own process.
func backlogChild(mode string) {
	env := func(k string) string { return os.Getenv(backlogChildEnv + "_" + k) }
	dir := env("DIR")
	parts, _ := strconv.Atoi(env("PARTS"))
	body, _ := strconv.Atoi(env("BODY"))
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "backlog child:", mode, err)
		os.Exit(3)
	}
	cfs := &countFS{}
	start := time.Now()
	s, err := Open(Options{Dir: dir, FS: cfs})
	if err != nil {
		fail(err)
	}
	opened := time.Since(start)
	chunk := int64(RecordHeaderLen + body + entryHeaderLen)
	records := func() float64 {
		n := int64(0)
		for _, p := range s.Partitions() {
			n += (p.Max - p.Min) / int64(RecordHeaderLen+body)
		}
		return float64(n)
	}
	switch mode {
	case "fill":
		target, _ := strconv.ParseInt(env("TARGET"), 10, 64)
		kill := env("KILL") != ""
		_, end := s.LogBounds()
		n := max((target-end)/chunk, 0)
		var done atomic.Int64
		if kill {
			fmt.Println("READY")
		}
		fillStore(s, parts, body, func() bool {
			x := done.Add(1)
			if x%(10<<20) == 0 {
				fmt.Fprintf(os.Stderr, "backlog: %d of %d records, %v\n", x, n, time.Since(start).Round(time.Second))
			}
			return kill || x <= n
		})
	case "gen":
		target, _ := strconv.ParseInt(env("TARGET"), 10, 64)
		if err := genLog(s, parts, body, target); err != nil {
			fail(err)
		}
		// Reopen: start-up indexes what was written behind its back (the
		// crash-recovery path, from the last checkpoint on).
		start = time.Now()
		if s, err = Open(Options{Dir: dir}); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "backlog: indexed the new log in %v\n", time.Since(start).Round(time.Millisecond))
	case "open":
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("STAT open_s=%f rss=%d heap=%d records=%f scanned=%d\n", opened.Seconds(), rssBytes(), ms.HeapInuse, records(), cfs.logRead.Load())
		spans, spanBytes, blocks := indexMemory(s)
		fmt.Printf("STAT spans=%d span_bytes=%d blocks=%d\n", spans, spanBytes, blocks)
	case "measure":
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("STAT open_s=%f rss=%d heap=%d records=%f\n", opened.Seconds(), rssBytes(), ms.HeapInuse, records())
		spans, spanBytes, blocks := indexMemory(s)
		fmt.Printf("STAT spans=%d span_bytes=%d blocks=%d\n", spans, spanBytes, blocks)
		measureBacklog(s, parts, body, env("COLD") == "true")
		runtime.GC()
		runtime.ReadMemStats(&ms)
		fmt.Printf("STAT rss_after=%d heap_after=%d\n", rssBytes(), ms.HeapInuse)
	case "seqread":
		// Only the sequential read (seqRounds), for comparing builds on
		// one data directory in alternating runs.
		want, _ := strconv.ParseInt(env("WANT"), 10, 64)
		rounds, _ := strconv.Atoi(env("ROUNDS"))
		p := s.Partitions()[0]
		if want <= 0 {
			want = min((p.Max-p.Min)/2, 512<<20)
		}
		st := seqRounds(s, p, want, max(rounds, 1), env("COLD") != "false", env("PROFILE"))
		fmt.Printf("STAT seq_mbps=%.1f seq_log_mbps=%.1f disk_mbps=%.1f ahead_mbps=%.1f direct_mbps=%.1f seq_cpu_s_per_gb=%.3f seq_preads_per_mb=%.2f seq_pread_kb=%.0f seq_idx_reads_per_mb=%.2f\n",
			st.seq, st.seqLog, st.disk, st.ahead, st.direct, st.cpuPerGB, st.preadsPerMB, st.preadKB, st.idxReadsPerMB)
	}
	if err := s.Close(); err != nil {
		fail(err)
	}
}

// genLog closes s and writes log segments after its end directly, as the
// writer would (a define entry per partition at each segment start, then
// one single-record data entry per put, rotating over the partitions),
// until the log holds target bytes.
func genLog(s *Store, parts, body int, target int64) error {
	for i := 0; i < parts; i++ {
		if err := s.CreatePartition("backlog", i, 0); err != nil {
			return err
		}
	}
	type gp struct {
		pid uint32
		end int64
	}
	var ps []gp
	for i := 0; i < parts; i++ {
		p := s.lookup("backlog", i)
		ps = append(ps, gp{p.pid, p.end})
	}
	pos := s.w.pos
	segBytes := s.opts.SegmentBytes
	lastMs := s.w.lastMs
	if err := s.Close(); err != nil {
		return err
	}
	msg := make([]byte, body)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	var ids idGen
	rec := make([]byte, 0, RecordHeaderLen+body)
	buf := make([]byte, 0, 8<<20)
	t0 := time.Now()
	for k := 0; pos < target; k++ {
		path := filepath.Join(s.logDir, segName(pos))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		ms := max(time.Now().UnixMilli(), lastMs)
		buf = buf[:0]
		for i, p := range ps {
			buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: p.end, ms: ms}, encodeDefine("backlog", i))
		}
		size := int64(0)
		for i := 0; size+int64(len(buf)) < segBytes && pos+size+int64(len(buf)) < target; i++ {
			if i%4096 == 0 {
				ms = max(time.Now().UnixMilli(), ms)
			}
			p := &ps[i%parts]
			rec = appendRecordSum(rec[:0], ids.next(ms), 0, RecordChecksum(msg), msg)
			buf = appendEntry(buf, entryHeader{typ: entryData, pid: p.pid, off: p.end, ms: ms}, rec)
			p.end += int64(len(rec))
			if len(buf) >= 4<<20 {
				if _, err := f.Write(buf); err != nil {
					return err
				}
				size += int64(len(buf))
				buf = buf[:0]
			}
		}
		if _, err := f.Write(buf); err != nil {
			return err
		}
		size += int64(len(buf))
		if err := f.Sync(); err != nil {
			return err
		}
		f.Close()
		pos += size
		lastMs = ms
		fmt.Fprintf(os.Stderr, "backlog: segment %d written, log at %.2f GB, %v\n", k, float64(pos)/1e9, time.Since(t0).Round(time.Second))
	}
	return nil
}

// fillStore appends single records to random partitions from 8 goroutines
// keeping 64 appends in flight each, while more reports true.
func fillStore(s *Store, parts, body int, more func() bool) float64 {
	b := make([]byte, body)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	msg := []Message{{Body: b}}
	var wg sync.WaitGroup
	var n atomic.Int64
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(w)))
			var pending []*PendingAppend
			for more() {
				if len(pending) == 64 {
					if _, err := pending[0].Result(); err != nil {
						fmt.Fprintln(os.Stderr, "append:", err)
						os.Exit(4)
					}
					pending = pending[1:]
					n.Add(1)
				}
				pending = append(pending, s.AppendAsync(context.Background(), "backlog", rnd.Intn(parts), msg, nil))
			}
			for _, p := range pending {
				p.Result()
				n.Add(1)
			}
		}(w)
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func rssBytes() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func measureBacklog(s *Store, parts, body int, cold bool) {
	drop := func() {
		if cold {
			dropCaches(s.dir)
		}
	}
	// Random gets at old offsets (the older half of each partition).
	drop()
	rnd := rand.New(rand.NewSource(1))
	infos := s.Partitions()
	var lat []time.Duration
	for i := 0; i < 2000; i++ {
		p := infos[rnd.Intn(len(infos))]
		off := p.Min + rnd.Int63n(max((p.Max-p.Min)/2, 1))
		t := time.Now()
		if _, err := s.Read(p.Topic, p.Partition, off, 16<<10); err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			os.Exit(5)
		}
		lat = append(lat, time.Since(t))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("STAT get_p50=%f get_p99=%f\n", lat[len(lat)/2].Seconds(), lat[len(lat)*99/100].Seconds())
	// Sequential read of one partition's old data, 1 MiB gets, against
	// the disk reading the same log range (see seqRounds).
	p := infos[0]
	st := seqRounds(s, p, min((p.Max-p.Min)/2, 512<<20), 3, cold, os.Getenv(backlogChildEnv+"_PROFILE"))
	fmt.Printf("STAT seq_mbps=%f seq_log_mbps=%f disk_mbps=%f ahead_mbps=%f direct_mbps=%f seq_cpu_s_per_gb=%f seq_preads_per_mb=%f seq_pread_kb=%f seq_idx_reads_per_mb=%f\n",
		st.seq, st.seqLog, st.disk, st.ahead, st.direct, st.cpuPerGB, st.preadsPerMB, st.preadKB, st.idxReadsPerMB)
	// Put throughput: the backlogged store against an empty one in the
	// same process, alternating 2-second rounds, medians.
	empty, err := Open(Options{Dir: filepath.Join(os.TempDir(), fmt.Sprintf("backlog-empty-%d", os.Getpid()))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open empty:", err)
		os.Exit(6)
	}
	defer os.RemoveAll(empty.dir)
	defer empty.Close()
	var withBacklog, without []float64
	for r := 0; r < 5; r++ {
		for _, st := range []*Store{s, empty} {
			until := time.Now().Add(2 * time.Second)
			rate := fillStore(st, parts, body, func() bool { return time.Now().Before(until) })
			if st == s {
				withBacklog = append(withBacklog, rate)
			} else {
				without = append(without, rate)
			}
		}
	}
	fmt.Printf("STAT put_backlog=%f put_empty=%f\n", median(withBacklog), median(without))
}

// seqStats are the medians of seqRounds. Rates are MB/s; seqLog is the
// log the store's reads passed over (the partition shares the log with
// the others, so the disk reads all of it), disk, ahead and direct the
// same log range read by plain preads of the store's largest read size:
// through the page cache (with the kernel's read-ahead), through the page
// cache asking for the next pread ahead as the store does, and with
// O_DIRECT. The best of the three is the disk's bandwidth for a reader.
type seqStats struct {
	seq, seqLog, disk, ahead, direct float64
	cpuPerGB                         float64 // CPU seconds (user+system) per GB of partition data read
	preadsPerMB, preadKB             float64 // log preads per MB of partition data, and their mean size
	idxReadsPerMB                    float64 // .idx preads per MB of partition data
}

// seqRounds reads want bytes of p's data from its start with 1 MiB gets,
// then the log range those gets passed over with plain preads (buffered,
// then O_DIRECT), evicting the data directory from the page cache before
// each when cold, in rounds alternating the three. A warm-up pass reads
// the range once first, so that every measured pass finds the same state
// below the guest: on a virtual disk with a write-back cache the host may
// hold the range in its memory whatever the guest drops. After each
// eviction the pass waits coldSettle() before it starts, so that
// every pass fills the page cache from memory in the same state: a guest
// with free page reporting hands freed memory back to the host after a
// moment, and the first touch of such memory is much slower than reusing
// pages freed a moment ago (BENCH.md). profile, when set, is a file for
// the CPU profile of the store's reads.
func seqRounds(s *Store, p PartitionInfo, want int64, rounds int, cold bool, profile string) seqStats {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "sequential read:", err)
		os.Exit(5)
	}
	part := s.lookup(p.Topic, p.Partition)
	first, err := s.chunks(part, p.Min, 1)
	if err != nil || len(first) == 0 {
		fail(fmt.Errorf("first chunk: %v", err))
	}
	last, err := s.chunks(part, p.Min+want-1, 1)
	if err != nil || len(last) == 0 {
		fail(fmt.Errorf("last chunk: %v", err))
	}
	from, to := first[0].pos, last[0].pos+entryHeaderLen+int64(last[0].n)
	drop := func() {
		if cold {
			dropCaches(s.dir)
			time.Sleep(coldSettle())
		}
	}
	cfs, _ := s.opts.FS.(*countFS)
	if _, err := readLogRange(s, from, to, 4<<20, directRead); err != nil {
		fail(err)
	}
	var seq, seqLog, disk, ahead, direct, cpu, preads, preadKB, idxReads []float64
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	for r := 0; r < rounds; r++ {
		drop()
		var r0, r1, n0, n1, i0, i1, lw0, iw0, la0, ia0 int64
		if cfs != nil {
			r0, n0, i0 = cfs.logRead.Load(), cfs.logReads.Load(), cfs.idxReads.Load()
			lw0, iw0 = cfs.logWait.Load(), cfs.idxWait.Load()
			la0, ia0 = cfs.logAhead.Load(), cfs.idxAhead.Load()
		}
		c0, f0 := cpuTime(), minorFaults()
		t := time.Now()
		for off := p.Min; off < p.Min+want; {
			b, err := s.Read(p.Topic, p.Partition, off, 1<<20)
			if err != nil {
				fail(err)
			}
			off += int64(len(b))
		}
		d := time.Since(t).Seconds()
		c, faults := cpuTime()-c0, minorFaults()-f0
		mb := float64(want) / 1e6
		inLog, inIdx, logAhead, idxAhead := 0.0, 0.0, 0.0, 0.0
		if cfs != nil {
			inLog, inIdx = float64(cfs.logWait.Load()-lw0)/1e9/d, float64(cfs.idxWait.Load()-iw0)/1e9/d
			logAhead, idxAhead = float64(cfs.logAhead.Load()-la0)/1e6/mb, float64(cfs.idxAhead.Load()-ia0)/1e6/mb
		}
		seq = append(seq, mb/d)
		seqLog = append(seqLog, float64(to-from)/1e6/d)
		cpu = append(cpu, c.Seconds()/(mb/1e3))
		if cfs != nil {
			r1, n1, i1 = cfs.logRead.Load(), cfs.logReads.Load(), cfs.idxReads.Load()
			preads = append(preads, float64(n1-n0)/mb)
			preadKB = append(preadKB, float64(r1-r0)/float64(max(n1-n0, 1))/1024)
			idxReads = append(idxReads, float64(i1-i0)/mb)
		}
		for _, o := range []struct {
			mode baselineRead
			into *[]float64
		}{{plainRead, &disk}, {aheadRead, &ahead}, {directRead, &direct}} {
			drop()
			rate, err := readLogRange(s, from, to, 4<<20, o.mode)
			if err != nil {
				fail(err)
			}
			*o.into = append(*o.into, rate)
		}
		fmt.Fprintf(os.Stderr, "backlog: sequential read round %d: %.1f MB/s of partition data (%.1f of log, %.2f CPU s per GB, %.0f page faults per MB, %.0f%% of the time in log preads, %.0f%% in index preads; asked ahead per MB: %.2f MB of log, %.3f MB of index), disk %.1f MB/s, with read-ahead %.1f MB/s, O_DIRECT %.1f MB/s\n",
			r+1, seq[r], seqLog[r], cpu[r], float64(faults)/mb, 100*inLog, 100*inIdx, logAhead, idxAhead, disk[r], ahead[r], direct[r])
	}
	st := seqStats{seq: median(seq), seqLog: median(seqLog), disk: median(disk), ahead: median(ahead), direct: median(direct), cpuPerGB: median(cpu)}
	if cfs != nil {
		st.preadsPerMB, st.preadKB, st.idxReadsPerMB = median(preads), median(preadKB), median(idxReads)
	}
	return st
}

// coldSettle is how long a cold pass of seqRounds waits after evicting the
// page cache: by default 5 s, longer than the kernel's page reporting
// delay (2 s); -backlog.settle, or _SETTLE for a seqread child, sets it.
func coldSettle() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(backlogChildEnv + "_SETTLE")); err == nil {
		return d
	}
	return 5 * time.Second
}

// baselineRead is how readLogRange reads.
type baselineRead int

const (
	plainRead  baselineRead = iota // buffered preads, the kernel's read-ahead
	aheadRead                      // buffered preads, each asking for the next one ahead (WILLNEED), as the store does
	directRead                     // O_DIRECT preads: aligned, past the page cache
)

// readLogRange reads the log range [from, to) of s's segments in order
// with preads of size bytes on descriptors of its own and returns MB/s.
func readLogRange(s *Store, from, to int64, size int, mode baselineRead) (float64, error) {
	s.segMu.RLock()
	var segs []*segment
	for _, g := range s.segs {
		if g.end() > from && g.start < to {
			segs = append(segs, g)
		}
	}
	s.segMu.RUnlock()
	flag := os.O_RDONLY
	if mode == directRead {
		flag |= unix.O_DIRECT
	}
	// An aligned buffer (O_DIRECT needs it): anonymous memory is page aligned.
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(buf)
	const align = 4096
	t := time.Now()
	for _, g := range segs {
		f, err := os.OpenFile(g.path, flag, 0)
		if err != nil {
			return 0, err
		}
		lo, hi := max(from, g.start)-g.start, min(to, g.end())-g.start
		lo -= lo % align
		for x := lo; x < hi; x += int64(size) {
			if mode == aheadRead && x+int64(size) < hi {
				unix.Fadvise(int(f.Fd()), x+int64(size), int64(size), unix.FADV_WILLNEED)
			}
			if _, err := f.ReadAt(buf, x); err != nil && err != io.EOF {
				f.Close()
				return 0, fmt.Errorf("read %s at %d: %w", g.path, x, err)
			}
		}
		f.Close()
	}
	return float64(to-from) / time.Since(t).Seconds() / 1e6, nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the process's minor page faults so far.
func minorFaults() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Minflt
}

func median(x []float64) float64 {
	sort.Float64s(x)
	return x[len(x)/2]
}
