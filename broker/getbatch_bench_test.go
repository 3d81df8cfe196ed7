package broker

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// BenchmarkGetRound is a consumer's round of gets at the tail as the
// load generator sends it: 4 gets (2 partitions, 2 offsets each) in one
// write, each answered with 40-48 KiB of 1 KiB records in chunks of 16
// (sent from the log files), all 4 answers read before the next round. It
// reports the process's CPU time per round (broker and client together)
// beside the time.
func BenchmarkGetRound(b *testing.B) {
	st, err := store.Open(store.Options{Dir: b.TempDir(), ScrubRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	body := bytes.Repeat([]byte("m"), 1024)
	msgs := make([]store.Message, 16)
	for i := range msgs {
		msgs[i] = store.Message{Body: body}
	}
	for range 64 {
		for p := range 2 {
			if _, err := st.Append(context.Background(), "test", p, msgs); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := st.Flush(); err != nil {
		b.Fatal(err)
	}
	brk := startOnStore(b, iniWith(b, ""), st, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	cl := dial(b, brk.Addr())
	// At the tail: what is left from each offset fits one answer, so the
	// gets are answered on the connection's reader, as a consumer's that
	// keeps up are.
	var round []byte
	for k, back := range []int64{48 << 10, 40 << 10} {
		for p := range 2 {
			info, err := st.Partition("test", p)
			if err != nil {
				b.Fatal(err)
			}
			round = (&wire.Get{Topic: "test", Group: "g", Partition: int32(p), Offset: info.Max - back, MaxSize: 64 << 10, Opaque: int32(2*k + p)}).AppendTo(round)
		}
	}
	r := bufio.NewReaderSize(cl.nc, 1<<20)
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if _, err := cl.nc.Write(round); err != nil {
			b.Fatal(err)
		}
		for range 4 {
			line, err := r.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			f := bytes.Fields(line)
			if len(f) != 3 || string(f[0]) != "value" {
				b.Fatalf("answer %q", line)
			}
			n, err := strconv.Atoi(string(f[1]))
			if err != nil || n < 39<<10 {
				b.Fatalf("answer %q", line)
			}
			if _, err := r.Discard(n); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(brk.stats.getsBatched.Load())/float64(brk.stats.getsSent.Load()), "batched/sent")
	b.ReportMetric(float64(brk.stats.getsInline.Load())/float64(brk.stats.cmdGet.Load()), "inline/gets")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
