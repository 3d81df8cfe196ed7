package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/client"
	"metaq/broker/registry/zktest"
	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// BenchmarkFailover measures RTO and RPO of the three ways a brokerId
// changes master, over an emulated WAN: bj (master), hf and gz (slave
// sites), one ZooKeeper ensemble, gossip on, and every replication link
// through the in-process delay proxy at 30 ms one way (wanDialer: slaves
// find their master in ZooKeeper, and each dial goes through a proxy to
// the address found). ZooKeeper, gossip and the producers use loopback
// without delay: the producers sit next to whichever site is master.
//
// Go producers that follow ZooKeeper put continuously to a synchronous
// topic (minSyncSites=1, four writers) and an asynchronous one (one
// writer); each writer has its own client and one put in flight, and no
// client retries (a failed put is followed by the next one 5 ms later).
// Each iteration builds a fresh deployment and changes master once:
//
//   - switchover: Switchover(hf) at bj; the loss is the command;
//   - promote: bj is killed (it stops answering puts, its replication
//     links are cut, its ZooKeeper connection is cut so that its session
//     expires as after a crash, then its bundle is closed) and Promote
//     runs at hf as soon as hf notices it lost bj (no operator delay),
//     again until it succeeds, and at gz instead when hf's is refused
//     because gz holds more of bj's log;
//   - auto: the same kill with autoFailover=true and autoFailoverAfterMs=500
//     (a 5 s ZooKeeper session timeout, gossip probing every 100 ms): the
//     most caught-up slave site promotes itself;
//   - auto-deploy: the same with deploy/'s timing: a 30 s ZooKeeper session
//     (bj's master node outlives it: the promotion fences its session by
//     generation), gossip probing every 500 ms, autoFailoverAfterMs=1000.
//
// After a kill, bj is restarted as a slave of the new master and its saved
// unreplicated records are read.
//
// Reported per scenario, as medians over the iterations (-benchtime Nx):
//
//   - rto-ms: from the loss (or the command) to the first put the new
//     master acknowledges (a probe putting directly to the slave sites'
//     brokers every 5 ms), per topic (rto-sync-ms: the synchronous topic,
//     which also needs the other slave site following the new master);
//   - producer-rto-ms, producer-rto-sync-ms: the same, to the first put
//     the producer that follows ZooKeeper had acknowledged by the new
//     master;
//   - rpo-sync-msgs, rpo-async-msgs: acknowledged messages missing at the
//     new master (the synchronous topic and switchover must lose none;
//     rpo-sync-max-msgs is the largest over the iterations);
//   - lag-at-loss-msgs: after a kill, the old master's records of the
//     asynchronous topic that the new master never had (its replication
//     lag when it was lost), as bj saves them aside when it returns as a
//     slave of the new master; unsaved-lost-msgs counts acknowledged
//     messages lost and not saved aside (must be 0);
//     promote-reported-lag-msgs is the lag promote printed (bj's last
//     gossiped lag report for the promoted site's slave group, both
//     topics);
//   - send-errors-sync, send-errors-async: sends the producers saw fail
//     from the change on (they do not retry: every failure counts);
//   - fenced-acks: puts sent from the change on and acknowledged that the
//     new master does not hold, i.e. acknowledged by the old master after
//     it was cut off or replaced (must be 0); inflight-lost-acks: puts
//     sent before the change and acknowledged after it that the new
//     master does not hold (a kill's: the old master stored them while it
//     was master; they are among lag-at-loss-msgs);
//   - sync/async put p50/p99 (ms), before the change: one goroutine
//     alternating a put to each topic (the same load on both), 100 pairs
//     per iteration.
//
// Synchronous and switchover losses, unsaved losses and fenced-acks fail
// the benchmark.
//
//	METAQ_TEST_ZK=... go test -run '^$' -bench BenchmarkFailover -benchtime 3x ./internal/bundle/
func BenchmarkFailover(b *testing.B) {
	zk := testutil.ZooKeeper(b)
	for _, sc := range []failoverScenario{scenarioSwitchover, scenarioPromote, scenarioAuto, scenarioAutoDeploy} {
		b.Run(sc.String(), func(b *testing.B) {
			var all []failoverRun
			for i := range b.N {
				all = append(all, runFailover(b, zk, sc, i))
			}
			reportFailover(b, sc, all)
		})
	}
}

