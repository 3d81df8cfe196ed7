// Command metaq-bench drives a MetaQ-protocol broker with pipelined
// producer connections and fetching consumers and reports throughput and
// put latency.
//
// By default it starts a broker in process over a fresh temporary data
// directory (group commit: every acknowledged put is fsynced); -addr
// targets a running broker instead.
//
//	metaq-bench -producers 4 -inflight 256 -size 1024 -duration 10s -consumers 2
//
// Two kinds of readers: -consumers N are N connections of one consumer
// group that split the partitions between them (each message is delivered
// once; with more connections than partitions each reads every partition),
// and -groups N are N consumer groups of one connection each, every one
// reading every partition (each message is delivered N times, as when N
// applications subscribe to a topic). The two can be combined.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/cli"
	"metaq/internal/clock"
)

type options struct {
	addr       string
	producers  int
	consumers  int
	groups     int
	inflight   int
	size       int
	duration   time.Duration
	warmup     time.Duration
	topic      string
	partitions int
	dataDir    string
	unflush    int
	rate       int
	// maxDelayFetch is a MetaQ Java consumer's maxDelayFetchTimeInMills:
	// after an empty answer a partition waits a tenth of it more than
	// after the one before, up to all of it (nextMissDelay).
	maxDelayFetch time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "", "broker address host:port; empty starts a broker in process on a temp dir")
	flag.IntVar(&o.producers, "producers", 4, "producer connections")
	flag.IntVar(&o.consumers, "consumers", 0, "consumer connections of one group, splitting the partitions (each fetches its partitions round robin)")
	flag.IntVar(&o.groups, "groups", 0, "consumer groups of one connection each, every one reading every partition (each message delivered -groups times; MetaQ protocol only)")
	flag.IntVar(&o.inflight, "inflight", 128, "pipelined puts in flight per producer connection")
	flag.IntVar(&o.size, "size", 1024, "message body size in bytes")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured run time")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured warm-up before the run")
	flag.StringVar(&o.topic, "topic", "bench", "topic")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions (in-process broker; puts go round robin)")
	flag.StringVar(&o.dataDir, "data", "", "data dir of the in-process broker (default: a temp dir, removed after)")
	flag.IntVar(&o.rate, "rate", 0, "produce at most this many msgs/s in all, spread over the producers (MetaQ protocol only; 0: as fast as the broker answers)")
	flag.DurationVar(&o.maxDelayFetch, "max-delay-fetch", 5*time.Second, "consumers: a MetaQ Java consumer's maxDelayFetchTimeInMills (its default 5s): a partition whose get was empty is asked again after a tenth of it, the next empty answer in a row adds another tenth, up to all of it; an answer with records asks again at once")
	flag.IntVar(&o.unflush, "unflush-threshold", 0, "in-process broker unflushThreshold (0 = group commit, fsync before ack)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile (client and in-process broker) to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile (client and in-process broker, whole run) to this file at the end")
	flag.CommandLine.Init("metaq-bench", flag.ContinueOnError)
	args := os.Args[1:]
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"-h"}
	}
	if err := cli.Parse(flag.CommandLine, args, false, os.Stdout, os.Stderr); err != nil {
		os.Exit(cli.ExitCode(err))
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "metaq-bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := dispatch(o); err != nil {
		fmt.Fprintln(os.Stderr, "metaq-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			fmt.Fprintln(os.Stderr, "metaq-bench:", err)
			os.Exit(1)
		}
	}
}

// writeHeapProfile writes the allocation profile (alloc_space and
// alloc_objects count everything allocated since the start) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memory profile %s: %w", path, err)
	}
	return f.Close()
}

