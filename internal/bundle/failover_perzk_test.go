package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/testutil"
	"metaq/topology"
)

// TestFailoverPerSiteZooKeeper runs deploy/'s layout of one ZooKeeper
// ensemble per site with three real servers (bj's, hf's, gz's) through a
// promotion and a switchover. At every step every site's ensemble holds
// the brokerId's current master under MetaQ's layout (ids/0/master, ids/0,
// topics-pub and topics-sub, the replication address, the generation) and
// every site view points at the master or that site's caught-up replica.
// Go producers (real root) and consumers (their site's view root, and at
// gz a LocalFirst consumer with gz's router on the real root), each pinned
// to one site's ensemble, keep working without a restart, and the
// consumers' offsets in each ensemble stay valid.
//
//  1. bj is master: its registration is in hf's and gz's ensembles too;
//  2. `switchover -to hf` (generation 1): all three show hf; bj, demoted,
//     finds hf in its own ensemble; gz follows hf;
//  3. `switchover -to bj` at hf (generation 2), from a master promoted at
//     run time: all three show bj again;
//  4. bj dies, hf is promoted (generation 3): all three ensembles, bj's
//     included, show hf;
//  5. bj returns as a slave without masterAddress: it finds hf in its own
//     ensemble and registers there as hf's slave.
func TestFailoverPerSiteZooKeeper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zks := map[string]string{"bj": testutil.ZooKeeper(t), "hf": testutil.SecondZooKeeper(t), "gz": testutil.ThirdZooKeeper(t)}
	sites := []string{"bj", "hf", "gz"}
	dir := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zks["bj"], zks["hf"], zks["gz"]}, sites...)
	// Without configsync: its NATS would die with bj.
	shared := sharedINI(zks["bj"], zkRoot, "[topic=orders]\nnumPartitions=2\n", noConfigSync)
	ownZK := func(site string) string { return "[zookeeper]\nzk.zkConnect=" + zks[site] + "\n" }

	bj := startSite(t, filepath.Join(dir, "bj"), shared, siteSpec{name: "bj", noNATS: true})
	bjRepl := mustComp[*shipperComponent](t, bj).Addr()
	join := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(dir, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: bjRepl,
		join: join, noNATS: true, extraOverlay: ownZK("hf")})
	gz := startSite(t, filepath.Join(dir, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: bjRepl,
		join: join, noNATS: true, extraOverlay: ownZK("gz")})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ens := map[string]*registry.Registry{}
	for _, s := range sites {
		ens[s] = zkClient(t, &testEnv{zk: zks[s], root: zkRoot})
	}
	get := func(site, path string) string {
		data, _, err := ens[site].Get(ctx, path)
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return string(data)
	}
	ids := zkRoot + "/brokers/ids/0"
	topicNode := registry.TopicJSON(2, "0-m")
	// wantMaster waits until every site's ensemble registers master.
	wantMaster := func(why string, master *Bundle, repl string, gen uint64) {
		t.Helper()
		start := time.Now()
		defer func() { t.Logf("%s: every ensemble registered the master after %v", why, time.Since(start)) }()
		testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
			for _, s := range sites {
				want := map[string]string{
					ids + "/master": master.Broker.URL(), ids: master.Broker.URL(), ids + "/replication": repl,
					zkRoot + "/brokers/topics-pub/orders/0-m": topicNode, zkRoot + "/brokers/topics-sub/orders/0-m": topicNode,
				}
				for path, w := range want {
					if got := get(s, path); got != w {
						return fmt.Errorf("%s: %s's ZooKeeper: %s = %q, want %q", why, s, path, got, w)
					}
				}
				if g, err := ens[s].Generation(ctx, 0); err != nil || g != gen {
					return fmt.Errorf("%s: %s's ZooKeeper: generation %d %v, want %d", why, s, g, err, gen)
				}
			}
			return nil
		})
	}
	// wantViews waits until each site's view, in that site's ensemble,
	// points at one of the urls allowed for it.
	wantViews := func(why string, allowed map[string][]*Bundle) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
			for site, bs := range allowed {
				view := viewRootFor(zkRoot, site)
				got := get(site, view+"/brokers/ids/0/master")
				var urls []string
				for _, b := range bs {
					urls = append(urls, b.Broker.URL())
				}
				if !slices.ContainsFunc(urls, func(u string) bool { return registry.SameViewURL(got, u) }) {
					return fmt.Errorf("%s: %s's view in its ZooKeeper points at %q, want one of %v", why, site, got, urls)
				}
				if got := get(site, view+"/brokers/topics-sub/orders/0-m"); got != topicNode {
					return fmt.Errorf("%s: %s's view: topics-sub/orders/0-m = %q", why, site, got)
				}
			}
			return nil
		})
	}

	wantMaster("bj master", bj, bjRepl, 0)
	// bj's status says where it is registered besides its own ensemble.
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		st := mustComp[*topologyComponent](t, bj).Status().(map[string]any)
		ens, _ := st["ensembles"].(map[string]EnsembleStatus)
		for _, s := range []string{"hf", "gz"} {
			if e := ens[s]; !e.Connected || !e.MasterRegistered || e.ZooKeeper != zks[s] {
				return fmt.Errorf("bj's status of %s's ensemble: %+v", s, e)
			}
		}
		return nil
	})
	wantViews("bj master", map[string][]*Bundle{"bj": {bj}, "hf": {hf, bj}, "gz": {gz, bj}})

	// A producer on each site's ensemble (real root); a consumer group on
	// each site's view root, in that site's ensemble, as Java consumers are
	// set up; and at gz a Go consumer on gz's ensemble's real root that
	// reads LocalFirst through gz's bundle's router.
	producers := map[string]*client.Producer{}
	type group struct {
		name, site, root string
		consumed         func(int, time.Duration)
	}
	var groups []*group
	newClient := func(site, root string) *client.Client {
		t.Helper()
		c, err := client.New(ctx, client.Config{ZKServers: []string{zks[site]}, ZKRoot: root, ZKSyncTime: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	consume := func(g *group, opts ...client.ConsumerOption) {
		t.Helper()
		opts = append([]client.ConsumerOption{client.WithStart(client.StartEarliest()),
			client.WithCommitInterval(100 * time.Millisecond), client.WithMaxFetchDelay(50 * time.Millisecond)}, opts...)
		cons, err := client.NewConsumer(newClient(g.site, g.root), g.name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		g.consumed = consumeDistinct(t, ctx, cons, "orders")
		t.Cleanup(func() { cons.Close(context.Background()) })
		groups = append(groups, g)
	}
	for _, s := range sites {
		p, err := client.NewProducer(newClient(s, zkRoot), client.WithRetries(100), client.WithRetryBackoff(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		producers[s] = p
		consume(&group{name: "readers-" + s, site: s, root: viewRootFor(zkRoot, s)})
	}
	consume(&group{name: "local-gz", site: "gz", root: zkRoot}, client.WithSite("gz"),
		client.WithReadPreference(client.LocalFirst), client.WithRouter(mustComp[*topologyComponent](t, gz).Router()))
	total := 0
	// round sends 10 messages through every site's producer and waits until
	// every consumer group has them all.
	round := func(tag string, master *Bundle) {
		t.Helper()
		for _, s := range sites {
			for i := range 10 {
				sctx, done := context.WithTimeout(ctx, sendTimeout)
				r, err := producers[s].Send(sctx, &client.Message{Topic: "orders", Payload: []byte(fmt.Sprintf("%s-%s-%d", tag, s, i))})
				done()
				if err != nil {
					t.Fatalf("%s: the producer on %s's ZooKeeper: send #%d: %v", tag, s, i, err)
				}
				if r.Partition.BrokerID != 0 {
					t.Fatalf("%s: sent to broker %d", tag, r.Partition.BrokerID)
				}
			}
		}
		total += 30
		for _, g := range groups {
			g.consumed(total, 60*time.Second)
		}
		// Every group's offsets, in its own site's ensemble under its
		// root, reach the master's partition ends: the same offsets on
		// every site.
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			ends := map[int]int64{}
			for _, p := range master.Store.Partitions() {
				if p.Topic == "orders" {
					ends[p.Partition] = p.Max
				}
			}
			for _, g := range groups {
				offs, err := ens[g.site].OffsetsUnder(ctx, g.root)
				if err != nil {
					return err
				}
				seen := 0
				for _, o := range offs {
					if o.Group != g.name || o.Topic != "orders" {
						continue
					}
					if o.Offset.Offset != ends[o.Part] {
						return fmt.Errorf("%s: group %s in %s's ZooKeeper: partition %d at %d, the master's end %d",
							tag, g.name, g.site, o.Part, o.Offset.Offset, ends[o.Part])
					}
					seen++
				}
				if seen != len(ends) {
					return fmt.Errorf("%s: group %s has %d offsets in %s's ZooKeeper, want %d", tag, g.name, seen, g.site, len(ends))
				}
			}
			return nil
		})
	}
	round("a", bj)

	// 2. `switchover -to hf` at bj (generation 1): bj, demoted, finds hf in
	// its own ensemble.
	switchover := func(from, to *Bundle, toName string, gen uint64) {
		t.Helper()
		rep, err := from.Switchover(ctx, toName, "")
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Following {
			t.Fatalf("switchover report %+v: the old master does not follow the new one", rep)
		}
		if r := from.Broker.WriteRefusal(); r == nil || r.Retry || from.demotedReceiver() == nil || from.promotedShipper() != nil {
			t.Fatalf("the old master after the switchover: write refusal %+v, want 403, and a receiver instead of its shipper", r)
		}
		wantMaster("switchover to "+toName, to, to.promotedShipper().Addr(), gen)
	}
	switchover(bj, hf, "hf", 1)
	wantViews("switchover to hf", map[string][]*Bundle{"bj": {bj, hf}, "hf": {hf}, "gz": {gz, hf}})
	round("b", hf)
	wantFollowsByteIdentical(t, hf, bj, "orders")
	wantFollowsByteIdentical(t, hf, gz, "orders")

	// 3. And back to bj (generation 2), from a master promoted at run time.
	switchover(hf, bj, "bj", 2)
	wantViews("switchover to bj", map[string][]*Bundle{"bj": {bj}, "hf": {hf, bj}, "gz": {gz, bj}})
	round("c", bj)
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	// 4. bj dies; hf is promoted (generation 3). bj's ensemble, which
	// outlives bj's bundle, shows hf too.
	if err := bj.Close(); err != nil {
		t.Fatal(err)
	}
	// Once hf and gz both lost bj (gz gossips it), hf may be promoted.
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, err := hf.Promote(ctx, false)
		if errors.Is(err, ErrMasterReachable) || errors.Is(err, ErrSiblingAhead) {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	hfRepl := hf.promotedShipper().Addr()
	wantMaster("hf promoted", hf, hfRepl, 3)
	wantViews("hf promoted", map[string][]*Bundle{"bj": {hf}, "hf": {hf}, "gz": {gz, hf}})
	round("d", hf)
	wantFollowsByteIdentical(t, hf, gz, "orders")

	// 5. bj returns as a slave, with no masterAddress: its own ensemble
	// leads it to hf, and it registers there as hf's slave.
	bj = startSite(t, filepath.Join(dir, "bj"), shared, siteSpec{name: "bj", slave: true, slaveID: 1, noNATS: true,
		join: []string{mustComp[*topologyComponent](t, hf).Topology().Addr()}})
	wantFollowsByteIdentical(t, hf, bj, "orders")
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if got := get("bj", ids+"/slave1"); got != bj.Broker.URL() {
			return fmt.Errorf("bj's ZooKeeper: ids/0/slave1 = %q, want %s", got, bj.Broker.URL())
		}
		return nil
	})
	wantMaster("bj back as a slave", hf, hfRepl, 3)
	wantViews("bj back as a slave", map[string][]*Bundle{"bj": {bj, hf}, "hf": {hf}, "gz": {gz, hf}})
	round("e", hf)
}

// TestMasterMirrorEndsWhenSteppedDown: what a master mirrors into the other
// sites' ensembles is its registration, replication address and generation
// while it is master, and no master's once it stepped down (a newer
// generation in ZooKeeper), so its entries leave the other ensembles even
// before it is demoted.
func TestMasterMirrorEndsWhenSteppedDown(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	zkRoot := multiSiteRoot(t, []string{zk})
	bj := startSite(t, filepath.Join(t.TempDir(), "bj"), failoverINIZK(zk, zkRoot, "leaseMs=400\n"),
		siteSpec{name: "bj", natsListen: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))})
	repl := mustComp[*shipperComponent](t, bj).Addr()
	static := topology.Mastership{Role: topology.RoleMaster, SlaveID: -1, ReplAddr: repl}
	produce(t, bj.Broker.Addr().String(), "orders", 1, "x") // registers the topic
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		m := bj.masterMirror(static)
		if !m.Master() || m.URL != bj.Broker.URL() || m.ReplicationAddr != repl || m.Topics["orders"].NumPartitions != 2 {
			return fmt.Errorf("bj's mirror %+v, want its master registration with orders and %s", m, repl)
		}
		return nil
	})
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	if _, err := zc.RaiseGeneration(context.Background(), 0, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if m := bj.masterMirror(static); m.Master() {
			return errors.New("bj still mirrors a master registration after stepping down")
		}
		return nil
	})
}

