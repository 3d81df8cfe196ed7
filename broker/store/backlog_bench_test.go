package store

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
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
var (
	backlogBytes = flag.Float64("backlog.bytes", 256<<20, "BenchmarkBacklog: log bytes to generate")
	backlogDir   = flag.String("backlog.dir", "", "BenchmarkBacklog: data directory, removed afterwards (default: a temporary one)")
	backlogParts = flag.Int("backlog.partitions", 4, "BenchmarkBacklog: partitions")
	backlogBody  = flag.Int("backlog.body", 100, "BenchmarkBacklog: message body bytes")
	backlogCold  = flag.Bool("backlog.dropcaches", true, "BenchmarkBacklog: evict the data directory from the page cache before start-ups and reads")
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
	s3 := run("measure", fmt.Sprintf("%s_COLD=%v", backlogChildEnv, *backlogCold))
	slope := (s3["rss"] - s1["rss"]) / (s3["records"] - s1["records"])
	heapSlope := (s3["heap"] - s1["heap"]) / (s3["records"] - s1["records"])
	logBytes := s3["records"] * float64(chunk)
	b.Logf("full: %.0f records, %.2f GB of log, generated in %v", s3["records"], logBytes/1e9, gen.Round(time.Second))
	b.Logf("clean start-up %.3f s (%s); RSS %.1f MB, Go heap %.1f MB", s3["open_s"], cold, s3["rss"]/1e6, s3["heap"]/1e6)
	b.Logf("memory slope: RSS %.4f, heap %.4f bytes per retained record", slope, heapSlope)
	ckpt3 := fileSize(filepath.Join(dir, ckptName))
	b.Logf("checkpoint %d bytes (%d at a quarter); RSS after the reads and puts %.1f MB, heap %.1f MB",
		ckpt3, ckpt1, s3["rss_after"]/1e6, s3["heap_after"]/1e6)
	b.ReportMetric(float64(ckpt3), "checkpoint-B")
	b.Logf("put throughput with the backlog %.0f msgs/s, empty store %.0f msgs/s: ratio %.3f",
		s3["put_backlog"], s3["put_empty"], s3["put_backlog"]/s3["put_empty"])
	b.Logf("random get (16 KiB at old offsets, %s): p50 %.3f ms, p99 %.3f ms", cold, s3["get_p50"]*1e3, s3["get_p99"]*1e3)
	b.Logf("sequential read of old data (1 MiB gets, %s): %.1f MB/s of partition data, %.1f MB/s of log passed over; disk %.1f MB/s: log ratio %.2f",
		cold, s3["seq_mbps"], s3["seq_log_mbps"], s3["disk_mbps"], s3["seq_log_mbps"]/s3["disk_mbps"])
	b.ReportMetric(s3["records"], "records")
	b.ReportMetric(s3["rss"]/1e6, "RSS-MB")
	b.ReportMetric(slope, "RSS-B/record")
	b.ReportMetric(heapSlope, "heap-B/record")
	b.ReportMetric(s3["open_s"], "open-clean-s")
	b.ReportMetric(s2["open_s"], "open-kill9-s")
	b.ReportMetric(s3["put_backlog"]/s3["put_empty"], "put-ratio")
	b.ReportMetric(s3["get_p99"]*1e3, "get-p99-ms")
	b.ReportMetric(s3["seq_log_mbps"]/s3["disk_mbps"], "seq-log/disk")
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
	case "measure":
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("STAT open_s=%f rss=%d heap=%d records=%f\n", opened.Seconds(), rssBytes(), ms.HeapInuse, records())
		measureBacklog(s, parts, body, env("COLD") == "true")
		runtime.GC()
		runtime.ReadMemStats(&ms)
		fmt.Printf("STAT rss_after=%d heap_after=%d\n", rssBytes(), ms.HeapInuse)
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
	// the disk reading a segment file it has not read yet.
	p := infos[0]
	want := min((p.Max-p.Min)/2, 2<<30)
	// The log the read passes over: the partition shares it with the
	// others, so the disk reads all of it.
	var logSpan float64
	if part := s.lookup(p.Topic, p.Partition); part != nil {
		first, _ := s.chunks(part, p.Min, 1)
		last, _ := s.chunks(part, p.Min+want-1, 1)
		if len(first) > 0 && len(last) > 0 {
			logSpan = float64(last[0].pos - first[0].pos)
		}
	}
	drop()
	t := time.Now()
	for off := p.Min; off < p.Min+want; {
		b, err := s.Read(p.Topic, p.Partition, off, 1<<20)
		if err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			os.Exit(5)
		}
		off += int64(len(b))
	}
	d := time.Since(t).Seconds()
	seq, seqLog := float64(want)/d/1e6, logSpan/d/1e6
	drop()
	s.segMu.RLock()
	g := s.segs[len(s.segs)/2]
	s.segMu.RUnlock()
	buf := make([]byte, 1<<20)
	size := min(g.size.Load(), 2<<30)
	t = time.Now()
	for x := int64(0); x < size; x += int64(len(buf)) {
		g.f.ReadAt(buf, x)
	}
	disk := float64(size) / time.Since(t).Seconds() / 1e6
	fmt.Printf("STAT seq_mbps=%f seq_log_mbps=%f disk_mbps=%f\n", seq, seqLog, disk)
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

func median(x []float64) float64 {
	sort.Float64s(x)
	return x[len(x)/2]
}