func startBroker(o options, listen string) (string, func(), error) {
	dir := o.dataDir
	cleanup := func() {}
	if dir == "" {
		d, err := os.MkdirTemp("", "metaq-bench-")
		if err != nil {
			return "", nil, err
		}
		dir = d
		cleanup = func() { os.RemoveAll(d) }
	}
	ini := fmt.Sprintf(`[system]
brokerId=0
hostName=127.0.0.1
serverPort=8123
numPartitions=1
unflushThreshold=%d
unflushInterval=1000
maxSegmentSize=1073741824
maxTransferSize=1048576
dataPath=%s

[zookeeper]
zk.zkEnable=false

[topic=%s]
numPartitions=%d
`, o.unflush, dir, o.topic, o.partitions)
	cfg, _, err := config.Parse("bench.ini", []byte(ini))
	if err != nil {
		cleanup()
		return "", nil, err
	}
	st, err := store.Open(store.Options{Dir: dir, BrokerID: 0})
	if err != nil {
		cleanup()
		return "", nil, err
	}
	b, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: listen,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		st.Close()
		cleanup()
		return "", nil, err
	}
	if err := b.Start(context.Background()); err != nil {
		st.Close()
		cleanup()
		return "", nil, err
	}
	return b.Addr().String(), func() {
		b.Close()
		st.Close()
		cleanup()
	}, nil
}

// stats collects counts and latencies during the measured window only.
type stats struct {
	measuring atomic.Bool
	mu        sync.Mutex
	lat       []time.Duration
	dlat      []time.Duration // put to delivery, metaq consumers only
	puts      atomic.Int64
	failed    atomic.Int64
	consumed  atomic.Int64
	cbytes    atomic.Int64
	// The consumers' gets over the measured window: answered with records
	// (and those answers' bytes, record headers included) and answered empty.
	getsValue, getsEmpty, valueBytes atomic.Int64
	t0                               time.Time
	cpu0                             cpuTime // processCPU at start

	shardMu sync.Mutex
	shards  []*putShard // per producer connection (newShard), merged by stop
}

// putShard is one producer connection's share of the put counts and
// latencies, under a lock of its own: with one shared lock every answer of
// every producer met the others' there (a tenth of the load generator's
// CPU, taken from the broker's cores).
type putShard struct {
	mu           sync.Mutex
	lat          []time.Duration
	puts, failed int64
}

// newShard returns a putShard that stop counts in.
func (s *stats) newShard() *putShard {
	sh := &putShard{}
	s.shardMu.Lock()
	s.shards = append(s.shards, sh)
	s.shardMu.Unlock()
	return sh
}

// observePutIn is observePut into sh.
func (s *stats) observePutIn(sh *putShard, d time.Duration, ok bool) {
	if !s.measuring.Load() {
		return
	}
	sh.mu.Lock()
	switch {
	case !s.measuring.Load():
	case !ok:
		sh.failed++
	default:
		sh.puts++ // with its latency, under mu: stop sees both or neither
		sh.lat = append(sh.lat, d)
	}
	sh.mu.Unlock()
}

func (s *stats) start() {
	s.t0 = time.Now()
	s.cpu0 = processCPU()
	s.measuring.Store(true)
}

type result struct {
	elapsed                time.Duration
	cpu                    cpuTime // this process's CPU time over the measured window
	puts, failed, consumed int64
	cbytes                 int64
	getsValue, getsEmpty   int64
	valueBytes             int64
	lat                    []time.Duration
	dlat                   []time.Duration
}

func (s *stats) stop() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measuring.Store(false)
	el := time.Since(s.t0)
	r := result{elapsed: el, cpu: processCPU().sub(s.cpu0), puts: s.puts.Load(),
		getsValue: s.getsValue.Load(), getsEmpty: s.getsEmpty.Load(), valueBytes: s.valueBytes.Load(), failed: s.failed.Load(), consumed: s.consumed.Load(), cbytes: s.cbytes.Load(), lat: append([]time.Duration(nil), s.lat...),
		dlat: append([]time.Duration(nil), s.dlat...)}
	// An observer that saw measuring under a shard's lock finished before
	// the shard is read here; a later one sees it false.
	s.shardMu.Lock()
	for _, sh := range s.shards {
		sh.mu.Lock()
		r.puts += sh.puts
		r.failed += sh.failed
		r.lat = append(r.lat, sh.lat...)
		sh.mu.Unlock()
	}
	s.shardMu.Unlock()
	return r
}

