package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"metaq/broker/wire"
)

// putN stores n messages through the broker at addr, round robin over the
// partitions of o, and waits for every acknowledgement.
func putN(t *testing.T, o options, addr string, n int) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body := make([]byte, o.size)
	var buf []byte
	for i := range n {
		buf = (&wire.Put{Topic: o.topic, Partition: int32(i % o.partitions), Checksum: wire.Checksum(body), Body: body, Opaque: int32(i)}).AppendTo(buf)
	}
	if _, err := nc.Write(buf); err != nil {
		t.Fatal(err)
	}
	d := wire.NewDecoder(bufio.NewReader(nc))
	for range n {
		cmd, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := cmd.(*wire.Result); !ok || !r.OK() {
			t.Fatalf("put answered %v", cmd)
		}
	}
}

// readAll runs run for readers readers until they have counted want
// messages together (or 10 s pass), then stops them and returns the count.
func readAll(t *testing.T, readers int, want int64, run func(ctx context.Context, i int, st *stats) error) int64 {
	t.Helper()
	st := &stats{}
	st.start()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, i, st); err != nil && ctx.Err() == nil {
				t.Errorf("reader %d: %v", i, err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for st.consumed.Load() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// A little longer, so a reader that would deliver more than want has
	// the time to.
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	return st.consumed.Load()
}

// TestGroupsDeliverEveryMessageToEachGroup: -groups N delivers every
// message N times (each group reads every partition), while -consumers N
// splits the partitions within one group and delivers each message once.
func TestGroupsDeliverEveryMessageToEachGroup(t *testing.T) {
	o := shortLoad(0)
	o.partitions = 4
	addr, stop, err := startBroker(o, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n = 200
	putN(t, o, addr, n)

	og := o
	og.groups = 2
	if got := readAll(t, og.groups, 2*n, func(ctx context.Context, g int, st *stats) error {
		return consumeGroup(ctx, og, addr, g, st)
	}); got != 2*n {
		t.Errorf("2 groups delivered %d messages, want %d (each of %d to each group)", got, 2*n, n)
	}
	oc := o
	oc.consumers = 2
	if got := readAll(t, oc.consumers, n, func(ctx context.Context, i int, st *stats) error {
		return consume(ctx, oc, addr, i, st)
	}); got != n {
		t.Errorf("2 consumers of one group delivered %d messages, want %d (each once)", got, n)
	}
}

// TestGroupsRejectedWherePeerCannot: a peer without group support refuses
// -groups instead of running without readers.
func TestGroupsRejectedWherePeerCannot(t *testing.T) {
	o := shortLoad(0)
	o.groups = 1
	tg := target{name: "peer", produce: func(context.Context, int, *stats) error { return nil }}
	if _, err := runLoad(o, tg); err == nil {
		t.Error("runLoad ran -groups against a target without group support")
	}
}

// TestStatsShardsMerge: the producers' own shards and the shared counts
// add up in stop, and only what was observed between start and stop counts.
func TestStatsShardsMerge(t *testing.T) {
	st := &stats{}
	a, b := st.newShard(), st.newShard()
	st.observePutIn(a, time.Millisecond, true) // before start: not counted
	st.start()
	st.observePutIn(a, 2*time.Millisecond, true)
	st.observePutIn(a, 0, false)
	st.observePutIn(b, 3*time.Millisecond, true)
	st.observePut(4*time.Millisecond, true)
	r := st.stop()
	st.observePutIn(b, 5*time.Millisecond, true) // after stop: not counted
	slices.Sort(r.lat)
	if r.puts != 3 || r.failed != 1 || !slices.Equal(r.lat, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}) {
		t.Fatalf("merged puts %d failed %d latencies %v, want 3, 1, [2ms 3ms 4ms]", r.puts, r.failed, r.lat)
	}
}

// chunkReader returns what it holds a few bytes at a time, sizes varying,
// as a socket does when answers arrive in pieces.
type chunkReader struct {
	b []byte
	k int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	r.k++
	n := min(len(p), len(r.b), 1+(r.k*7919)%5000)
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// TestFrameReaderMatchesWireDecoder: the consumers' in-place frame reader
// returns the same answers as broker/wire's decoder for a stream of values
// and results arriving in pieces, with bodies that end the buffer, do not
// fit behind what was read, and are longer than the whole buffer.
func TestFrameReaderMatchesWireDecoder(t *testing.T) {
	var stream []byte
	for i := range 200 {
		switch i % 5 {
		case 0:
			stream = wire.AppendResult(stream, 404, "Could not find message at position "+strconv.Itoa(i), int32(i))
		case 1:
			stream = wire.AppendResult(stream, 301, strconv.Itoa(i*1000), int32(-i))
		default:
			data := make([]byte, (i*4093)%70000+i)
			for k := range data {
				data[k] = byte(k * i)
			}
			stream = (&wire.Value{Data: data, Opaque: int32(i)}).AppendTo(stream)
		}
	}
	want := wire.NewDecoder(bufio.NewReader(bytes.NewReader(stream)))
	fr := newFrameReader(&chunkReader{b: stream}, 64<<10)
	for n := 0; ; n++ {
		f, err := fr.next()
		w, werr := want.Decode()
		if werr == io.EOF {
			if err != io.EOF {
				t.Fatalf("frame %d: after the last answer got %+v, %v; want EOF", n, f, err)
			}
			break
		}
		if werr != nil || err != nil {
			t.Fatalf("frame %d: %v / %v", n, err, werr)
		}
		switch w := w.(type) {
		case *wire.Value:
			if !f.value || f.opaque != w.Opaque || !bytes.Equal(f.body, w.Data) {
				t.Fatalf("frame %d: got value=%v opaque %d, %d bytes; want value opaque %d, %d bytes", n, f.value, f.opaque, len(f.body), w.Opaque, len(w.Data))
			}
		case *wire.Result:
			if f.value || f.code != w.Code || f.opaque != w.Opaque || string(f.body) != string(w.Body) {
				t.Fatalf("frame %d: got %d %q opaque %d; want %d %q opaque %d", n, f.code, f.body, f.opaque, w.Code, w.Body, w.Opaque)
			}
		default:
			t.Fatalf("frame %d: decoder gave %T", n, w)
		}
	}
	// A frame cut short is an error, not a silent end.
	fr = newFrameReader(&chunkReader{b: stream[:len(stream)-3]}, 64<<10)
	var err error
	for err == nil {
		_, err = fr.next()
	}
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("stream cut inside a frame: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

// TestPacer: a paced producer is never ahead of its rate (put n goes no
// sooner than n/rate after the start) and may send at once what is due.
func TestPacer(t *testing.T) {
	if p := newPacer(0); p != nil || !p.may() || p.wait(context.Background()) != nil {
		t.Fatal("no rate: every put may go at once")
	}
	p := newPacer(1000)
	p.start = time.Now().Add(-time.Second) // a second ago: about 1,000 puts due
	for range 900 {
		if !p.may() {
			t.Fatalf("put %d of a second's 1,000 held back", p.n)
		}
		p.sent()
	}
	p.n = 3000 // 2 s ahead of the rate
	if p.may() {
		t.Fatal("a put 2 s ahead of the rate may go")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.wait(ctx); err == nil {
		t.Fatal("wait for a put 2 s ahead returned at once with no error")
	}
	if got, want := p.due(3000).Sub(p.start), 3*time.Second; got != want {
		t.Fatalf("put 3000 at 1,000/s is due %v after the start, want %v", got, want)
	}
	// Held back 1 s: no more than pacerBurst's puts may go at once after.
	p = newPacer(1000)
	p.start = time.Now().Add(-time.Second)
	if err := p.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	burst := 0
	for p.may() && burst < 1000 {
		p.sent()
		burst++
	}
	if max := int(pacerBurst/time.Millisecond) + 100; burst > max { // 100 ms of slack for a descheduled test
		t.Fatalf("%d puts went at once after a 1 s lag, want at most %d (pacerBurst at 1,000/s)", burst, max)
	}
}

// TestRateRejectedWherePeerCannot: -rate applies to the MetaQ producers
// only; a peer without it refuses the flag.
func TestRateRejectedWherePeerCannot(t *testing.T) {
	o := shortLoad(0)
	o.rate = 1000
	tg := target{name: "peer", produce: func(context.Context, int, *stats) error { return nil }}
	if _, err := runLoad(o, tg); err == nil {
		t.Error("runLoad ran -rate against a target that cannot pace")
	}
}

// TestFetchDelaysOnlyEmptyPartitions: a consumer asks a partition whose
// last answer had records again at once, and one whose last answer was
// empty (404) only after a delay that grows with each empty answer in a
// row (nextMissDelay), as a MetaQ Java consumer delays a partition after a
// get miss. A server on a real socket answers partition 0 with a record
// every time and the others with 404, and takes the time of every get it
// receives: between an empty partition's k-th get and the next at least
// the k-th delay passes (a busy machine only makes it longer), and
// partition 0 is asked at least as often as any other.
func TestFetchDelaysOnlyEmptyPartitions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const parts = 4
	var mu sync.Mutex
	asked := make([][]time.Time, parts)
	served := make(chan struct{})
	go func() {
		defer close(served)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		d := wire.NewDecoder(bufio.NewReader(nc))
		rec := make([]byte, 28) // a record: length, checksum, id, flag 1 (no send time), 8 bytes
		rec[3], rec[19] = 8, 1
		for {
			cmd, err := d.Decode()
			if err != nil {
				return
			}
			g, ok := cmd.(*wire.Get)
			if !ok || g.Partition < 0 || g.Partition >= parts {
				t.Errorf("unexpected request %v", cmd)
				return
			}
			mu.Lock()
			asked[g.Partition] = append(asked[g.Partition], time.Now())
			mu.Unlock()
			var out []byte
			if g.Partition == 0 {
				out = append(wire.AppendValueHeader(out, len(rec), g.Opaque), rec...)
			} else {
				out = wire.AppendResult(out, 404, "Could not find message at position "+strconv.FormatInt(g.Offset, 10), g.Opaque)
			}
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}()
	o := shortLoad(0)
	o.partitions = parts
	o.maxDelayFetch = 20 * time.Millisecond
	st := &stats{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consumeGroup(ctx, o, ln.Addr().String(), 0, st) }()
	for {
		mu.Lock()
		n := len(asked[1])
		mu.Unlock()
		if n >= 14 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	ln.Close()
	<-served
	mu.Lock()
	defer mu.Unlock()
	for p := 1; p < parts; p++ {
		var delay time.Duration
		for i := 1; i < len(asked[p]); i++ {
			delay = nextMissDelay(delay, o.maxDelayFetch)
			if gap := asked[p][i].Sub(asked[p][i-1]); gap < delay {
				t.Fatalf("partition %d (empty) asked again %v after its empty answer %d in a row, before its delay %v", p, gap, i, delay)
			}
		}
		if len(asked[0]) < len(asked[p]) {
			t.Fatalf("partition 0 (records) asked %d times, empty partition %d %d times", len(asked[0]), p, len(asked[p]))
		}
	}
	t.Logf("gets: partition 0 %d, the empty ones %d %d %d", len(asked[0]), len(asked[1]), len(asked[2]), len(asked[3]))
}

// TestNextMissDelay: the delays after empty answers in a row are a MetaQ
// Java consumer's with maxDelayFetchTimeInMills (ConsumerConfig's default
// 5,000 ms: 500 ms, 1 s, ... up to 5 s and no more); a zero or tiny
// maximum never gives less than minMissDelay.
func TestNextMissDelay(t *testing.T) {
	var got []time.Duration
	var d time.Duration
	for range 12 {
		d = nextMissDelay(d, 5*time.Second)
		got = append(got, d)
	}
	want := []time.Duration{500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 5000, 5000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delays after empty answers in a row: %v, want %v", got, want)
	}
	for _, m := range []time.Duration{0, 5 * time.Microsecond} {
		if d := nextMissDelay(0, m); d != minMissDelay {
			t.Errorf("nextMissDelay(0, %v) = %v, want %v", m, d, minMissDelay)
		}
	}
}

// BenchmarkParseFrame: decoding one answer's header allocates nothing.
func BenchmarkParseFrame(b *testing.B) {
	v := (&wire.Value{Data: make([]byte, 100), Opaque: 123456}).AppendTo(nil)
	r := wire.AppendResult(nil, 404, "Could not find message at position 1234567", 99)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := parseFrame(v); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if _, _, ok, err := parseFrame(r); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
