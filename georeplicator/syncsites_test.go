package georeplicator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/client"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// siteRig is a master bundle in process (broker, store, shipper) with slave
// sites behind delay proxies, and a producer speaking the MetaQ protocol as
// the Java client does.
type siteRig struct {
	t      testing.TB
	dir    string
	st     *store.Store
	b      *broker.Broker
	sh     *Shipper
	logs   *testutil.SyncBuffer
	slaves map[string]*siteSlave
	prod   *client.Producer
}

type siteSlave struct {
	proxy *netproxy.Proxy
	st    *store.Store
	rc    *Receiver
}

const siteTopics = `
[topic=sync]
numPartitions=2
minSyncSites=1
; group commit anyway: minSyncSites implies it
unflushThreshold=1000
unflushInterval=60000
[topic=async]
numPartitions=2
[topic=deg]
numPartitions=1
minSyncSites=2
syncDegrade=async
`

func newSiteRig(t testing.TB, siteTimeout time.Duration) *siteRig {
	t.Helper()
	g := &siteRig{t: t, dir: t.TempDir(), logs: &testutil.SyncBuffer{}, slaves: map[string]*siteSlave{}}
	log := slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ini := fmt.Sprintf("[system]\nbrokerId=0\nhostName=127.0.0.1\nserverPort=8123\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=10000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=%s\n[zookeeper]\nzk.zkEnable=false\n%s",
		filepath.Join(g.dir, "master"), siteTopics)
	cfg, _, err := config.Parse("server.ini", []byte(ini))
	if err != nil {
		t.Fatal(err)
	}
	if g.st, err = store.Open(store.Options{Dir: filepath.Join(g.dir, "master")}); err != nil {
		t.Fatal(err)
	}
	g.b, err = broker.New(broker.Options{Config: cfg, Store: g.st, ListenAddr: "127.0.0.1:0", Logger: log, SiteSyncTimeout: siteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.sh, err = NewShipper(ShipperOptions{Listen: "127.0.0.1:0", BrokerID: 0, Source: g.st, Keepalive: 100 * time.Millisecond,
		StuckAfter: time.Hour, StateFile: filepath.Join(g.dir, "shipper.json"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.sh.Start(); err != nil {
		t.Fatal(err)
	}
	g.b.SetSiteReplicator(g.sh)
	cl, err := client.New(context.Background(), client.Config{Brokers: []string{g.b.Addr().String()}, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if g.prod, err = client.NewProducer(cl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.prod.Close(context.Background())
		cl.Close()
		g.kill()
		for _, s := range g.slaves {
			s.rc.Close()
			s.proxy.Close()
			s.st.Close()
		}
		g.st.Close()
	})
	return g
}

// addSlave starts a slave of group site behind a proxy with the given
// one-way delay. The slave checkpoints only every hour, so a put's wait can
// end only through the frames a synchronous put flags.
func (g *siteRig) addSlave(site string, delay time.Duration) *siteSlave {
	g.t.Helper()
	p, err := netproxy.New(g.sh.Addr())
	if err != nil {
		g.t.Fatal(err)
	}
	p.SetDelay(delay)
	st, err := store.Open(store.Options{Dir: filepath.Join(g.dir, site),
		DefaultPolicy: store.Policy{UnflushThreshold: 1000, UnflushInterval: time.Hour}})
	if err != nil {
		g.t.Fatal(err)
	}
	rc, err := NewReceiver(ReceiverOptions{Sink: st, Resolver: StaticResolver(p.Addr()), BrokerID: 0, SlaveID: 1, Group: site,
		CheckpointFile: filepath.Join(g.dir, site+".checkpoint"), CheckpointInterval: time.Hour,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	if err := rc.Start(); err != nil {
		g.t.Fatal(err)
	}
	s := &siteSlave{proxy: p, st: st, rc: rc}
	g.slaves[site] = s
	deadline := time.Now().Add(10 * time.Second)
	for g.sh.ConnectedSites() < len(g.slaves) {
		if time.Now().After(deadline) {
			g.t.Fatalf("slave %s did not connect", site)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// kill stops the master's broker and shipper (idempotent).
func (g *siteRig) kill() {
	if g.b != nil {
		g.b.Close()
		g.b = nil
	}
	if g.sh != nil {
		g.sh.Close()
		g.sh = nil
	}
}

type acked struct {
	topic     string
	partition int
	offset    int64
	payload   []byte
}

func (g *siteRig) send(ctx context.Context, topic string, payload []byte) (acked, error) {
	res, err := g.prod.Send(ctx, &client.Message{Topic: topic, Payload: payload})
	if err != nil {
		return acked{}, err
	}
	return acked{topic: topic, partition: res.Partition.Partition, offset: res.Offset, payload: payload}, nil
}

// holds reports whether st holds a's record at a's offset.
func holds(st *store.Store, a acked) error {
	rec, err := st.Read(a.topic, a.partition, a.offset, 20+len(a.payload))
	if err != nil {
		return err
	}
	if len(rec) < 20+len(a.payload) || !bytes.Equal(rec[20:20+len(a.payload)], a.payload) {
		return fmt.Errorf("record at %s-%d@%d differs or is short (%d bytes)", a.topic, a.partition, a.offset, len(rec))
	}
	return nil
}

// TestSyncTopicLosesNothingWhenMasterKilled: producers run throughout on a
// synchronous and an asynchronous topic; the master is killed (its link to
// the slave site cut first) while they run; every record acknowledged on
// the synchronous topic is on the slave.
func TestSyncTopicLosesNothingWhenMasterKilled(t *testing.T) {
	g := newSiteRig(t, 30*time.Second)
	hf := g.addSlave("hf", 5*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var syncAcks []acked
	asyncAcks := 0
	var wg sync.WaitGroup
	for w := range 4 {
		topic := "sync"
		if w == 3 {
			topic = "async"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				a, err := g.send(ctx, topic, fmt.Appendf(nil, "w%d-m%d", w, i))
				if err != nil {
					continue // the kill: answered as failed, never acknowledged
				}
				mu.Lock()
				if topic == "sync" {
					syncAcks = append(syncAcks, a)
				} else {
					asyncAcks++
				}
				mu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(syncAcks)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d synchronous puts acknowledged in 20s", n)
		}
		time.Sleep(time.Millisecond)
	}
	hf.proxy.SetStall(true) // the site is cut off: nothing more reaches it
	time.Sleep(20 * time.Millisecond)
	hf.proxy.CutAll()
	g.kill()
	cancel()
	wg.Wait()
	hf.rc.Close()

	mu.Lock()
	defer mu.Unlock()
	if asyncAcks == 0 {
		t.Fatal("no put to the asynchronous topic was acknowledged")
	}
	for _, a := range syncAcks {
		if err := holds(hf.st, a); err != nil {
			t.Fatalf("acknowledged record missing on the slave site: %v (%d acknowledged)", err, len(syncAcks))
		}
	}
	t.Logf("%d synchronous and %d asynchronous puts acknowledged; all synchronous ones on the slave", len(syncAcks), asyncAcks)
}

// TestSyncTopicRefusedWithoutSlaveSite: with no slave site connected a put
// to a synchronous topic gets a retriable 503 naming minSyncSites, and an
// asynchronous topic on the same master is served.
func TestSyncTopicRefusedWithoutSlaveSite(t *testing.T) {
	g := newSiteRig(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := g.send(ctx, "sync", []byte("refused"))
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != 503 || !strings.Contains(se.Text, "minSyncSites") {
		t.Fatalf("put to a synchronous topic without slave sites: %v, want 503 naming minSyncSites", err)
	}
	if _, err := g.send(ctx, "async", []byte("served")); err != nil {
		t.Fatalf("put to an asynchronous topic: %v", err)
	}
	if st := syncTopic(g.b, "sync"); st.RefusedPuts == 0 {
		t.Errorf("refusals not counted: %+v", st)
	}
	// Once a site connects the same topic is served, and the record is there.
	hf := g.addSlave("hf", 5*time.Millisecond)
	a, err := g.send(ctx, "sync", []byte("accepted"))
	if err != nil {
		t.Fatalf("put with a slave site connected: %v", err)
	}
	if err := holds(hf.st, a); err != nil {
		t.Fatal(err)
	}
}

func syncTopic(b *broker.Broker, topic string) broker.SyncTopicStatus {
	for _, s := range b.SyncTopics() {
		if s.Topic == topic {
			return s
		}
	}
	return broker.SyncTopicStatus{}
}

// TestSyncTopicDegradesToAsync: a topic with syncDegrade=async and too few
// sites acknowledges puts, warns once, and shows degraded; with its sites
// back it waits for them again and says so once.
func TestSyncTopicDegradesToAsync(t *testing.T) {
	g := newSiteRig(t, 30*time.Second)
	g.addSlave("hf", 5*time.Millisecond) // one site of the two "deg" needs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := g.send(ctx, "deg", fmt.Appendf(nil, "d%d", i)); err != nil {
			t.Fatalf("degraded put %d: %v", i, err)
		}
	}
	st := syncTopic(g.b, "deg")
	if !st.Degraded || st.DegradedPuts != 20 || st.Degrade != config.SyncDegradeAsync {
		t.Fatalf("status %+v, want degraded with 20 puts", st)
	}
	if n := strings.Count(g.logs.String(), "acknowledging puts asynchronously"); n != 1 {
		t.Fatalf("%d degradation warnings, want 1:\n%s", n, g.logs.String())
	}
	gz := g.addSlave("gz", 5*time.Millisecond)
	a, err := g.send(ctx, "deg", []byte("both sites"))
	if err != nil {
		t.Fatal(err)
	}
	if err := holds(gz.st, a); err != nil {
		t.Fatal(err)
	}
	if err := holds(g.slaves["hf"].st, a); err != nil {
		t.Fatal(err)
	}
	if st := syncTopic(g.b, "deg"); st.Degraded || st.DegradedPuts != 20 {
		t.Fatalf("status after the sites came back %+v", st)
	}
	if n := strings.Count(g.logs.String(), "slave sites back"); n != 1 {
		t.Fatalf("%d recovery lines, want 1", n)
	}
}

// TestAsyncTopicUnaffectedBySyncTopic: while the slave site's link is
// stalled, a put to the synchronous topic waits, and puts to an
// asynchronous topic on the same master are acknowledged meanwhile; once
// the link moves again the synchronous put is acknowledged.
func TestAsyncTopicUnaffectedBySyncTopic(t *testing.T) {
	g := newSiteRig(t, 30*time.Second)
	hf := g.addSlave("hf", 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	hf.proxy.SetStall(true)
	type result struct {
		a   acked
		err error
	}
	syncDone := make(chan result, 1)
	go func() {
		a, err := g.send(ctx, "sync", []byte("waits for hf"))
		syncDone <- result{a, err}
	}()
	for i := range 50 {
		if _, err := g.send(ctx, "async", fmt.Appendf(nil, "a%d", i)); err != nil {
			t.Fatalf("asynchronous put %d while the site is stalled: %v", i, err)
		}
	}
	select {
	case r := <-syncDone:
		t.Fatalf("synchronous put answered while its site is cut off: %+v", r)
	default:
	}
	hf.proxy.SetStall(false)
	r := <-syncDone
	if r.err != nil {
		t.Fatalf("synchronous put after the link came back: %v", r.err)
	}
	if err := holds(hf.st, r.a); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSyncTopicPutWAN: the latency cost of a synchronous topic. One
// master and its slave sites, each behind the in-process delay proxy at
// 30 ms one way (a 60 ms round trip); every 5 ms one 1 KiB put to each
// topic starts, all together (200 puts/s per topic, the same load), b.N
// times. Reports put p50/p99 per topic and the difference of the p50s of
// the minSyncSites=1 and the asynchronous topic in WAN round trips
// (expected about 1). sites=2: master and one slave site, topics sync
// (minSyncSites=1) and async; sites=3: two slave sites, and deg
// (minSyncSites=2) too.
//
//	go test -run '^$' -bench BenchmarkSyncTopicPutWAN -benchtime 1000x ./georeplicator/
func BenchmarkSyncTopicPutWAN(b *testing.B) {
	b.Run("sites=2", func(b *testing.B) { benchSyncTopics(b, []string{"hf"}, []string{"sync", "async"}) })
	b.Run("sites=3", func(b *testing.B) { benchSyncTopics(b, []string{"hf", "gz"}, []string{"sync", "deg", "async"}) })
}

func benchSyncTopics(b *testing.B, sites, topics []string) {
	const oneWay = 30 * time.Millisecond
	g := newSiteRig(b, 30*time.Second)
	for _, s := range sites {
		g.addSlave(s, oneWay)
	}
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 1024)
	for _, topic := range topics { // connections, topic registration
		if _, err := g.send(ctx, topic, payload); err != nil {
			b.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		lat = map[string][]time.Duration{}
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for range b.N {
		<-tick.C
		for _, topic := range topics {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if _, err := g.send(ctx, topic, payload); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(start)
				mu.Lock()
				lat[topic] = append(lat[topic], d)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	b.StopTimer()
	pct := func(topic string, p float64) time.Duration {
		ds := lat[topic]
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, topic := range topics {
		b.ReportMetric(ms(pct(topic, 0.50)), topic+"-p50-ms")
		b.ReportMetric(ms(pct(topic, 0.99)), topic+"-p99-ms")
	}
	b.ReportMetric(float64(pct("sync", 0.50)-pct("async", 0.50))/float64(2*oneWay), "p50-cost-RTTs")
}

// TestSyncTopicTimeout: a slave site that is connected but does not fsync a
// put within SiteSyncTimeout (its link stalled) has the put answered as
// failed, naming minSyncSites, never as stored.
func TestSyncTopicTimeout(t *testing.T) {
	g := newSiteRig(t, 300*time.Millisecond)
	hf := g.addSlave("hf", 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := g.send(ctx, "sync", []byte("before")); err != nil {
		t.Fatal(err)
	}
	hf.proxy.SetStall(true)
	_, err := g.send(ctx, "sync", []byte("stalled"))
	var se *client.StatusError
	if !errors.As(err, &se) || !strings.Contains(se.Text, "not fsynced at 1 slave sites") {
		t.Fatalf("put whose site stalled: %v, want a failure naming the slave sites", err)
	}
	if st := syncTopic(g.b, "sync"); st.FailedPuts != 1 {
		t.Fatalf("status %+v, want 1 failed put", st)
	}
	if n := strings.Count(g.logs.String(), "not fsynced at their slave sites in time"); n != 1 {
		t.Fatalf("%d timeout warnings, want 1", n)
	}
}

// TestSiteWaitsCountGroups: a wait for two sites is not ended by two slaves
// of one group, is ended by a slave of a second group, and times out with
// ErrSitesTimeout otherwise; Close ends the rest with ErrClosed.
func TestSiteWaitsCountGroups(t *testing.T) {
	w := newSiteWaits()
	got := make(chan error, 3)
	w.add(100, 2, time.Hour, func(err error) { got <- err })
	w.ack(slaveKey{"hf", 1}, 150)
	w.ack(slaveKey{"hf", 2}, 150)
	select {
	case err := <-got:
		t.Fatalf("two slaves of one site ended a wait for two sites: %v", err)
	default:
	}
	if u := w.urgent.Load(); u != 100 {
		t.Fatalf("urgent %d, want 100", u)
	}
	w.ack(slaveKey{"gz", 1}, 99)
	w.ack(slaveKey{"gz", 1}, 100)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	w.add(200, 1, 10*time.Millisecond, func(err error) { got <- err })
	if err := <-got; !errors.Is(err, ErrSitesTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	w.add(300, 1, time.Hour, func(err error) { got <- err })
	w.close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("close: %v", err)
	}
}