type failoverScenario int

const (
	scenarioSwitchover failoverScenario = iota
	scenarioPromote
	scenarioAuto
	scenarioAutoDeploy
)

func (s failoverScenario) String() string {
	return [...]string{"switchover", "promote", "auto", "auto-deploy"}[s]
}

// failoverTopics: the synchronous and the asynchronous topic.
const (
	topicSync  = "sync"
	topicAsync = "async"
	// syncWriters put to the synchronous topic at once (each waits about
	// a WAN round trip per put); one writer puts to the asynchronous one.
	syncWriters = 4
)

// failoverRun is what one iteration measured.
type failoverRun struct {
	rto, rtoSync                 time.Duration // probe at the new master
	producerRTO, producerRTOSync time.Duration // the ZooKeeper-following producer
	rpoSync, rpoAsync            int           // acknowledged, missing at the new master
	ackedSync, ackedAsync        int
	lagAtLoss, unsavedLost       int // kills only
	reportedLag                  int // promote: the last gossiped lag report of the promoted site's group, -1 without one
	acked                        int
	latSync, latAsync            []time.Duration
	// sendErrSync, sendErrAsync: sends the producers saw fail from the
	// loss on; fencedAcks: puts sent from the loss on, acknowledged, that
	// the new master does not hold (acknowledged by the old master after it
	// was cut off or replaced); inFlightLost: puts sent before the loss and
	// acknowledged after it that the new master does not hold (stored by
	// the old master while it was master, among its replication lag).
	sendErrSync, sendErrAsync, fencedAcks, inFlightLost int
}

// wanDialer is a bundle's ReplicationDialer that puts a proxy with the WAN
// delay in front of every address it dials (one proxy per address, shared
// by every site dialing it), and cuts the links to a lost site.
type wanDialer struct {
	mu      sync.Mutex
	proxies map[string]*netproxy.Proxy
	dead    map[string]bool // refused, as by a host whose process died
}

func (w *wanDialer) proxy(addr string) (*netproxy.Proxy, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.proxies[addr]; ok {
		return p, nil
	}
	p, err := netproxy.New(addr)
	if err != nil {
		return nil, err
	}
	p.SetDelay(wanDelay)
	if w.proxies == nil {
		w.proxies = map[string]*netproxy.Proxy{}
	}
	w.proxies[addr] = p
	return p, nil
}