// TestMasterMirrorEndsWhileDemoting: a master that stepped down for
// another site's generation is demoted in steps: its shipper stops, its
// identity records the slave role (with the generation it now follows),
// then it registers as a slave. Between those steps its registration is
// still a master's, no running shipper carries the fence, and its
// mastership's generation is the new master's (a slave's is the one it
// follows): it mirrored itself as master of the new generation and took
// the new master's node in the other sites' ensembles. It mirrors no
// master, and raises no generation, from the moment it stepped down.
func TestMasterMirrorEndsWhileDemoting(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	zkRoot := multiSiteRoot(t, []string{zk})
	gz := startSite(t, filepath.Join(t.TempDir(), "gz"), failoverINIZK(zk, zkRoot, "leaseMs=400\n"),
		siteSpec{name: "gz", natsListen: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))})
	repl := mustComp[*shipperComponent](t, gz).Addr()
	asMaster := topology.Mastership{Role: topology.RoleMaster, SlaveID: -1, ReplAddr: repl}
	// A site promoted at run time has a slave's static role.
	asPromoted := topology.Mastership{Role: topology.RoleSlave, SlaveID: 1}
	produce(t, gz.Broker.Addr().String(), "orders", 1, "x") // registers the topic
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if m := gz.masterMirror(asMaster); !m.Master() {
			return fmt.Errorf("gz's mirror %+v, want its master registration", m)
		}
		return nil
	})
	// The demotion's first steps, as onFence and demote take them; the
	// registration in ZooKeeper is still the master's.
	if !gz.failover.role.StepDown(2, "generation 2 took over") {
		t.Fatal("the role machine did not record the step down")
	}
	if _, err := gz.failover.role.stopShipper(); err != nil {
		t.Fatal(err)
	}
	id, err := gz.identity()
	if err != nil {
		t.Fatal(err)
	}
	if err := id.SetRole(&georeplicator.Role{Name: georeplicator.RoleSlave, Generation: 2, SlaveID: 1,
		SlaveGroup: "meta-slave-group-gz"}); err != nil {
		t.Fatal(err)
	}
	if !gz.Registry.Registration().Master() {
		t.Fatal("the registration is no master's: the window is not reproduced")
	}
	for name, static := range map[string]topology.Mastership{"configured master": asMaster, "promoted master": asPromoted} {
		if m := gz.masterMirror(static); m.Master() {
			t.Errorf("%s, stepped down and demoting: mirrors a master registration of generation %d (%s)", name, m.Generation, m.URL)
		}
		if g := gz.masterGeneration(static); g != 0 {
			t.Errorf("%s, stepped down and demoting: raises generation %d in the other ensembles", name, g)
		}
	}
}

