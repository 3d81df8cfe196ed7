package georeplicator

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/netproxy"
)

// safAck is one put a producer at hf was answered accepted-locally for.
type safAck struct {
	id   int64
	body string
	at   time.Time     // answered
	lat  time.Duration // from the put's write to its answer
}

// safProducers runs threads synchronous producers against hf (addr), each
// on its own connection with bodies unique in the run, until stop is
// closed; it returns every acknowledged put and the refusals by code.
func safProducers(b *testing.B, addr string, threads int, stop <-chan struct{}) ([]safAck, map[int]int) {
	b.Helper()
	var mu sync.Mutex
	var acks []safAck
	refused := map[int]int{}
	var failed error
	var wg sync.WaitGroup
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
			var mine []safAck
			myRefused := map[int]int{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					acks = append(acks, mine...)
					for c, n := range myRefused {
						refused[c] += n
					}
					mu.Unlock()
					return
				default:
				}
				body := fmt.Appendf(nil, "%d-%d %s", th, i, gwLogLine(th, i))
				p := wire.Put{Topic: "logs", Partition: int32(th % 4), Checksum: wire.Checksum(body), Opaque: int32(i + 1), Body: body}
				t0 := time.Now()
				if _, err := nc.Write(p.AppendTo(nil)); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				cmd, err := dec.Decode()
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				r, ok := cmd.(*wire.Result)
				if !ok {
					mu.Lock()
					failed = fmt.Errorf("put answered %v", cmd)
					mu.Unlock()
					return
				}
				if r.Code != wire.StatusOK {
					myRefused[r.Code]++
					time.Sleep(10 * time.Millisecond) // a bound reached: the producer backs off
					continue
				}
				id, err := strconv.ParseInt(strings.Fields(string(r.Body))[0], 10, 64)
				if err != nil || !strings.HasSuffix(string(r.Body), "accepted-locally") {
					mu.Lock()
					failed = fmt.Errorf("put answered %q, not accepted locally", r.Body)
					mu.Unlock()
					return
				}
				now := time.Now()
				mine = append(mine, safAck{id: id, body: string(body), at: now, lat: now.Sub(t0)})
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return acks, refused
}

// bjRecords is every record of topic logs at bj: id -> bodies stored under it.
func bjRecords(b testing.TB, st *store.Store) (map[int64][]string, int) {
	b.Helper()
	out := map[int64][]string{}
	n := 0
	for _, pi := range st.Partitions() {
		if pi.Topic != "logs" {
			continue
		}
		for off := pi.Min; off < pi.Max; {
			data, err := st.Read("logs", pi.Partition, off, 1<<20)
			if err != nil {
				b.Fatalf("bj logs-%d at %d: %v", pi.Partition, off, err)
			}
			used := 0
			for used < len(data) {
				rec, k, err := store.DecodeRecord(data[used:])
				if err != nil {
					break
				}
				out[rec.ID] = append(out[rec.ID], string(rec.Body))
				n++
				used += k
			}
			if used == 0 {
				b.Fatalf("bj logs-%d at %d: no whole record in %d bytes", pi.Partition, off, len(data))
			}
			off += int64(used)
		}
	}
	return out, n
}

// BenchmarkStoreAndForwardOutage: synchronous producers at hf write to a
// storeAndForward topic through hf's gateway while the WAN link to bj
// (30 ms one way, 50 Mbit/s each way) goes down for 60 s and comes back
// (reset: connections reset, new ones refused; blackhole: every byte held,
// delivered when the link returns). Reported: puts accepted during
// the outage and their rate, the outbox at the end of it, the time from the
// link's return until every put accepted before it is confirmed by bj
// (drain-s, producers still writing) and this process's CPU meanwhile
// (drain-cores: producers, both brokers and the proxy), and, once the
// outbox is empty and the producers stopped, every acknowledged put
// checked at bj: lost (not there, or another body under its id) and
// duplicated (an id, or a body, stored twice), and records at bj no
// producer was answered for.
//
//	go test -run '^$' -bench BenchmarkStoreAndForwardOutage -benchtime 1x -count 3 -timeout 30m ./georeplicator/
func BenchmarkStoreAndForwardOutage(b *testing.B) {
	for _, kind := range []string{"reset", "blackhole"} {
		b.Run(kind, func(b *testing.B) { safOutage(b, kind) })
	}
}