// observeConsume counts one consumed message of n payload bytes. Message
// and byte counts change together under mu, so stop sees both or neither.
func (s *stats) observeConsume(n int64) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	if s.measuring.Load() {
		s.consumed.Add(1)
		s.cbytes.Add(n)
	}
	s.mu.Unlock()
}

// observeEmptyGet counts a get answered 404 (nothing at its offset).
func (s *stats) observeEmptyGet() {
	if s.measuring.Load() {
		s.getsEmpty.Add(1)
	}
}

// observeValueGet counts a get answered with n bytes of records.
func (s *stats) observeValueGet(n int) {
	if s.measuring.Load() {
		s.getsValue.Add(1)
		s.valueBytes.Add(int64(n))
	}
}

// us is d in microseconds per one of n.
func us(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(n) }

// observeGet counts the n messages of b payload bytes one get delivered,
// with the put-to-delivery times of those that carried a send time: one
// lock per get, not per message, so the load generator's own cost per
// delivery stays small beside the broker's.
func (s *stats) observeGet(n, b int64, lat []time.Duration) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	if s.measuring.Load() {
		s.consumed.Add(n)
		s.cbytes.Add(b)
		s.dlat = append(s.dlat, lat...)
	}
	s.mu.Unlock()
}

func (s *stats) observePut(d time.Duration, ok bool) {
	if !s.measuring.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.measuring.Load():
	case !ok:
		s.failed.Add(1)
	default:
		s.puts.Add(1) // with its latency, under mu: stop sees both or neither
		s.lat = append(s.lat, d)
	}
}

func (r result) print(o options) {
	sec := r.elapsed.Seconds()
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	pct := func(p float64) time.Duration {
		if len(r.lat) == 0 {
			return 0
		}
		i := int(p * float64(len(r.lat)-1))
		return r.lat[i]
	}
	fmt.Printf("produce: %d msgs in %.1fs = %.0f msgs/s, %.1f MB/s (payload), %d failed\n",
		r.puts, sec, float64(r.puts)/sec, float64(r.puts)*float64(o.size)/sec/1e6, r.failed)
	fmt.Printf("put latency: p50 %v  p99 %v  max %v\n", pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond))
	if r.puts > 0 && r.cpu.total() > 0 {
		who := "the load generator"
		if o.addr == "" {
			who = "the load generator and the in-process broker"
		}
		fmt.Printf("process CPU: %.2f us per produced message (%s; user %.2f, system %.2f)\n", us(r.cpu.total(), r.puts), who,
			us(r.cpu.user, r.puts), us(r.cpu.sys, r.puts))
	}
	if o.readers() > 0 {
		fmt.Printf("consume: %d msgs = %.0f msgs/s, %.1f MB/s (payload)\n", r.consumed, float64(r.consumed)/sec, float64(r.cbytes)/sec/1e6)
		if gets := r.getsValue + r.getsEmpty; gets > 0 && r.consumed > 0 {
			fmt.Printf("gets: %d with records, %d empty; %.4f gets per delivered message, %.0f bytes per answer with records\n",
				r.getsValue, r.getsEmpty, float64(gets)/float64(r.consumed), float64(r.valueBytes)/float64(max(r.getsValue, 1)))
		}
		if len(r.dlat) > 0 {
			slices.Sort(r.dlat)
			dp := func(p float64) time.Duration { return r.dlat[int(p*float64(len(r.dlat)-1))] }
			fmt.Printf("delivery latency (put sent to record received): p50 %v  p99 %v  max %v\n",
				dp(0.50).Round(time.Microsecond), dp(0.99).Round(time.Microsecond), dp(1).Round(time.Microsecond))
		}
	}
}

// sendTimes remembers when each outstanding publish was sent, by the key
// its acknowledgement names (an opaque, a message). A plain map under a
// mutex: unlike a sync.Map it allocates nothing per publish, and the load
// generator's own cost is taken from the brokers' shared cores.
type sendTimes[K comparable] struct {
	mu sync.Mutex
	m  map[K]time.Time
}

