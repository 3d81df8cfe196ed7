package georeplicator

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/netproxy"
)

// gwLogLine is a log-like payload of about 200 bytes, different each time.
func gwLogLine(thread, i int) []byte {
	return fmt.Appendf(nil, "2026-12-06T03:%02d:%02d.%03dZ INFO orders-api pod=orders-api-7d9f8-%d trace=%016x user=%d "+
		"path=/api/v1/orders/%d method=POST status=200 latency_ms=%d msg=\"order placed\"",
		i/60%60, i%60, i%1000, thread, uint64(i)*2654435761, 10000+i%977, 500000+i, 3+i%97)
}

// gwProduce runs threads synchronous producers (one put at a time, each on
// its own connection) against addr for d and returns the puts answered
// and their latencies.
func gwProduce(b *testing.B, addr string, threads int, d time.Duration) []time.Duration {
	b.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var failed error
	var wg sync.WaitGroup
	until := time.Now().Add(d)
	for th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			defer nc.Close()
			dec := wire.NewDecoder(bufio.NewReader(nc))
			var mine []time.Duration
			for i := 0; time.Now().Before(until); i++ {
				body := gwLogLine(th, i)
				p := wire.Put{Topic: "logs", Partition: int32(th % 4), Checksum: wire.Checksum(body), Opaque: int32(i + 1), Body: body}
				t0 := time.Now()
				if _, err := nc.Write(p.AppendTo(nil)); err != nil {
					failed = err
					break
				}
				cmd, err := dec.Decode()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
					break
				}
				if r, ok := cmd.(*wire.Result); !ok || r.Code != wire.StatusOK {
					mu.Lock()
					failed = fmt.Errorf("put answered %v", cmd)
					mu.Unlock()
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return lat
}

// BenchmarkGatewayWAN compares producers at a slave site putting straight
// to the master across the WAN (30 ms one way, loopback through netproxy)
// with the same producers putting to their own site's broker, which
// forwards over the gateway link: synchronous puts per second, p50
// latency, WAN bytes per message (both directions) and connections across
// the WAN, for 1 and 64 producer threads, ~200-byte log lines. Path saf is
// the gateway with storeAndForward: puts answered once in hf's outbox;
// drain-s is the time from the producers' end to the outbox's last entry
// confirmed by bj.
func BenchmarkGatewayWAN(b *testing.B) {
	for _, threads := range []int{1, 64} {
		for _, path := range []string{"direct", "gateway", "saf"} {
			b.Run(fmt.Sprintf("%s/threads=%d", path, threads), func(b *testing.B) {
				g := newGatewayRig(b, 30*time.Millisecond, path == "saf")
				addr, px := g.direct.Addr(), g.direct
				if path != "direct" {
					addr, px = g.hf.Addr().String(), g.gateway
				}
				gwProduce(b, addr, threads, 500*time.Millisecond) // warm up: connections, codecs
				up0, down0, conns0 := px.Bytes(netproxy.Upstream), px.Bytes(netproxy.Downstream), px.Accepted()
				b.ResetTimer()
				d := 3 * time.Second
				lat := gwProduce(b, addr, threads, d)
				b.StopTimer()
				if path == "saf" {
					t0 := time.Now()
					for {
						s, _ := g.gw.OutboxStats()
						if s.Entries == 0 {
							break
						}
						if time.Since(t0) > time.Minute {
							b.Fatalf("outbox not drained in a minute: %+v", s)
						}
						time.Sleep(5 * time.Millisecond)
					}
					b.ReportMetric(time.Since(t0).Seconds(), "drain-s")
				}
				n := len(lat)
				slices.Sort(lat)
				wan := px.Bytes(netproxy.Upstream) - up0 + px.Bytes(netproxy.Downstream) - down0
				b.ReportMetric(float64(n)/d.Seconds(), "msgs/s")
				b.ReportMetric(float64(lat[n/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[n*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(wan)/float64(n), "WAN-B/msg")
				b.ReportMetric(float64(px.Accepted()), "WAN-conns")
				b.ReportMetric(float64(px.Accepted()-conns0), "WAN-conns-new")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
