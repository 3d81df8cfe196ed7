package topology_test

// End to end: three sites with real brokers, a real ZooKeeper and real
// gossip. bj runs brokerId 1's master, which replicates synchronously to a
// slave in hf (byte-identical records at the same offsets); sh runs brokerId
// 2's master. A Go consumer in hf prefers its local replica through the
// topology router. When hf dies, the consumer moves to bj's master within
// the gossip detection time and loses nothing; when hf returns, it moves
// back.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/client"
	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
	"metaq/topology"
)

// site is one in-process broker: config, store and broker, restartable on
// the same port and data directory.
type site struct {
	cfg   *config.Server
	dir   string
	port  int
	zk    bool
	slave string // SyncSlave address (master of a sync pair)
	recv  bool   // SyncReceiver (slave of a sync pair)

	// attach, when set, starts something on the store before the broker
	// (a replication shipper or receiver) and returns its stop function.
	attach func(st *store.Store) (stop func())

	mu     sync.Mutex
	store  *store.Store
	br     *broker.Broker
	reg    *registry.Registry
	detach func()
}

func newSite(t *testing.T, brokerID int, zkAddr, root string, zk bool) *site {
	t.Helper()
	s := &site{dir: t.TempDir(), port: testutil.FreePort(t), zk: zk}
	ini := fmt.Sprintf(`[system]
brokerId=%d
hostName=127.0.0.1
serverPort=%d
numPartitions=2
unflushThreshold=0
unflushInterval=100
maxSegmentSize=1048576
maxTransferSize=1048576
dataPath=%s

[zookeeper]
zk.zkEnable=%t
zk.zkConnect=%s
zk.zkRoot=%s
zk.zkSessionTimeoutMs=5000
zk.zkConnectionTimeoutMs=10000
zk.zkSyncTimeMs=100

[topic=t]
`, brokerID, s.port, filepath.Join(s.dir, "data"), zk, zkAddr, root)
	cfg, _, err := config.Parse(filepath.Join(s.dir, "server.ini"), []byte(ini))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	return s
}