func newSendTimes[K comparable](n int) *sendTimes[K] {
	return &sendTimes[K]{m: make(map[K]time.Time, n)}
}

func (s *sendTimes[K]) put(k K, t time.Time) {
	s.mu.Lock()
	s.m[k] = t
	s.mu.Unlock()
}

// take removes k's send time and returns it.
func (s *sendTimes[K]) take(k K) (time.Time, bool) {
	s.mu.Lock()
	t, ok := s.m[k]
	delete(s.m, k)
	s.mu.Unlock()
	return t, ok
}

// opaqueTimes is sendTimes for a MetaQ producer's puts, by opaque, without
// a lock or a map operation per put: a producer's opaques count up and at
// most its in-flight window is unanswered at once, so each put has a slot
// of a ring indexed by its opaque, free again once its answer came. A put
// whose slot is still taken (a put a whole ring older still unanswered)
// goes to a sendTimes instead. put is called by the producer's writer,
// take by its reader.
type opaqueTimes struct {
	base  time.Time // at is measured from it (monotonic)
	mask  int32
	slots []opaqueSlot
	spill *sendTimes[int32]
}

type opaqueSlot struct {
	op atomic.Int32
	at atomic.Int64 // 1 + nanoseconds since base; 0 while free
}

// newOpaqueTimes returns an opaqueTimes for inflight puts outstanding.
func newOpaqueTimes(inflight int) *opaqueTimes {
	n := 1
	for n < 4*max(inflight, 1) {
		n <<= 1
	}
	return &opaqueTimes{base: time.Now(), mask: int32(n - 1), slots: make([]opaqueSlot, n), spill: newSendTimes[int32](4)}
}

func (s *opaqueTimes) put(op int32, t time.Time) {
	sl := &s.slots[op&s.mask]
	if sl.at.Load() != 0 {
		s.spill.put(op, t)
		return
	}
	sl.op.Store(op) // before at: take reads at, then op
	sl.at.Store(1 + int64(t.Sub(s.base)))
}

// take removes op's send time and returns it.
func (s *opaqueTimes) take(op int32) (time.Time, bool) {
	sl := &s.slots[op&s.mask]
	if at := sl.at.Load(); at != 0 && sl.op.Load() == op {
		sl.at.Store(0) // put does not touch a taken slot: nothing raced
		return s.base.Add(time.Duration(at - 1)), true
	}
	return s.spill.take(op)
}

