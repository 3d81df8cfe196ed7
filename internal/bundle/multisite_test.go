package bundle

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/registry"
	"metaq/configsync"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
	"metaq/topology"
)

// wanDelay is the one-way delay of the emulated WAN between sites.
const wanDelay = 30 * time.Millisecond

func wanProxy(t testing.TB, target string) *netproxy.Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(wanDelay)
	t.Cleanup(func() { p.Close() })
	return p
}

// TestMultiSite runs the seed deployment in process: bj (master), hf and gz
// (async slaves) with ZooKeeper off. Every link between sites (replication,
// NATS, producers at the slave sites writing to the master) crosses an
// in-process WAN proxy with 30 ms each way; gossip runs on loopback.
//
//   - messages produced at bj reach hf and gz byte-identically;
//   - a consumer at hf, pinned to its site by the topology router, reads them
//     from hf's replica and never from bj;
//   - configsync pushes a new topic; every site runs it, and a producer in
//     every site can publish to it (through the master) right away;
//   - the lag report at bj lists both slave groups, caught up.
//
// Without ZooKeeper the slaves find bj by masterAddress and clients use
// static broker lists. With METAQ_TEST_ZK set, TestMultiSiteZooKeeper runs
// the same with every bundle registered under a unique root: producers find
// bj there, and the consumer at hf is an unmodified group consumer whose
// zkRoot is hf's site view, the one-line change of a Java consumer.
func TestMultiSite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	multiSite(t, "")
}

func TestMultiSiteZooKeeper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	multiSite(t, testutil.ZooKeeper(t))
}