func (s *site) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *site) start(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := store.Open(store.Options{Dir: s.cfg.System.DataPath, SegmentBytes: s.cfg.System.MaxSegmentSize,
		BrokerID: s.cfg.System.BrokerID, DefaultPolicy: store.Policy{UnflushThreshold: 0, UnflushInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if s.attach != nil {
		s.detach = s.attach(st)
	}
	bo := broker.Options{Config: s.cfg, Store: st, ListenAddr: s.addr(), SyncSlave: s.slave, SyncReceiver: s.recv}
	if s.zk {
		s.reg, err = registry.New(context.Background(), registry.Options{Connect: s.cfg.ZooKeeper.Connect, Root: s.cfg.ZooKeeper.Root,
			SessionTimeout: 5 * time.Second, ConnectionTimeout: 10 * time.Second, SyncTime: 100 * time.Millisecond,
			BrokerID: s.cfg.System.BrokerID, Host: "127.0.0.1", Port: s.port})
		if err != nil {
			t.Fatal(err)
		}
		bo.Registry = s.reg
	}
	br, err := broker.New(bo)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.store, s.br = st, br
}

// stop closes the broker's listener and connections, then the store, as a
// process dying would (its ZooKeeper session, if any, is closed too).
func (s *site) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.br == nil {
		return
	}
	s.br.Close()
	if s.detach != nil {
		s.detach()
		s.detach = nil
	}
	if s.reg != nil {
		s.reg.Close()
		s.reg = nil
	}
	s.store.Close()
	s.br, s.store = nil, nil
}

// ends returns each partition's readable end, nil while stopped.
func (s *site) ends() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store == nil {
		return nil
	}
	out := map[string]int64{}
	for _, p := range s.store.Partitions() {
		out[p.Topic+"-"+strconv.Itoa(p.Partition)] = p.Max
	}
	return out
}

// syncLag is brokerId 1's lag toward hf computed from the two stores'
// partition ends: what the master's replicator reports for a sync slave.
type syncLag struct{ master, slave *site }

func (l syncLag) Lag() []georeplicator.GroupLag {
	m, s := l.master.ends(), l.slave.ends()
	g := georeplicator.GroupLag{Group: "sync-hf", SlaveID: 0, Connected: s != nil}
	for k, end := range m {
		var p int
		topic := k[:len(k)-2]
		p, _ = strconv.Atoi(k[len(k)-1:])
		g.Partitions = append(g.Partitions, georeplicator.PartitionLag{Topic: topic, Partition: p, MasterEnd: end,
			SlaveEnd: s[k], Bytes: max(0, end-s[k])})
	}
	return []georeplicator.GroupLag{g}
}

// e2eRoot returns the test's ZooKeeper and a fresh root in it, removed when
// the test ends.
func e2eRoot(t *testing.T, name string) (zkAddr, root string) {
	zkAddr = testutil.ZooKeeper(t)
	root = fmt.Sprintf("/metaq-test-%s-%d", name, time.Now().UnixNano())
	t.Cleanup(func() { removeRoot(zkAddr, root) })
	return zkAddr, root
}

// zkProducer is a producer finding brokers through ZooKeeper at root,
// closed when the test ends.
func zkProducer(t *testing.T, ctx context.Context, zkAddr, root string) *client.Producer {
	t.Helper()
	c, err := client.New(ctx, client.Config{ZKServers: []string{zkAddr}, ZKRoot: root, ZKSyncTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	prod, err := client.NewProducer(c)
	if err != nil {
		t.Fatal(err)
	}
	return prod
}

// pinnedConsumer is a consumer in hf that prefers its local replica within
// a 1s lag limit, routed by router; its client is closed when the test
// ends, the consumer by the caller.
func pinnedConsumer(t *testing.T, ctx context.Context, zkAddr, root, group string, router client.Router, routeEvery time.Duration) *client.Consumer {
	t.Helper()
	cc, err := client.New(ctx, client.Config{ZKServers: []string{zkAddr}, ZKRoot: root, ZKSyncTime: 100 * time.Millisecond,
		DialTimeout: time.Second, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	cons, err := client.NewConsumer(cc, group, client.WithSite("hf"), client.WithReadPreference(client.LocalFirst),
		client.WithMaxLag(time.Second), client.WithRouter(router), client.WithRouteInterval(routeEvery),
		client.WithMaxFetchDelay(100*time.Millisecond), client.WithCommitInterval(200*time.Millisecond), client.WithFetchSize(512))
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// removeRoot deletes a test root recursively.
func removeRoot(zkAddr, root string) {
	r, err := registry.New(context.Background(), registry.Options{Connect: zkAddr, ConnectionTimeout: 5 * time.Second})
	if err != nil {
		return
	}
	defer r.Close()
	r.DeleteTree(context.Background(), root)
}

// answers records the distinct successive answers of the router the
// consumer asks before (re)connecting a partition.
type answers struct {
	r  client.Router
	mu sync.Mutex
	// seq is the sequence of distinct answers for brokerId 1.
	seq []string
}

func (a *answers) Route(ctx context.Context, req client.RouteRequest) (string, error) {
	addr, err := a.r.Route(ctx, req)
	if err == nil && req.BrokerID == 1 {
		a.mu.Lock()
		if len(a.seq) == 0 || a.seq[len(a.seq)-1] != addr {
			a.seq = append(a.seq, addr)
		}
		a.mu.Unlock()
	}
	return addr, err
}

func (a *answers) last() (string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seq) == 0 {
		return "", nil
	}
	return a.seq[len(a.seq)-1], append([]string(nil), a.seq...)
}

// startGossip starts one bundle's gossip member with the e2e tests' key,
// label and fast timing, closed when the test ends.
func startGossip(t *testing.T, ctx context.Context, o topology.Options) *topology.Topology {
	t.Helper()
	o.Key, o.Label, o.Timing, o.RefreshInterval = []byte("0123456789abcdef"), "metaq-e2e", topology.FastTiming(), 50*time.Millisecond
	if o.Bind == "" {
		o.Bind = "127.0.0.1:0"
	}
	tp, err := topology.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

func TestE2EPinnedConsumerFollowsSite(t *testing.T) {
	zkAddr, root := e2eRoot(t, "e2e")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	hf := newSite(t, 1, zkAddr, root, false) // sync slave: never in ZooKeeper (MetaQ's gregor)
	hf.recv = true
	bj := newSite(t, 1, zkAddr, root, true)
	bj.slave = hf.addr()
	sh := newSite(t, 2, zkAddr, root, true)
	hf.start(t)
	bj.start(t)
	sh.start(t)
	defer hf.stop()
	defer bj.stop()
	defer sh.stop()

	// Gossip: one member per bundle.
	gBJ := startGossip(t, ctx, topology.Options{Site: "bj", Role: topology.RoleMaster, BrokerID: 1, ServeURL: "meta://" + bj.addr(),
		Lag: syncLag{bj, hf}})
	gSH := startGossip(t, ctx, topology.Options{Site: "sh", Role: topology.RoleMaster, BrokerID: 2, ServeURL: "meta://" + sh.addr(), Join: []string{gBJ.Addr()}})
	// Consumers reach hf through a proxy so the test can see them connect.
	hfProxy, err := netproxy.New(hf.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer hfProxy.Close()
	hfOpts := topology.Options{Site: "hf", Role: topology.RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://" + hfProxy.Addr(), Join: []string{gBJ.Addr()}}
	gHF := startGossip(t, ctx, hfOpts)
	hfOpts.Bind = gHF.Addr()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if s := gSH.Sites(); s["bj"] != topology.StateAlive || s["hf"] != topology.StateAlive || s["sh"] != topology.StateAlive {
			return fmt.Errorf("sites %v", s)
		}
		return nil
	})

	// Produce a backlog through ZooKeeper (sync replication copies brokerId
	// 1's half to hf before each put is acknowledged).
	prod := zkProducer(t, ctx, zkAddr, root)
	produce := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := prod.Send(ctx, &client.Message{Topic: "t", Payload: []byte(fmt.Sprintf("m%05d", i))}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	const first, second = 600, 200
	produce(0, first)

	// The consumer in hf, pinned to its local replica by the router of a
	// bundle that survives (sh).
	router := &answers{r: topology.NewRouter(gSH)}
	var mu sync.Mutex
	got := map[string]int{}
	fromBroker1 := 0
	cons := pinnedConsumer(t, ctx, zkAddr, root, "pinned", router, 200*time.Millisecond)
	cons.Subscribe("t", func(ctx context.Context, m *client.Message) error {
		time.Sleep(2 * time.Millisecond) // a consumer that takes its time, so the failure hits mid-stream
		mu.Lock()
		got[string(m.Payload)]++
		if m.Partition.BrokerID == 1 {
			fromBroker1++
		}
		mu.Unlock()
		return nil
	})
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	consumed := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(got), fromBroker1
	}

	// Let some of brokerId 1's partitions be read from hf, then kill hf.
	testutil.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		if _, b1 := consumed(); b1 < 50 {
			return fmt.Errorf("%d from broker 1", b1)
		}
		if last, seq := router.last(); last != hfProxy.Addr() || len(seq) != 1 {
			return fmt.Errorf("router answers %v, want only hf %s", seq, hfProxy.Addr())
		}
		return nil
	})
	if n, _ := consumed(); n >= first {
		t.Fatalf("backlog consumed before the failure (%d): the test would prove nothing", n)
	}
	died := time.Now()
	hf.stop()
	gHF.Crash()
	detect := gSH.DetectionTime()
	_, b1AtDeath := consumed()
	testutil.Eventually(t, detect+2*time.Second, 10*time.Millisecond, func() error {
		if last, seq := router.last(); last != bj.addr() {
			return fmt.Errorf("consumer not routed to the master; answers %v", seq)
		}
		return nil
	})
	t.Logf("routed to the master %v after hf died (detection bound %v)", time.Since(died), detect)
	// brokerId 1 is served by bj alone now: its partitions keep moving.
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if _, b1 := consumed(); b1 <= b1AtDeath {
			return fmt.Errorf("no progress on broker 1 since hf died (%d)", b1)
		}
		return nil
	})

	// Everything of the first batch arrives, from bj and sh.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n, _ := consumed(); n < first {
			return fmt.Errorf("%d of %d consumed", n, first)
		}
		return nil
	})

	// hf returns on the same port and data; the consumer moves back.
	hf.start(t)
	startGossip(t, ctx, hfOpts)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if last, seq := router.last(); last != hfProxy.Addr() {
			return fmt.Errorf("consumer not routed back to hf; answers %v", seq)
		}
		return nil
	})
	produce(first, second)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if hfProxy.Conns() == 0 {
			return fmt.Errorf("no consumer connection to hf")
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n, _ := consumed(); n < first+second {
			return fmt.Errorf("%d of %d consumed", n, first+second)
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for i := 0; i < first+second; i++ {
		k := fmt.Sprintf("m%05d", i)
		if got[k] == 0 {
			t.Errorf("lost %s", k)
		}
		dups += got[k] - 1
	}
	// The consumer keeps its position across the switch (offsets are the same
	// on every replica) and drops redelivered ids: duplicates are bounded by
	// one fetch per switch and are normally none.
	if dups > 2*20 {
		t.Errorf("%d duplicates over two switches", dups)
	}
	_, seq := router.last()
	t.Logf("consumed %d messages, %d duplicates, router answers for broker 1: %v", first+second, dups, seq)
}