// safOutage is one run of BenchmarkStoreAndForwardOutage: kind reset
// resets the link's connections and refuses new ones; blackhole holds
// every byte without closing anything (a path that drops packets), and
// delivers what it held when it returns.
func safOutage(b *testing.B, kind string) {
	const threads = 4
	outage := 60 * time.Second
	g := newGatewayRig(b, 30*time.Millisecond, true)
	g.gateway.SetRate(50e6 / 8)
	stop := make(chan struct{})
	type result struct {
		acks    []safAck
		refused map[int]int
	}
	done := make(chan result, 1)
	go func() {
		a, r := safProducers(b, g.hf.Addr().String(), threads, stop)
		done <- result{a, r}
	}()
	time.Sleep(3 * time.Second)
	tCut := time.Now()
	if kind == "reset" {
		g.gateway.SetRefuse(true)
		g.gateway.CutAll()
	} else {
		g.gateway.SetStall(true)
	}
	time.Sleep(outage)
	peak := g.ob.Stats()
	tUp := time.Now()
	cpuUp := cpuTime()
	g.gateway.SetRefuse(false)
	g.gateway.SetStall(false)
	var tDrained time.Time
	for {
		s := g.ob.Stats()
		if s.Entries == 0 || s.Oldest.After(tUp) {
			tDrained = time.Now()
			b.ReportMetric((cpuTime()-cpuUp).Seconds()/tDrained.Sub(tUp).Seconds(), "drain-cores") // this process: producers, both brokers, the proxy
			break
		}
		if time.Since(tUp) > 5*time.Minute {
			b.Fatalf("the outage's puts not drained in 5 minutes: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // producers keep writing after the drain
	close(stop)
	res := <-done
	t0 := time.Now()
	for g.ob.Stats().Entries > 0 {
		if time.Since(t0) > 5*time.Minute {
			b.Fatalf("outbox not empty 5 minutes after the producers stopped: %+v", g.ob.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tail := time.Since(t0)

	var latOut, latDrain []time.Duration
	for _, a := range res.acks {
		switch {
		case !a.at.Before(tCut) && a.at.Before(tUp):
			latOut = append(latOut, a.lat)
		case !a.at.Before(tUp) && a.at.Before(tDrained):
			latDrain = append(latDrain, a.lat)
		}
	}
	during := len(latOut)
	pct := func(l []time.Duration, q int) float64 {
		if len(l) == 0 {
			return 0
		}
		slices.Sort(l)
		return float64(l[len(l)*q/100].Microseconds()) / 1000
	}
	atBJ, records := bjRecords(b, g.bjStore)
	lost, dupIDs := 0, 0
	acked := make(map[int64]bool, len(res.acks))
	for _, a := range res.acks {
		acked[a.id] = true
		bodies := atBJ[a.id]
		switch {
		case len(bodies) == 0 || bodies[0] != a.body:
			lost++
		case len(bodies) > 1:
			dupIDs++
		}
	}
	bodiesSeen := make(map[string]int, records)
	dupBodies, extra := 0, 0
	for id, bodies := range atBJ {
		if !acked[id] {
			extra += len(bodies)
		}
		for _, body := range bodies {
			if bodiesSeen[body]++; bodiesSeen[body] == 2 {
				dupBodies++
			}
		}
	}
	refused := 0
	for _, n := range res.refused {
		refused += n
	}
	b.ReportMetric(float64(during), "accepted-during-outage")
	b.ReportMetric(float64(during)/outage.Seconds(), "puts/s-during-outage")
	b.ReportMetric(pct(latOut, 50), "outage-p50-ms")
	b.ReportMetric(pct(latOut, 99), "outage-p99-ms")
	b.ReportMetric(float64(len(latDrain))/tDrained.Sub(tUp).Seconds(), "puts/s-during-drain")
	b.ReportMetric(pct(latDrain, 99), "drain-p99-ms")
	b.ReportMetric(float64(len(res.acks)), "accepted-total")
	b.ReportMetric(float64(peak.Entries), "outbox-entries-at-return")
	b.ReportMetric(float64(peak.Bytes)/(1<<20), "outbox-MiB-at-return")
	b.ReportMetric(tDrained.Sub(tUp).Seconds(), "drain-s")
	b.ReportMetric(tail.Seconds(), "tail-drain-s")
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(dupIDs+dupBodies), "duplicated")
	b.ReportMetric(float64(extra), "unacked-at-bj")
	b.ReportMetric(float64(g.gw.Stats().Deduplicated), "found-at-bj")
	b.ReportMetric(0, "ns/op")
	if lost+dupIDs+dupBodies+extra > 0 {
		b.Errorf("lost %d, duplicated %d ids and %d bodies, %d records at bj nobody was answered for", lost, dupIDs, dupBodies, extra)
	}
}

// asyncProducers runs conns asynchronous producers against addr (each
// keeps window puts in flight on its own connection, as MetaQ's
// asynchronous producer does) for d and returns the puts answered OK and
// not OK.
func asyncProducers(b *testing.B, addr string, conns, window int, d time.Duration) (ok, failed int64) {
	b.Helper()
	var okN, failN atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	until := time.Now().Add(d)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
				return
			}
			defer nc.Close()
			slots := make(chan struct{}, window)
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				dec := wire.NewDecoder(bufio.NewReader(nc))
				for {
					cmd, err := dec.Decode()
					if err != nil {
						return
					}
					if r, isRes := cmd.(*wire.Result); isRes && r.Code == wire.StatusOK {
						okN.Add(1)
					} else {
						failN.Add(1)
					}
					<-slots
				}
			}()
			w := bufio.NewWriterSize(nc, 64<<10)
			for i := 0; time.Now().Before(until); i++ {
				select {
				case slots <- struct{}{}:
				case <-readerDone:
					return
				}
				body := gwLogLine(c, i)
				p := wire.Put{Topic: "logs", Partition: int32(c % 4), Checksum: wire.Checksum(body), Opaque: int32(i + 1), Body: body}
				w.Write(p.AppendTo(nil))
				if len(slots) == window || i%64 == 63 {
					if err := w.Flush(); err != nil {
						return
					}
				}
			}
			w.Flush()
			// The answers still to come are not counted: the rate is
			// over d.
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return okN.Load(), failN.Load()
}

// BenchmarkGatewayLinkShare: asynchronous producers at hf (16 or 48
// connections, 512 puts in flight each) write ~200-byte log lines through hf's gateway
// to bj over a link capped at capacity bytes per second each way (the
// in-process proxy's bandwidth cap, 30 ms one way): the forwarded rate,
// the link's bytes per message and the share of the cap the gateway's
// upstream direction used over 5 s after a 1 s warm-up.
//
//	go test -run '^$' -bench BenchmarkGatewayLinkShare -benchtime 1x -count 3 ./georeplicator/
func BenchmarkGatewayLinkShare(b *testing.B) {
	type shape struct {
		capacity      int64
		conns, window int
	}
	// 16 x 512 puts in flight at ~19.5 link bytes each is ~160 KB, below
	// the 4 MiB/s link's bandwidth-delay product (2 x 30 ms: ~250 KB):
	// those producers alone cannot fill it, 48 connections can. One
	// connection with 4096 in flight fills 256 KiB/s with ~0.2 cores: it
	// shows the pipeline's depth per producer connection when the
	// machine's cores are taken.
	for _, sh := range []shape{{256 << 10, 16, 512}, {256 << 10, 1, 4096}, {1 << 20, 16, 512}, {4 << 20, 16, 512}, {4 << 20, 48, 512}} {
		capacity, conns, window := sh.capacity, sh.conns, sh.window
		b.Run(fmt.Sprintf("cap=%dKiBps/conns=%dx%d", capacity>>10, conns, window), func(b *testing.B) {
			g := newGatewayRig(b, 30*time.Millisecond, false)
			g.gateway.SetRate(capacity)
			addr := g.hf.Addr().String()
			asyncProducers(b, addr, conns, window, time.Second) // warm up: the link, its codecs
			up0, down0 := g.gateway.Bytes(netproxy.Upstream), g.gateway.Bytes(netproxy.Downstream)
			st0 := g.gw.Stats()
			t0, cpu0 := time.Now(), cpuTime()
			d := 5 * time.Second
			b.ResetTimer()
			ok, failed := asyncProducers(b, addr, conns, window, d)
			b.StopTimer()
			elapsed := time.Since(t0).Seconds()
			cores := (cpuTime() - cpu0).Seconds() / elapsed
			up := g.gateway.Bytes(netproxy.Upstream) - up0
			down := g.gateway.Bytes(netproxy.Downstream) - down0
			st := g.gw.Stats()
			fwd := st.Forwarded - st0.Forwarded
			b.ReportMetric(float64(ok)/elapsed, "msgs/s")
			b.ReportMetric(float64(failed), "failed")
			b.ReportMetric(float64(up)/float64(max(fwd, 1)), "up-B/msg")
			b.ReportMetric(float64(up)/elapsed/float64(capacity)*100, "up-share-%")
			b.ReportMetric(float64(down)/elapsed/float64(capacity)*100, "down-share-%")
			b.ReportMetric(float64(g.gateway.Accepted()), "WAN-conns")
			b.ReportMetric(cores, "cpu-cores") // producers, both brokers and the proxy: one process
			// Steadier than msgs/s on a shared machine: the process gets what
			// the other sessions leave of the two cores.
			b.ReportMetric(cores*elapsed*1e6/float64(max(ok, 1)), "cpu-us/msg")
			b.ReportMetric(0, "ns/op")
		})
	}
}