// produce runs one pipelined producer connection.
func produce(ctx context.Context, o options, addr string, n int, st *stats) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	go func() { <-ctx.Done(); nc.Close() }()
	// A body of 8 bytes or more starts with its send time (unix
	// nanoseconds), from which consumers take the delivery latency.
	body := []byte(strings.Repeat("m", o.size))
	sum := wire.Checksum(body)
	slots := make(chan struct{}, o.inflight)
	sent := newOpaqueTimes(o.inflight)
	shard := st.newShard()
	readErr := make(chan error, 1)
	go func() {
		d := wire.NewDecoder(bufio.NewReaderSize(nc, 256<<10))
		d.Reuse = true // each answer is done with before the next
		var body []byte
		d.Alloc = func(n int) []byte { // and so is its body
			if cap(body) < n {
				body = make([]byte, n)
			}
			return body[:n]
		}
		for {
			cmd, err := d.Decode()
			if err != nil {
				readErr <- err
				return
			}
			r, ok := cmd.(*wire.Result)
			if !ok {
				readErr <- fmt.Errorf("unexpected %s", cmd.Name())
				return
			}
			if t, ok := sent.take(r.Opaque); ok {
				st.observePutIn(shard, time.Since(t), r.OK())
				if !r.OK() {
					fmt.Fprintf(os.Stderr, "put failed: %s\n", r)
				}
			}
			<-slots
		}
	}()
	w := bufio.NewWriterSize(nc, 256<<10)
	buf := make([]byte, 0, o.size+128)
	var opaque int32 = int32(n) << 24
	part := int32(n % max(o.partitions, 1))
	pace := newPacer(float64(o.rate) / float64(max(o.producers, 1)))
	for {
		if err := pace.wait(ctx); err != nil {
			return nil
		}
		// Block for the first slot, then batch every free slot into one write.
		select {
		case slots <- struct{}{}:
		case err := <-readErr:
			return err
		case <-ctx.Done():
			return nil
		}
		for k := 0; ; k++ {
			pace.sent()
			opaque++
			part = (part + 1) % int32(max(o.partitions, 1))
			now := time.Now()
			if len(body) >= 8 {
				binary.BigEndian.PutUint64(body, uint64(now.UnixNano()))
				sum = wire.Checksum(body)
			}
			buf = (&wire.Put{Topic: o.topic, Partition: part, Checksum: sum, Body: body, Opaque: opaque}).AppendTo(buf[:0])
			sent.put(opaque, now)
			if _, err := w.Write(buf); err != nil {
				return err
			}
			if k >= 64 || !pace.may() {
				break
			}
			select {
			case slots <- struct{}{}:
				continue
			default:
			}
			break
		}
		if err := w.Flush(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// pacer spreads a producer's puts at a rate: may says whether one more
// may go now, wait waits until one may (and forgets a lag beyond
// pacerBurst). A nil pacer (no rate) lets all go at once.
type pacer struct {
	perSec float64
	start  time.Time
	n      int64 // puts sent
}

// newPacer returns a pacer of perSec puts a second, or nil when perSec is 0.
func newPacer(perSec float64) *pacer {
	if perSec <= 0 {
		return nil
	}
	return &pacer{perSec: perSec, start: time.Now()}
}

// due is when put n (from 0) may go.
func (p *pacer) due(n int64) time.Time {
	return p.start.Add(time.Duration(float64(n) / p.perSec * float64(time.Second)))
}

func (p *pacer) may() bool { return p == nil || !time.Now().Before(p.due(p.n)) }

func (p *pacer) sent() {
	if p != nil {
		p.n++
	}
}

// pacerBurst is how far behind its rate a pacer may fall and catch up at
// once: a producer held back longer (a stalled broker, a busy machine)
// does not send the missed puts in a burst afterwards, which would put
// faster than the rate over the measured window.
const pacerBurst = 20 * time.Millisecond

// wait waits until the next put may go.
func (p *pacer) wait(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if lag := time.Since(p.due(p.n)); lag > pacerBurst {
		p.start = p.start.Add(lag - pacerBurst)
	}
	d := time.Until(p.due(p.n))
	if d <= 0 {
		return nil
	}
	return clock.Sleep(ctx, d)
}

// readers is the number of consumer connections, of -consumers and -groups.
func (o options) readers() int { return o.consumers + o.groups }

// consume runs consumer n of the group "bench": the partitions p with
// p mod consumers = n (every partition when there are more consumers than
// partitions).
func consume(ctx context.Context, o options, addr string, n int, st *stats) error {
	parts := max(o.partitions, 1)
	var mine []int
	for p := range parts {
		if o.consumers > parts || p%o.consumers == n {
			mine = append(mine, p)
		}
	}
	return fetch(ctx, o, addr, "bench", mine, st)
}

// consumeGroup runs the only consumer of group "bench-g<g>", reading every
// partition.
func consumeGroup(ctx context.Context, o options, addr string, g int, st *stats) error {
	all := make([]int, max(o.partitions, 1))
	for p := range all {
		all[p] = p
	}
	return fetch(ctx, o, addr, fmt.Sprintf("bench-g%d", g), all, st)
}

// fetch reads the partitions mine for group from offset 0, following
// records, as a MetaQ client's fetch threads do over one connection: a get
// of every partition due in flight at once. A round writes the gets of
// the partitions due in one write and reads their answers (in whatever
// order they come) before the next round. A partition whose answer had
// records is due again at once; one whose answer was empty (404) is due
// again after nextMissDelay, which grows with each empty answer in a row,
// as a MetaQ Java consumer's (SimpleFetchManager.FetchRequestRunner:
// getNextDelay after an empty fetch, the delay back to 0 after records),
// with maxDelayFetchTimeInMills from -max-delay-fetch. When no partition
// is due the consumer sleeps until one is. Answers are read into one large
// buffer (frameReader) and their records counted in place: a read system
// call brings whatever answers have arrived, and no delivered byte is
// copied in the process. The same code drives every broker, so the
// comparison stays fair.
func fetch(ctx context.Context, o options, addr, group string, mine []int, st *stats) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	go func() { <-ctx.Done(); nc.Close() }()
	fr := newFrameReader(nc, 4<<20)
	var lat []time.Duration
	offsets := make([]int64, max(o.partitions, 1))
	due := make([]time.Time, len(mine))        // when mine[i] is asked next
	missed := make([]time.Duration, len(mine)) // mine[i]'s delay after its last empty answer, 0 after records
	var ask []int                              // the indexes in mine of the round's gets
	var out []byte
	var base int32 // the opaque of the round's first get; get k has base+k
	for {
		now := time.Now()
		ask = ask[:0]
		next := time.Time{}
		for i := range mine {
			if !due[i].After(now) {
				ask = append(ask, i)
			} else if next.IsZero() || due[i].Before(next) {
				next = due[i]
			}
		}
		if len(ask) == 0 {
			t := time.NewTimer(next.Sub(now))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		out = out[:0]
		for k, i := range ask {
			p := mine[i]
			out = (&wire.Get{Topic: o.topic, Group: group, Partition: int32(p), Offset: offsets[p], MaxSize: 1 << 20, Opaque: base + int32(k)}).AppendTo(out)
		}
		if _, err := nc.Write(out); err != nil {
			return err
		}
		for range ask {
			f, err := fr.next()
			if err != nil {
				return err
			}
			k := int(f.opaque - base)
			if k < 0 || k >= len(ask) {
				return fmt.Errorf("get: answer with opaque %d, none in flight", f.opaque)
			}
			i := ask[k]
			p := mine[i]
			if !f.value {
				switch f.code {
				case 301:
					off, err := strconv.ParseInt(string(f.body), 10, 64)
					if err != nil {
						return fmt.Errorf("get %s-%d: 301 %q: %w", o.topic, p, f.body, err)
					}
					offsets[p] = off
				case 404:
					st.observeEmptyGet()
					missed[i] = nextMissDelay(missed[i], o.maxDelayFetch)
					due[i] = time.Now().Add(missed[i])
				default:
					return fmt.Errorf("get %s-%d: result %d %s", o.topic, p, f.code, f.body)
				}
				continue
			}
			missed[i] = 0
			data := f.body
			now := time.Now()
			var n, b int64
			lat = lat[:0]
			for len(data) >= 20 {
				l := int(binary.BigEndian.Uint32(data))
				if len(data) < 20+l {
					break
				}
				offsets[p] += int64(20 + l)
				n++
				b += int64(l)
				if flag := binary.BigEndian.Uint32(data[16:]); flag == 0 && l >= 8 {
					lat = append(lat, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(data[20:])))))
				}
				data = data[20+l:]
			}
			st.observeGet(n, b, lat)
			st.observeValueGet(len(f.body))
		}
		base += int32(len(ask))
		if ctx.Err() != nil {
			return nil
		}
	}
}