func (w *wanDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	w.mu.Lock()
	dead := w.dead[addr]
	w.mu.Unlock()
	if dead {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	// A listener that is gone refuses the dial, as across a real WAN (the
	// proxy alone would accept and then close).
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.Close()
	p, err := w.proxy(addr)
	if err != nil {
		return nil, err
	}
	return d.DialContext(ctx, network, p.Addr())
}

// cut closes every link to addr and refuses new ones as a host does
// whose process died (connection refused).
func (w *wanDialer) cut(addr string) error {
	p, err := w.proxy(addr)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.dead == nil {
		w.dead = map[string]bool{}
	}
	w.dead[addr] = true
	w.mu.Unlock()
	p.SetRefuse(true)
	p.CutAll()
	return nil
}

func (w *wanDialer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.proxies {
		p.Close()
	}
	w.proxies = nil
}

// ackedPut is one put the producer had acknowledged.
type ackedPut struct {
	payload string
	sent    time.Time // when the producer sent it
	at      time.Time // when the acknowledgement came
	res     client.SendResult
}

// failoverRig is one iteration's deployment; close stops it.
type failoverRig struct {
	b        testing.TB
	name     string // scenario-N-iteration, names the log files
	dir      string
	shared   string
	wan      *wanDialer
	bjZK     *zktest.Tap
	sites    map[string]*Bundle
	closers  []func()
	mu       sync.Mutex
	acked    map[string][]ackedPut // by topic
	lossAt   time.Time             // the change began; sends failing from then on count in errs
	errs     map[string]int        // by topic
	firstErr map[string]string     // by topic: the first send error from the change on
	stopProd chan struct{}
	prodDone sync.WaitGroup
}

func (r *failoverRig) close() {
	r.stopProducer()
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.closers = nil
}

func (r *failoverRig) stopProducer() {
	if r.stopProd != nil {
		close(r.stopProd)
		r.prodDone.Wait()
		r.stopProd = nil
	}
}

// start starts one site; the bundle is closed with the rig.
func (r *failoverRig) start(name string, spec siteSpec) *Bundle {
	spec.name, spec.noNATS = name, true
	prev := spec.options
	spec.options = func(o *Options) {
		o.ReplicationDialer = r.wan.Dial
		if prev != nil {
			prev(o)
		}
	}
	spec.logger = r.logger(name)
	s := startSite(r.b, filepath.Join(r.dir, name), r.shared, spec)
	r.sites[name] = s
	r.closers = append(r.closers, func() { s.Close() })
	return s
}

// benchLogDir names the environment variable of a directory that keeps
// each site's log of every iteration (benchmarks log nothing otherwise).
const benchLogDir = "METAQ_BENCH_LOGDIR"

// logger is site name's logger: a file under $METAQ_BENCH_LOGDIR named
// after the scenario, iteration and site when it is set, else discarding.
func (r *failoverRig) logger(name string) *slog.Logger {
	dir := os.Getenv(benchLogDir)
	if dir == "" {
		return slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(filepath.Join(dir, r.name+"-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.b.Fatal(err)
	}
	r.closers = append(r.closers, func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func runFailover(b *testing.B, zk string, sc failoverScenario, iter int) failoverRun {
	b.Helper()
	repl := ""
	switch sc {
	case scenarioAuto:
		repl = "autoFailover=true\nautoFailoverAfterMs=500\n"
	case scenarioAutoDeploy:
		repl = "autoFailover=true\nautoFailoverAfterMs=1000\n"
	}
	zkRoot := multiSiteRoot(b, []string{zk})
	shared := sharedINI(zk, zkRoot, "[topic="+topicSync+"]\nnumPartitions=2\nminSyncSites=1\n\n[topic="+topicAsync+"]\nnumPartitions=2\n",
		noConfigSync) // configsync plays no part
	shared = strings.Replace(shared, "[replication]\n", "[replication]\n"+repl, 1)
	if sc == scenarioAutoDeploy {
		shared = strings.Replace(shared, "zk.zkSessionTimeoutMs=5000", "zk.zkSessionTimeoutMs=30000", 1)
		shared = strings.Replace(shared, "probeIntervalMs=100", "probeIntervalMs=500", 1)
	}
	r := &failoverRig{b: b, dir: filepath.Join(b.TempDir(), strconv.Itoa(iter)), shared: shared,
		name: fmt.Sprintf("%s-%d-%d", sc, b.N, iter),
		wan:  &wanDialer{}, bjZK: &zktest.Tap{}, sites: map[string]*Bundle{}, acked: map[string][]ackedPut{}, errs: map[string]int{}, firstErr: map[string]string{}}
	r.closers = append(r.closers, r.wan.Close)
	defer r.close()

	bj := r.start("bj", siteSpec{options: func(o *Options) { o.ZooKeeperDialer = r.bjZK.Dial }})
	seed := []string{mustComp[*topologyComponent](b, bj).Topology().Addr()}
	hf := r.start("hf", siteSpec{slave: true, slaveID: 1, join: seed})
	gz := r.start("gz", siteSpec{slave: true, slaveID: 2, join: seed})
	testutil.Eventually(b, 30*time.Second, 20*time.Millisecond, func() error {
		for _, s := range []*Bundle{hf, gz} {
			if rc := s.receiver(); rc == nil || !rc.Connected() {
				return fmt.Errorf("%s does not follow bj yet", s.Config().Site.Name)
			}
		}
		return nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One client per writer: a put does not wait behind another on a
	// shared connection.
	producers := map[string][]*client.Producer{}
	for _, topic := range append(slices.Repeat([]string{topicSync}, syncWriters), topicAsync) {
		cl, err := client.New(ctx, client.Config{ZKServers: []string{zk}, ZKRoot: zkRoot, ZKSyncTime: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		r.closers = append(r.closers, func() { cl.Close() })
		p, err := client.NewProducer(cl, client.WithRetries(0))
		if err != nil {
			b.Fatal(err)
		}
		r.closers = append(r.closers, func() { p.Close(context.Background()) })
		producers[topic] = append(producers[topic], p)
	}

	var run failoverRun
	run.latSync, run.latAsync = putLatencies(b, ctx, producers, 100)
	r.produce(ctx, producers)
	time.Sleep(time.Second) // steady traffic before the change

	var lossAt time.Time
	probes := r.probe(ctx, hf, gz)
	markLoss := func() {
		lossAt = time.Now()
		r.mu.Lock()
		r.lossAt = lossAt
		r.mu.Unlock()
	}
	switch sc {
	case scenarioSwitchover:
		markLoss()
		if _, err := bj.Switchover(ctx, "hf", ""); err != nil {
			b.Fatal(err)
		}
	case scenarioPromote, scenarioAuto, scenarioAutoDeploy:
		markLoss()
		r.kill(bj)
		if sc == scenarioPromote {
			testutil.Eventually(b, 20*time.Second, 2*time.Millisecond, func() error {
				if hf.receiver().Connected() {
					return errors.New("hf still follows bj")
				}
				return nil
			})
			rep := r.promoteAsOperator(ctx, hf, gz)
			run.reportedLag = -1
			if rep.Lag != nil {
				run.reportedLag = int(rep.Lag.Messages)
			}
		}
	}
	var nm *Bundle
	testutil.Eventually(b, 60*time.Second, 5*time.Millisecond, func() error {
		for _, s := range []*Bundle{hf, gz} {
			if s.promotedShipper() != nil {
				nm = s
				return nil
			}
		}
		return errors.New("no slave site is master yet")
	})
	id, err := nm.identity()
	if err != nil {
		b.Fatal(err)
	}
	ends := id.Get().Ends
	// Both topics acknowledged by the new master, at the probe and at the
	// producer.
	testutil.Eventually(b, 60*time.Second, 10*time.Millisecond, func() error {
		for _, topic := range []string{topicSync, topicAsync} {
			if probes.first(nm, topic).IsZero() {
				return fmt.Errorf("no probe put to %s acknowledged at the new master yet", topic)
			}
			if r.acksBeyond(topic, ends, lossAt) < 5 {
				return fmt.Errorf("the producer has no put to %s acknowledged by the new master yet", topic)
			}
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // traffic after
	r.stopProducer()
	probes.stop()
	run.rto = probes.first(nm, topicAsync).Sub(lossAt)
	run.rtoSync = probes.first(nm, topicSync).Sub(lossAt)

	held := map[string]bool{}
	for _, topic := range []string{topicSync, topicAsync} {
		for _, body := range storedBodies(b, nm, topic) {
			held[body] = true
		}
	}
	run.producerRTO = r.firstAckBy(topicAsync, ends, held).Sub(lossAt)
	run.producerRTOSync = r.firstAckBy(topicSync, ends, held).Sub(lossAt)
	var lostAsync []string
	r.mu.Lock()
	for topic, puts := range r.acked {
		for _, a := range puts {
			run.acked++
			if topic == topicSync {
				run.ackedSync++
			} else {
				run.ackedAsync++
			}
			if held[a.payload] {
				continue
			}
			switch {
			case !a.sent.Before(lossAt):
				run.fencedAcks++
			case !a.at.Before(lossAt):
				run.inFlightLost++
			}
			if topic == topicSync {
				run.rpoSync++
			} else {
				run.rpoAsync++
				lostAsync = append(lostAsync, a.payload)
			}
		}
	}
	run.sendErrSync, run.sendErrAsync = r.errs[topicSync], r.errs[topicAsync]
	firstErr := maps.Clone(r.firstErr)
	r.mu.Unlock()
	if run.rpoSync > 0 || (sc == scenarioSwitchover && run.rpoAsync > 0) {
		b.Fatalf("%s: acknowledged messages lost: %d of the synchronous topic, %d of the asynchronous one", sc, run.rpoSync, run.rpoAsync)
	}
	if run.fencedAcks > 0 {
		b.Fatalf("%s: %d puts sent after the change were acknowledged and are not at the new master", sc, run.fencedAcks)
	}
	if sc != scenarioSwitchover {
		run.lagAtLoss, run.unsavedLost = r.failback(nm, lostAsync)
		if run.unsavedLost > 0 {
			b.Fatalf("%s: %d acknowledged messages of the asynchronous topic are lost and not saved aside at bj", sc, run.unsavedLost)
		}
	}
	b.Logf("%s #%d: new master %s; rto %s (sync %s), producer %s (sync %s); acked sync %d async %d, lost sync %d async %d, lag at loss %d (promote reported %d); send errors from the change on sync %d async %d; sent from the change on, acknowledged and not at the new master %d; sent before it, acknowledged after it and not at the new master %d",
		sc, iter, nm.Config().Site.Name, run.rto, run.rtoSync, run.producerRTO, run.producerRTOSync,
		run.ackedSync, run.ackedAsync, run.rpoSync, run.rpoAsync, run.lagAtLoss, run.reportedLag, run.sendErrSync, run.sendErrAsync, run.fencedAcks, run.inFlightLost)
	for _, topic := range []string{topicSync, topicAsync} {
		if e := firstErr[topic]; e != "" {
			b.Logf("%s #%d: the first send error of %s from the change on: %s", sc, iter, topic, e)
		}
	}
	return run
}

// promoteAsOperator runs promote at site until it succeeds; when it is
// refused because the other slave site holds more of the old master's log,
// it runs promote there instead (what the refusal tells the operator).
func (r *failoverRig) promoteAsOperator(ctx context.Context, site, other *Bundle) PromoteReport {
	var rep PromoteReport
	testutil.Eventually(r.b, 30*time.Second, 20*time.Millisecond, func() error {
		var err error
		rep, err = site.Promote(ctx, false)
		if errors.Is(err, ErrSiblingAhead) && strings.Contains(err.Error(), "site "+other.Config().Site.Name+" applied") {
			rep, err = other.Promote(ctx, false)
		}
		return err
	})
	return rep
}

// kill makes bj lost as in a crash: it stops answering puts, its
// replication links are cut (new dials refused), and killBundle cuts its
// ZooKeeper connection (the session expires on the server after its
// timeout, keeping bj's master node until then) and closes it.
func (r *failoverRig) kill(bj *Bundle) {
	bj.Broker.RefuseWrites("killed", broker.Refusal{Reason: "killed"})
	if err := r.wan.cut(mustComp[*shipperComponent](r.b, bj).Addr()); err != nil {
		r.b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); killBundle(bj, r.bjZK) }()
	r.closers = append(r.closers, func() { <-done })
}

// failback restarts the killed bj as a slave of the new master nm (the
// slave id nm had), waits until it follows nm, and reads what it saved
// aside: lag is the number of records of the asynchronous topic saved,
// unsaved the acknowledged ones lost that are not among them.
func (r *failoverRig) failback(nm *Bundle, lost []string) (lag, unsaved int) {
	r.closers[len(r.closers)-1]() // bj's Close
	bjDir := filepath.Join(r.dir, "bj")
	seed := []string{mustComp[*topologyComponent](r.b, nm).Topology().Addr()}
	bj := r.start("bj", siteSpec{slave: true, slaveID: nm.Slave.SlaveID, join: seed})
	for _, topic := range []string{topicSync, topicAsync} {
		waitCaughtUp(r.b, nm, bj, topic, 60*time.Second)
	}
	dir := filepath.Join(bjDir, "data", "replication", "unreplicated")
	tails, err := georeplicator.ListTails(dir)
	if err != nil {
		r.b.Fatal(err)
	}
	saved := map[string]bool{}
	for _, t := range tails {
		data, err := os.ReadFile(t.Path)
		if err != nil {
			r.b.Fatal(err)
		}
		for len(data) > 0 {
			rec, n, err := store.DecodeRecord(data)
			if err != nil {
				r.b.Fatalf("%s: %v", t.Path, err)
			}
			if t.Topic == topicAsync {
				lag++
			}
			saved[string(rec.Body)] = true
			data = data[n:]
		}
	}
	for _, m := range lost {
		if !saved[m] {
			unsaved++
		}
	}
	return lag, unsaved
}

// produce starts one writer per producer, until stopProducer.
func (r *failoverRig) produce(ctx context.Context, producers map[string][]*client.Producer) {
	r.stopProd = make(chan struct{})
	stop := r.stopProd
	for topic, ps := range producers {
		for w, p := range ps {
			r.prodDone.Add(1)
			go r.write(ctx, stop, p, topic, w)
		}
	}
}

// write puts to topic through p, one put in flight, until stop.
func (r *failoverRig) write(ctx context.Context, stop <-chan struct{}, p *client.Producer, topic string, writer int) {
	defer r.prodDone.Done()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		m := fmt.Sprintf("%s-%d-%d", topic, writer, i)
		sent := time.Now()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := p.Send(sctx, &client.Message{Topic: topic, Payload: []byte(m)})
		cancel()
		if err != nil {
			r.mu.Lock()
			if !r.lossAt.IsZero() {
				r.errs[topic]++
				if r.firstErr[topic] == "" {
					r.firstErr[topic] = err.Error()
				}
			}
			r.mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue // not acknowledged: may be lost
		}
		r.mu.Lock()
		r.acked[topic] = append(r.acked[topic], ackedPut{payload: m, sent: sent, at: time.Now(), res: res})
		r.mu.Unlock()
	}
}

// firstAckBy is when the producer got its first acknowledgement of topic
// from the new master: of a message the new master holds (held) at or
// beyond its promotion end of the partition; a message the old master
// acknowledged there is one the new master never had. Zero when none.
func (r *failoverRig) firstAckBy(topic string, ends map[string]int64, held map[string]bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acked[topic] {
		end, ok := ends[georeplicator.PartKey(topic, a.res.Partition.Partition)]
		if ok && a.res.Offset >= end && held[a.payload] {
			return a.at
		}
	}
	return time.Time{}
}

// acksBeyond counts the producer's acknowledgements of topic after since
// of messages stored at or beyond ends.
func (r *failoverRig) acksBeyond(topic string, ends map[string]int64, since time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.acked[topic] {
		end, ok := ends[georeplicator.PartKey(topic, a.res.Partition.Partition)]
		if ok && a.res.Offset >= end && a.at.After(since) {
			n++
		}
	}
	return n
}

// putLatencies sends n pairs of puts, one to each topic in turn (each
// through its producer), and returns each topic's put latencies.
func putLatencies(b *testing.B, ctx context.Context, producers map[string][]*client.Producer, n int) (syncLat, asyncLat []time.Duration) {
	b.Helper()
	for i := range n {
		for _, topic := range []string{topicSync, topicAsync} {
			start := time.Now()
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := producers[topic][0].Send(sctx, &client.Message{Topic: topic, Payload: []byte(fmt.Sprintf("lat-%s-%d", topic, i))})
			cancel()
			if err != nil {
				b.Fatalf("put to %s: %v", topic, err)
			}
			if topic == topicSync {
				syncLat = append(syncLat, time.Since(start))
			} else {
				asyncLat = append(asyncLat, time.Since(start))
			}
		}
	}
	return syncLat, asyncLat
}

// prober puts to each topic at each slave site's broker directly, every
// 5 ms, and keeps the time of each site's first acknowledged put.
type prober struct {
	mu     sync.Mutex
	firsts map[*Bundle]map[string]time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (r *failoverRig) probe(ctx context.Context, sites ...*Bundle) *prober {
	ctx, cancel := context.WithCancel(ctx)
	pr := &prober{firsts: map[*Bundle]map[string]time.Time{}, cancel: cancel}
	for _, s := range sites {
		pr.firsts[s] = map[string]time.Time{}
		for _, topic := range []string{topicSync, topicAsync} {
			pr.wg.Add(1)
			go func() {
				defer pr.wg.Done()
				pr.run(ctx, s, topic)
			}()
		}
	}
	return pr
}

func (pr *prober) run(ctx context.Context, s *Bundle, topic string) {
	var mc *metaConn
	defer func() {
		if mc != nil {
			mc.Close()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		if mc == nil {
			mc, _ = dialMeta(s.Broker.Addr().String())
		}
		if mc != nil {
			_, _, err := mc.put(topic, i%2, []byte(fmt.Sprintf("probe-%s-%d", topic, i)))
			if err == nil {
				pr.mu.Lock()
				pr.firsts[s][topic] = time.Now()
				pr.mu.Unlock()
				return
			}
			if !strings.HasPrefix(err.Error(), "put: ") { // the connection failed
				mc.Close()
				mc = nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (pr *prober) first(s *Bundle, topic string) time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.firsts[s][topic]
}

func (pr *prober) stop() {
	pr.cancel()
	pr.wg.Wait()
}

// storedBodies returns the bodies of every record of topic in s's store.
func storedBodies(b testing.TB, s *Bundle, topic string) []string {
	b.Helper()
	var out []string
	for _, pi := range s.Store.Partitions() {
		if pi.Topic != topic {
			continue
		}
		for off := pi.Min; off < pi.Max; {
			data, err := s.Store.Read(topic, pi.Partition, off, 1<<20)
			if err != nil {
				b.Fatalf("%s-%d at %d: %v", topic, pi.Partition, off, err)
			}
			start := off
			for {
				rec, n, err := store.DecodeRecord(data)
				if err != nil && off == start {
					b.Fatalf("%s-%d at %d: %v", topic, pi.Partition, off, err)
				}
				if err != nil {
					break // a partial record: the next read starts at it
				}
				out = append(out, string(rec.Body))
				data, off = data[n:], off+int64(n)
			}
		}
	}
	return out
}

// reportFailover reports the medians of the iterations.
func reportFailover(b *testing.B, sc failoverScenario, runs []failoverRun) {
	ms := func(f func(failoverRun) time.Duration) float64 {
		var v []float64
		for _, r := range runs {
			v = append(v, float64(f(r))/float64(time.Millisecond))
		}
		return median(v)
	}
	n := func(f func(failoverRun) int) float64 {
		var v []float64
		for _, r := range runs {
			v = append(v, float64(f(r)))
		}
		return median(v)
	}
	var latSync, latAsync []time.Duration
	maxSyncLoss := 0
	for _, r := range runs {
		latSync = append(latSync, r.latSync...)
		latAsync = append(latAsync, r.latAsync...)
		maxSyncLoss = max(maxSyncLoss, r.rpoSync)
	}
	b.ReportMetric(0, "ns/op") // an iteration is a whole deployment: its time says nothing
	b.ReportMetric(ms(func(r failoverRun) time.Duration { return r.rto }), "rto-ms")
	b.ReportMetric(ms(func(r failoverRun) time.Duration { return r.rtoSync }), "rto-sync-ms")
	b.ReportMetric(ms(func(r failoverRun) time.Duration { return r.producerRTO }), "producer-rto-ms")
	b.ReportMetric(ms(func(r failoverRun) time.Duration { return r.producerRTOSync }), "producer-rto-sync-ms")
	b.ReportMetric(n(func(r failoverRun) int { return r.rpoSync }), "rpo-sync-msgs")
	b.ReportMetric(float64(maxSyncLoss), "rpo-sync-max-msgs")
	b.ReportMetric(n(func(r failoverRun) int { return r.rpoAsync }), "rpo-async-msgs")
	b.ReportMetric(n(func(r failoverRun) int { return r.acked }), "acked-msgs")
	b.ReportMetric(n(func(r failoverRun) int { return r.sendErrSync }), "send-errors-sync")
	b.ReportMetric(n(func(r failoverRun) int { return r.sendErrAsync }), "send-errors-async")
	b.ReportMetric(n(func(r failoverRun) int { return r.fencedAcks }), "fenced-acks")
	b.ReportMetric(n(func(r failoverRun) int { return r.inFlightLost }), "inflight-lost-acks")
	if sc != scenarioSwitchover {
		b.ReportMetric(n(func(r failoverRun) int { return r.lagAtLoss }), "lag-at-loss-msgs")
		if sc == scenarioPromote {
			b.ReportMetric(n(func(r failoverRun) int { return r.reportedLag }), "promote-reported-lag-msgs")
		}
		b.ReportMetric(n(func(r failoverRun) int { return r.unsavedLost }), "unsaved-lost-msgs")
	}
	b.ReportMetric(percentileMs(latSync, 50), "sync-p50-ms")
	b.ReportMetric(percentileMs(latSync, 99), "sync-p99-ms")
	b.ReportMetric(percentileMs(latAsync, 50), "async-p50-ms")
	b.ReportMetric(percentileMs(latAsync, 99), "async-p99-ms")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func percentileMs(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return float64(s[i]) / float64(time.Millisecond)
}