// TestForcedPromotionPerSiteZooKeeper: with one ensemble per site, `promote
// -force` at hf while bj is alive does not wait on bj's registration
// mirrored into hf's ensemble: bj learns the newer generation, steps down
// (it refuses puts) and removes its mirror, and hf registers as master in
// its own ensemble; the generation is raised in bj's ensemble too.
func TestForcedPromotionPerSiteZooKeeper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zkBJ, zkHF := testutil.ZooKeeper(t), testutil.SecondZooKeeper(t)
	dir := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zkBJ, zkHF}, "bj", "hf")
	shared := failoverINIZK(zkBJ, zkRoot, "leaseMs=400\n", noConfigSync)
	bj := startSite(t, filepath.Join(dir, "bj"), shared, siteSpec{name: "bj", noNATS: true})
	hf := startSite(t, filepath.Join(dir, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: mustComp[*shipperComponent](t, bj).Addr(), noNATS: true,
		join:         []string{mustComp[*topologyComponent](t, bj).Topology().Addr()},
		extraOverlay: "[zookeeper]\nzk.zkConnect=" + zkHF + "\n"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zcBJ, zcHF := zkClient(t, &testEnv{zk: zkBJ, root: zkRoot}), zkClient(t, &testEnv{zk: zkHF, root: zkRoot})
	master := zkRoot + "/brokers/ids/0/master"
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if data, _, err := zcHF.Get(ctx, master); err != nil || string(data) != bj.Broker.URL() {
			return fmt.Errorf("hf's ZooKeeper: master = %q %v, want bj's mirrored %s", data, err, bj.Broker.URL())
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	rep, err := hf.Promote(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation != 1 {
		t.Fatalf("generation %d, want 1", rep.Generation)
	}
	if data, _, err := zcHF.Get(ctx, master); err != nil || string(data) != hf.Broker.URL() {
		t.Fatalf("hf's ZooKeeper: master = %q %v, want hf %s", data, err, hf.Broker.URL())
	}
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r == nil || !strings.Contains(r.Reason, "no longer master") {
			return fmt.Errorf("bj's write refusal %+v, want it stepped down", r)
		}
		if g, err := zcBJ.Generation(ctx, 0); err != nil || g != 1 {
			return fmt.Errorf("bj's ZooKeeper: generation %d %v, want 1", g, err)
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
}