func multiSite(t *testing.T, zk string) {
	root := t.TempDir()
	zkRoot := ""
	if zk != "" {
		zkRoot = multiSiteRoot(t, []string{zk}, "bj", "hf", "gz")
	}
	shared := sharedINI(zk, zkRoot, "[topic=orders]\nnumPartitions=2\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))

	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	bjShip := mustComp[*shipperComponent](t, bj)
	bjTopo := mustComp[*topologyComponent](t, bj)
	natsURL := mustComp[*configSyncComponent](t, bj).NATSURL()

	slaves := map[string]*Bundle{}
	bjFrom := map[string]string{} // MetaQ protocol address of bj as each slave site reaches it
	for i, name := range []string{"hf", "gz"} {
		repl := wanProxy(t, bjShip.Addr())
		nats := wanProxy(t, natsListen)
		slaves[name] = startSite(t, filepath.Join(root, name), shared, siteSpec{
			name: name, slave: true, slaveID: i + 1, masterAddr: repl.Addr(),
			natsURL: "nats://" + nats.Addr(), join: []string{bjTopo.Topology().Addr()},
		})
		bjFrom[name] = wanProxy(t, bj.Broker.Addr().String()).Addr()
	}
	hf, gz := slaves["hf"], slaves["gz"]
	bjFrom["bj"] = bj.Broker.Addr().String()

	// Produce at bj; both slaves converge byte for byte.
	const n = 200
	if zk == "" {
		produce(t, bj.Broker.Addr().String(), "orders", n, "order")
	} else {
		produceWith(t, client.Config{ZKServers: []string{zk}, ZKRoot: zkRoot}, "orders", n, "order")
	}
	for name, s := range slaves {
		waitCaughtUp(t, bj, s, "orders", 20*time.Second)
		for p := range 2 {
			mb, _ := bj.Store.Read("orders", p, 0, 1<<20)
			sb, _ := s.Store.Read("orders", p, 0, 1<<20)
			if string(mb) != string(sb) {
				t.Fatalf("%s: partition %d differs from bj", name, p)
			}
		}
	}

	// Gossip: every site sees the other two, and hf's router prefers hf.
	hfTopo := mustComp[*topologyComponent](t, hf)
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		sites := hfTopo.Topology().Sites()
		if len(sites) != 3 {
			return fmt.Errorf("hf sees sites %v", sites)
		}
		addr, err := hfTopo.Router().Route(context.Background(), client.RouteRequest{Topic: "orders", BrokerID: 0, Site: "hf", Preference: client.LocalFirst})
		if err != nil || addr != hf.Broker.Addr().String() {
			return fmt.Errorf("route = %s %v, want hf %s", addr, err, hf.Broker.Addr())
		}
		return nil
	})

	// Consume at hf, pinned through the router: every message arrives, and
	// bj serves no get.
	bjGets := statInt(bj, "cmd_get")
	// Generous: the consumer and the push below share it, and each took
	// tens of seconds at load 60.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var cons *client.Consumer
	if zk == "" {
		cl, err := client.New(ctx, client.Config{Brokers: []string{bjFrom["hf"]}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cons, err = client.NewConsumer(cl, "hf-readers",
			client.WithPartitions(client.Partition{BrokerID: 0, Partition: 0}, client.Partition{BrokerID: 0, Partition: 1}),
			client.WithSite("hf"), client.WithReadPreference(client.LocalFirst), client.WithRouter(hfTopo.Router()),
			client.WithStart(client.StartEarliest()), client.WithOffsetFile(filepath.Join(root, "hf-offsets")))
		if err != nil {
			t.Fatal(err)
		}
	} else {
		// hf's bundle keeps the view; wait until it points at hf's replica.
		view := zkRoot + "-view-hf"
		zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
		testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
			data, _, err := zc.Get(ctx, view+"/brokers/ids/0/master")
			if err != nil || !registry.SameViewURL(string(data), hf.Broker.URL()) {
				return fmt.Errorf("view master = %q %v, want %s", data, err, hf.Broker.URL())
			}
			return nil
		})
		cl, err := client.New(ctx, client.Config{ZKServers: []string{zk}, ZKRoot: view, ZKSyncTime: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cons, err = client.NewConsumer(cl, "hf-readers", client.WithStart(client.StartEarliest()))
		if err != nil {
			t.Fatal(err)
		}
	}
	consumeDistinct(t, ctx, cons, "orders")(n, 20*time.Second)
	cons.Close(context.Background())
	if d := statInt(bj, "cmd_get") - bjGets; d != 0 {
		t.Errorf("bj served %d gets to the pinned consumer", d)
	}
	if statInt(hf, "cmd_get") == 0 {
		t.Error("hf served no get")
	}

	// configsync: push a new topic; every site runs it and a producer in
	// every site publishes to it through the master.
	cs, err := configsync.NewClient(ctx, configsync.ClientOptions{URL: natsURL, SigningKey: pushKey})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	pushed := time.Now()
	rep, err := cs.Push(ctx, configsync.PushOptions{File: "server.ini", Data: []byte(shared + "\n[topic=payments]\nnumPartitions=1\n"),
		Sites: []string{"bj", "hf", "gz"}, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("push failed at %v", f)
	}
	repeated := map[string]bool{}
	for _, site := range []string{"bj", "hf", "gz"} {
		maps.Copy(repeated, produce(t, bjFrom[site], "payments", 1, "from-"+site))
	}
	t.Logf("push to 3 sites and a publish from each site took %v over a %v one-way WAN", time.Since(pushed).Round(time.Millisecond), wanDelay)
	for _, b := range []*Bundle{bj, hf, gz} {
		if _, ok := b.Config().TopicFor("payments"); !ok {
			t.Errorf("%s does not run topic payments", b.Config().Site.Name)
		}
	}
	for _, s := range []*Bundle{hf, gz} {
		waitCaughtUp(t, bj, s, "payments", 20*time.Second)
	}
	// Each site's put once (twice only when it was stored but not
	// acknowledged, then sent again).
	held := storedBodies(t, bj, "payments")
	checkBodies(t, "payments at bj", held, []string{"from-bj-0", "from-hf-0", "from-gz-0"}, repeated)
	if p, err := bj.Store.Partition("payments", 0); err != nil || p.Messages != int64(len(held)) {
		t.Errorf("payments at bj: %+v %v, want the %d messages it holds", p, err, len(held))
	}

	// The lag report at bj: both slave groups, caught up, in their sites.
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		var doc topology.LagDocument
		getJSON(t, "http://"+mustComp[*dashboardComponent](t, bj).Addr()+"/lag", &doc)
		var rows []string
		for _, g := range doc.Groups {
			if g.Bytes != 0 || g.State != topology.LagOK {
				return fmt.Errorf("group %s at %s: %d bytes, %s", g.SlaveGroup, g.Site, g.Bytes, g.State)
			}
			rows = append(rows, g.SlaveGroup+"@"+g.Site)
		}
		sort.Strings(rows)
		if fmt.Sprint(rows) != "[meta-slave-group-gz@gz meta-slave-group-hf@hf]" {
			return fmt.Errorf("lag rows %v", rows)
		}
		return nil
	})
}
