package store

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time (user + system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetPath compares the two ways a get's answer reaches a socket,
// from the page cache: copy (Read: pread, crc32c check, copy, write) and
// sendfile (ReadRun: one sendfile per chunk), for chunks (log entries) of
// 1, 2, 4, 32 and 256 KiB of 1 KiB records, 1 MiB per get. It reports the
// sending thread's CPU per MB (cpu-ns/B): the receiver drains the socket
// on another thread, not counted. Run with -cpu 1 on a busy machine.
func BenchmarkGetPath(b *testing.B) {
	for _, chunk := range []int{1, 2, 4, 32, 256} {
		for _, mode := range []string{"copy", "sendfile", "splice"} {
			b.Run(fmt.Sprintf("chunk=%dKiB/%s", chunk, mode), func(b *testing.B) {
				getPath(b, chunk, 1<<20, mode)
			})
		}
	}
	// Small answers, as consumers at the tail get: the fixed cost per get.
	for _, chunk := range []int{4, 16} {
		for _, get := range []int{8, 32, 128} {
			for _, mode := range []string{"copy", "sendfile", "splice"} {
				b.Run(fmt.Sprintf("chunk=%dKiB/get=%dKiB/%s", chunk, get, mode), func(b *testing.B) {
					getPath(b, chunk, get<<10, mode)
				})
			}
		}
	}
}

func getPath(b *testing.B, chunkKiB, getBytes int, mode string) {
	sendfile := mode != "copy"
	splicePipes.off.Store(mode == "sendfile")
	defer splicePipes.off.Store(false)
	s, err := Open(Options{Dir: b.TempDir(), ScrubRate: -1, sendfileMinChunk: 1,
		DefaultPolicy: Policy{UnflushThreshold: 1 << 20, UnflushInterval: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	msgs := make([]Message, chunkKiB)
	for i := range msgs {
		msgs[i] = Message{Body: benchBody}
	}
	for n := 0; n < 16<<20; n += chunkKiB * benchRecord {
		if _, err := s.Append(ctx, "g", 0, msgs); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Append(ctx, "g", 1, msgs[:1]); err != nil { // another partition between
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	srv, cli := tcpPair(b)
	go io.Copy(io.Discard, cli)
	info, _ := s.Partition("g", 0)
	off := info.Min
	get := func() int {
		if off >= info.Max {
			off = info.Min
		}
		var n int
		if sendfile {
			run, err := s.ReadRun("g", 0, off, getBytes)
			if err != nil || run == nil {
				b.Fatalf("ReadRun: %v %v", run, err)
			}
			if _, err := run.WriteTo(srv); err != nil {
				b.Fatal(err)
			}
			n = run.Len()
			run.Release()
		} else {
			d, err := s.Read("g", 0, off, getBytes)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := srv.Write(d); err != nil {
				b.Fatal(err)
			}
			n = len(d)
		}
		off += int64(n)
		return n
	}
	for off < info.Max { // warm-up: the partition in the page cache
		get()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	cpu0, total := threadCPU(), 0
	for i := 0; i < b.N; i++ {
		total += get()
	}
	b.ReportMetric(float64(threadCPU()-cpu0)/float64(total), "cpu-ns/B")
	b.SetBytes(int64(total / max(b.N, 1)))
}