// nextMissDelay is how long a consumer waits before asking again for a
// partition whose get found nothing, when it waited last after an empty
// answer (0 after an answer with records): last plus a tenth of
// maxDelay, at most maxDelay, as a MetaQ Java consumer's getNextDelay
// (SimpleFetchManager) with maxDelayFetchTimeInMills. Never below
// minMissDelay, so that a tiny maxDelay does not make a busy loop.
func nextMissDelay(last, maxDelay time.Duration) time.Duration {
	return max(min(last+maxDelay/10, maxDelay), minMissDelay)
}

// minMissDelay is the shortest wait after an empty answer (nextMissDelay).
const minMissDelay = time.Millisecond

// frame is one answer a frameReader decoded: a value (records) or a
// result (a code and its text). body is a slice of the reader's buffer,
// valid until the next call of next.
type frame struct {
	value  bool
	code   int
	opaque int32
	body   []byte
}

// frameReader decodes the broker's answers (value and result frames,
// broker/wire/doc.go) from one buffer that each read fills as far as the
// socket allows, handing bodies out in place.
type frameReader struct {
	r    io.Reader
	buf  []byte
	head int // first byte not yet decoded
	tail int // end of the bytes read
}

func newFrameReader(r io.Reader, size int) *frameReader {
	return &frameReader{r: r, buf: make([]byte, size)}
}

