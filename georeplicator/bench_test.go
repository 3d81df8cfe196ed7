package georeplicator

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"metaq/broker/store"
)

var (
	benchBacklogMB = flag.Int("wan.backlog", 1024, "MB of log-like backlog for BenchmarkWANCatchUp")
	benchLagFor    = flag.Duration("wan.lagfor", 10*time.Second, "how long BenchmarkWANLag produces")
	benchLinkMbit  = flag.Int("wan.mbit", 50, "emulated link rate in Mbit/s")
)

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// jsonFrame is a data payload of log-like JSON records of about n bytes.
func jsonFrame(n int) []byte {
	r := rand.New(rand.NewPCG(7, 7))
	var es []store.LogEntry
	size, seq := 0, 0
	for size < n {
		var recs []byte
		for j := 0; j < 8; j++ {
			seq++
			recs = append(recs, makeRecord(int64(seq), logLine(r, seq))...)
		}
		es = append(es, store.LogEntry{Topic: "logs", Partition: seq % 4, Offset: int64(size), Records: recs, Time: time.Now()})
		size += len(recs)
	}
	return encodeBatch(nil, 0, int64(size), 0, es)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// BenchmarkCodec measures one core compressing and decompressing a 256 KiB
// frame payload per codec: MB/s (from SetBytes), the wire/raw ratio and CPU
// seconds per GB of payload.
func BenchmarkCodec(b *testing.B) {
	data := []struct {
		name string
		raw  []byte
	}{{"json", jsonFrame(256 << 10)}, {"random", randomBytes(256<<10, 3)}}
	for _, c := range []Codec{CodecZstd, CodecS2, CodecNone} {
		for _, d := range data {
			wire, _ := compress(c, nil, d.raw)
			b.Run(c.String()+"/"+d.name+"/compress", func(b *testing.B) {
				b.SetBytes(int64(len(d.raw)))
				b.ReportAllocs()
				var w []byte
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					w, _ = compress(c, w, d.raw)
				}
				cpu := cpuTime() - cpu0
				b.ReportMetric(float64(len(wire))/float64(len(d.raw)), "wire/raw")
				b.ReportMetric(cpu.Seconds()/(float64(b.N)*float64(len(d.raw))/1e9), "cpu-s/GB")
			})
			b.Run(c.String()+"/"+d.name+"/decompress", func(b *testing.B) {
				dec, _ := newDecoder()
				defer dec.Close()
				b.SetBytes(int64(len(d.raw)))
				b.ReportAllocs()
				var out []byte
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					var err error
					if out, err = dec.decompress(c, out, wire, len(d.raw)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((cpuTime()-cpu0).Seconds()/(float64(b.N)*float64(len(d.raw))/1e9), "cpu-s/GB")
			})
		}
	}
}

// preload appends about mb MB to the master in 64 KiB batches: log-like
// JSON or random bytes in 1 KiB messages.
func preload(b testing.TB, g *rig, mb int, random bool) int64 {
	r := rand.New(rand.NewPCG(uint64(mb), 9))
	var total int64
	seq := 0
	parts := defaultParts()
	for total < int64(mb)<<20 {
		var bodies [][]byte
		size := 0
		for size < 64<<10 {
			var body []byte
			if random {
				body = randomBytes(1024, uint64(seq))
			} else {
				body = logLine(r, seq)
			}
			seq++
			bodies = append(bodies, body)
			size += len(body) + recordHeaderLen
		}
		k := parts[seq%len(parts)]
		g.put(k.Topic, k.Partition, bodies...)
		total += int64(size)
	}
	return total
}

// waitApplied waits until the slave has applied the master's whole log,
// calling progress every second.
func waitApplied(b testing.TB, g *rig, timeout time.Duration, progress func(el time.Duration)) {
	_, durable := g.master.LogBounds()
	start := time.Now()
	last := start
	for g.rc.Status().AppliedPos < durable {
		if time.Since(start) > timeout {
			b.Fatalf("slave not caught up after %v: %+v", timeout, g.rc.Status())
		}
		if progress != nil && time.Since(last) >= time.Second {
			last = time.Now()
			progress(time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkWANThroughput ships a backlog over the emulated link (30 ms each
// way, 1% loss, 50 Mbit/s) per codec and data kind. Run with -benchtime=1x.
func BenchmarkWANThroughput(b *testing.B) {
	w := setupWAN(b, 30*time.Millisecond, 0.01, fmt.Sprintf("%dmbit", *benchLinkMbit))
	link := float64(*benchLinkMbit) * 1e6 / 8
	for _, d := range []struct {
		name   string
		mb     int
		random bool
	}{{"json", 96, false}, {"random", 16, true}} {
		for _, m := range []Mode{ModeZstd, ModeS2, ModeNone, ModeAuto} {
			b.Run(d.name+"/"+string(m), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					g := newWANRig(b, w)
					g.rcOpts.Compression = m
					payload := preload(b, g, d.mb, d.random)
					g.startMaster()
					cpu0 := cpuTime()
					start := time.Now()
					g.startSlaveAt(g.sh.Addr())
					waitApplied(b, g, 5*time.Minute, nil)
					el := time.Since(start)
					cpu := cpuTime() - cpu0
					l := g.sh.Lag()[0]
					b.ReportMetric(float64(payload)/el.Seconds()/1e6, "payload-MB/s")
					b.ReportMetric(float64(payload)/el.Seconds()/link, "x-link")
					b.ReportMetric(float64(l.WireBytes)/el.Seconds()/link, "wire/link")
					b.ReportMetric(float64(l.WireBytes)/float64(l.RawBytes), "wire/raw")
					b.ReportMetric(cpu.Seconds()/(float64(payload)/1e9), "cpu-s/GB")
					b.ReportMetric(float64(l.RTT)/1e6, "rtt-ms")
					g.closeAll()
				}
			})
		}
	}
}

// BenchmarkWANCatchUp measures how fast a slave catches up a backlog of
// -wan.backlog MB of log-like data, printing a progress line every second.
func BenchmarkWANCatchUp(b *testing.B) {
	w := setupWAN(b, 30*time.Millisecond, 0.01, fmt.Sprintf("%dmbit", *benchLinkMbit))
	link := float64(*benchLinkMbit) * 1e6 / 8
	for i := 0; i < b.N; i++ {
		g := newWANRig(b, w)
		t0 := time.Now()
		payload := preload(b, g, *benchBacklogMB, false)
		fmt.Fprintf(os.Stderr, "catch-up: backlog of %d MB written in %v\n", payload>>20, time.Since(t0).Round(time.Millisecond))
		g.startMaster()
		start := time.Now()
		g.startSlaveAt(g.sh.Addr())
		var prev ReceiverStatus
		var prevAt time.Duration
		waitApplied(b, g, 30*time.Minute, func(el time.Duration) {
			st := g.rc.Status()
			_, durable := g.master.LogBounds()
			d := (el - prevAt).Seconds()
			fmt.Fprintf(os.Stderr, "catch-up: %5.1fs applied %5.1f%%  last second: payload %6.1f MB/s, wire %5.1f Mbit/s (%3.0f%% of link)  overall: wire %3.0f%% of link\n",
				el.Seconds(), 100*float64(st.AppliedPos)/float64(durable), float64(st.RawBytes-prev.RawBytes)/d/1e6,
				float64(st.WireBytes-prev.WireBytes)*8/d/1e6, 100*float64(st.WireBytes-prev.WireBytes)/d/link,
				100*float64(st.WireBytes)/el.Seconds()/link)
			prev, prevAt = st, el
		})
		el := time.Since(start)
		st := g.rc.Status()
		fmt.Fprintf(os.Stderr, "catch-up: done %d MB in %v: payload %.1f MB/s, wire %.1f Mbit/s (%.0f%% of link)\n",
			payload>>20, el.Round(time.Millisecond), float64(payload)/el.Seconds()/1e6,
			float64(st.WireBytes)*8/el.Seconds()/1e6, 100*float64(st.WireBytes)/el.Seconds()/link)
		b.ReportMetric(float64(payload)/el.Seconds()/1e6, "payload-MB/s")
		b.ReportMetric(float64(st.WireBytes)/el.Seconds()/link, "wire/link")
		b.ReportMetric(float64(payload)/el.Seconds()/link, "x-link")
		g.closeAll()
	}
}

// BenchmarkWANLag produces at half the link's capacity (random 1 KiB
// messages, so wire bytes = payload bytes) and reports the replication lag
// (append on the master to apply on the slave) p50/p99/max.
func BenchmarkWANLag(b *testing.B) {
	w := setupWAN(b, 30*time.Millisecond, 0.01, fmt.Sprintf("%dmbit", *benchLinkMbit))
	link := float64(*benchLinkMbit) * 1e6 / 8
	for i := 0; i < b.N; i++ {
		g := newWANRig(b, w)
		g.rcOpts.Compression = ModeZstd
		var mu sync.Mutex
		var lags []time.Duration
		g.rcOpts.applyHook = func(e store.LogEntry, at time.Time) {
			mu.Lock()
			lags = append(lags, at.Sub(e.Time))
			mu.Unlock()
		}
		g.startMaster()
		g.startSlaveAt(g.sh.Addr())
		// Produce link/2 bytes per second in 10 ms ticks.
		perTick := int(link / 2 / 100)
		ctx, cancel := context.WithTimeout(context.Background(), *benchLagFor)
		tick := time.NewTicker(10 * time.Millisecond)
		seq := 0
		var produced int64
		for ctx.Err() == nil {
			<-tick.C
			var bodies [][]byte
			for size := 0; size < perTick; size += 1024 + recordHeaderLen {
				seq++
				bodies = append(bodies, randomBytes(1024, uint64(seq)))
			}
			k := defaultParts()[seq%6]
			g.put(k.Topic, k.Partition, bodies...)
			produced += int64(len(bodies)) * 1044
		}
		tick.Stop()
		cancel()
		waitApplied(b, g, time.Minute, nil)
		mu.Lock()
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		p := func(q float64) float64 { return float64(lags[int(q*float64(len(lags)-1))]) / 1e6 }
		l := g.sh.Lag()[0]
		b.ReportMetric(p(0.5), "lag-p50-ms")
		b.ReportMetric(p(0.99), "lag-p99-ms")
		b.ReportMetric(float64(lags[len(lags)-1])/1e6, "lag-max-ms")
		b.ReportMetric(float64(produced)/benchLagFor.Seconds()/link, "load/link")
		b.ReportMetric(float64(l.RTT)/1e6, "rtt-ms")
		fmt.Fprintf(os.Stderr, "lag: %d entries, p50 %.1f ms, p99 %.1f ms, max %.1f ms, load %.0f%% of link, rtt %v\n",
			len(lags), p(0.5), p(0.99), float64(lags[len(lags)-1])/1e6, 100*float64(produced)/benchLagFor.Seconds()/link, l.RTT)
		mu.Unlock()
		g.closeAll()
	}
}

// BenchmarkWANRawTCP is the baseline: one plain TCP stream (BBR) pushing 32
// MB of bytes through the same emulated link, no replication at all. It shows
// what the link and the userspace relay deliver on this machine right now.
func BenchmarkWANRawTCP(b *testing.B) {
	w := setupWAN(b, 30*time.Millisecond, 0.01, fmt.Sprintf("%dmbit", *benchLinkMbit))
	link := float64(*benchLinkMbit) * 1e6 / 8
	const total = 32 << 20
	for i := 0; i < b.N; i++ {
		ln := w.listen(b)
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			setCongestion(c, "bbr")
			buf := randomBytes(256<<10, 5)
			for sent := 0; sent < total; sent += len(buf) {
				if _, err := c.Write(buf); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		c, err := w.dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		buf := make([]byte, 256<<10)
		got := 0
		for got < total {
			n, err := c.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		el := time.Since(start)
		c.Close()
		ln.Close()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(total)/el.Seconds()/1e6, "MB/s")
		b.ReportMetric(float64(total)/el.Seconds()/link, "goodput/link")
	}
}
