package broker

import (
	"bytes"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/wire"
)

// rssBytes is the process's resident set size (Linux), or -1.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// BenchmarkNonReadingGetsRSS measures the attack of issue 14: clients ask
// for gets of maxTransferSize (100 MB, as in MetaQ's shipped server.ini)
// and never read an answer. It reports how much the process's RSS grows
// while they are connected ("rss-MB", peak over a baseline taken just
// before), what the broker says it holds ("held-MB", its byte budget), the
// bound ("bound-MB", maxBufferedBytes), and the RSS still above the
// baseline once they are gone and the garbage collector has run
// ("after-MB"), and how long a consumer that reads its answers, arriving
// during the attack, waits for a 1 MiB get ("consumer-wait-s"). The
// "unbounded" case gives every connection a share larger
// than an answer and the broker no bound, which is how the broker behaved
// before the budget (one 100 MB answer held per connection); compare its
// rss-MB with the bounded case's in the same run.
//
//	go test -run '^$' -bench NonReadingGetsRSS -benchtime 1x ./broker/
func BenchmarkNonReadingGetsRSS(b *testing.B) {
	if rssBytes() < 0 {
		b.Skip("needs /proc/self/status (Linux) to read the RSS")
	}
	for _, c := range []struct {
		name        string
		conns       int
		share, pool int64
	}{
		{"bounded/conns=25", 25, 0, 0}, // the [limits] defaults
		{"bounded/conns=100", 100, 0, 0},
		{"unbounded/conns=25", 25, 128 << 20, 1 << 40},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				benchNonReadingGets(b, c.conns, c.share, c.pool)
			}
		})
	}
}

func benchNonReadingGets(b *testing.B, conns int, share, pool int64) {
	cfg := parseConfig(b, bytes.Replace(iniWith(b, ""), []byte("maxTransferSize=1048576"), []byte("maxTransferSize=104857600"), 1))
	brk := startBroker(b, cfg, func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.MaxPendingBytes = share
		o.MaxBufferedBytes = pool
		o.WriteTimeout = time.Minute
	})
	fillPartition(b, brk, 110, 1<<20) // 110 MiB: every get can fill its 100 MB
	bound := brk.opts.MaxBufferedBytes

	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rssBytes(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	clients := attack(b, brk.Addr(), conns, 8)
	// Hold the attack until neither the RSS nor the broker's holdings have
	// grown for two seconds (every answer it will hold is built), at most
	// a minute.
	var lastRSS, lastHeld int64
	steady := time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		rss, held := peak.Load(), brk.Resources().BufferedBytes
		if rss > lastRSS+lastRSS/100 || held > lastHeld {
			lastRSS, lastHeld, steady = rss, held, time.Now()
		}
		if time.Since(steady) > 2*time.Second && held > 0 {
			break
		}
	}
	close(stop)
	<-sampled
	peakHeld := brk.Resources().BufferedBytesPeak

	// A consumer that reads its answers, arriving during the attack.
	start := time.Now()
	consumer := dial(b, brk.Addr())
	consumer.sendCmd(&wire.Get{Topic: "test", Group: "c", Partition: 0, MaxSize: 1 << 20, Opaque: 1})
	consumer.nc.SetReadDeadline(time.Now().Add(5 * time.Minute))
	if cmd, err := consumer.d.Decode(); err != nil {
		b.Fatalf("consumer: %v", err)
	} else if _, ok := cmd.(*wire.Value); !ok {
		b.Fatalf("consumer answered %v", cmd)
	}
	consumerWait := time.Since(start)
	consumer.nc.Close()

	for _, cl := range clients {
		cl.nc.Close()
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r := brk.Resources(); r.Connections == 0 && r.BufferedBytes == 0 {
			break
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	after := rssBytes()

	const mb = 1 << 20
	b.ReportMetric(float64(peak.Load()-base)/mb, "rss-MB")
	b.ReportMetric(float64(peakHeld)/mb, "held-MB")
	if bound < 1<<40 {
		b.ReportMetric(float64(bound)/mb, "bound-MB")
	}
	b.ReportMetric(float64(after-base)/mb, "after-MB")
	b.ReportMetric(consumerWait.Seconds(), "consumer-wait-s")
	b.ReportMetric(0, "ns/op")
}