// next returns the next answer.
func (fr *frameReader) next() (frame, error) {
	for {
		if f, n, ok, err := parseFrame(fr.buf[fr.head:fr.tail]); err != nil {
			return frame{}, err
		} else if ok {
			fr.head += n
			return f, nil
		} else if n > len(fr.buf) {
			// A frame longer than the buffer: grow it.
			nb := make([]byte, n)
			fr.tail = copy(nb, fr.buf[fr.head:fr.tail])
			fr.head, fr.buf = 0, nb
		} else if fr.head+n > len(fr.buf) || fr.tail == len(fr.buf) {
			// The frame does not fit behind what was decoded: move its
			// start to the front (once per buffer's length read).
			fr.tail = copy(fr.buf, fr.buf[fr.head:fr.tail])
			fr.head = 0
		}
		k, err := fr.r.Read(fr.buf[fr.tail:])
		fr.tail += k
		if k == 0 && err != nil {
			if err == io.EOF && fr.tail > fr.head {
				err = io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
	}
}

// parseFrame decodes one frame at the start of b: ok and its length when
// b holds all of it; otherwise, when the header line is complete, the
// whole frame's length in n (else the header's length so far plus one).
func parseFrame(b []byte) (f frame, n int, ok bool, err error) {
	eol := bytes.Index(b, []byte("\r\n"))
	if eol < 0 {
		if len(b) > 256 {
			return frame{}, 0, false, fmt.Errorf("answer header too long: %q", b[:64])
		}
		return frame{}, len(b) + 1, false, nil
	}
	// The header's fields, split in place (no allocation per answer).
	var fields [4][]byte
	nf := 0
	for line := b[:eol]; ; {
		for len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		if len(line) == 0 {
			break
		}
		if nf == len(fields) {
			return frame{}, 0, false, fmt.Errorf("unexpected answer %q", b[:eol])
		}
		k := bytes.IndexByte(line, ' ')
		if k < 0 {
			k = len(line)
		}
		fields[nf], line = line[:k], line[k:]
		nf++
	}
	var blen int
	switch {
	case nf == 3 && string(fields[0]) == "value":
		f.value = true
		blen, err = strconv.Atoi(string(fields[1]))
		if err == nil {
			var op int64
			op, err = strconv.ParseInt(string(fields[2]), 10, 32)
			f.opaque = int32(op)
		}
	case nf == 4 && string(fields[0]) == "result":
		f.code, err = strconv.Atoi(string(fields[1]))
		if err == nil {
			blen, err = strconv.Atoi(string(fields[2]))
		}
		if err == nil {
			var op int64
			op, err = strconv.ParseInt(string(fields[3]), 10, 32)
			f.opaque = int32(op)
		}
	default:
		return frame{}, 0, false, fmt.Errorf("unexpected answer %q", b[:eol])
	}
	if err != nil || blen < 0 {
		return frame{}, 0, false, fmt.Errorf("bad answer header %q: %v", b[:eol], err)
	}
	n = eol + 2 + blen
	if len(b) < n {
		return frame{}, n, false, nil
	}
	f.body = b[eol+2 : n]
	return f, n, true, nil
}
