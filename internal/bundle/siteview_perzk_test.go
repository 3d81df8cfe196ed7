package bundle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestSiteViewPerSiteZooKeeper runs deploy/'s layout of one ZooKeeper
// ensemble per site with two real servers: bj's master registers in bj's
// ensemble, hf's slave in hf's, and a consumer in hf uses zkRoot
// <root>-view-hf on hf's ensemble (the one-line change of a Java consumer).
//
//   - while hf is healthy, the view points at hf's replica;
//   - when hf's replication link breaks, hf's view falls back to bj, and
//     returns to hf once it reconnects;
//   - when hf's bundle is down, bj (the only other live bundle, which holds a
//     session to hf's ensemble) keeps hf's view in hf's ensemble: it points
//     at bj, and the consumer on the view keeps receiving what bj stores;
//   - when hf's bundle returns, the view points at hf again.
func TestSiteViewPerSiteZooKeeper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zkBJ := testutil.ZooKeeper(t)
	zkHF := testutil.SecondZooKeeper(t)
	dir := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zkBJ, zkHF}, "bj", "hf")
	view := zkRoot + "-view-hf"
	shared := sharedINI(zkBJ, zkRoot, "[topic=orders]\nnumPartitions=2\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(dir, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	bjTopo := mustComp[*topologyComponent](t, bj)

	repl := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hfSpec := siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: repl.Addr(),
		natsURL: mustComp[*configSyncComponent](t, bj).NATSURL(), join: []string{bjTopo.Topology().Addr()},
		// hf's overlay points it at hf's own ensemble.
		extraOverlay: "[zookeeper]\nzk.zkConnect=" + zkHF + "\n"}
	hf := startSite(t, filepath.Join(dir, "hf"), shared, hfSpec)

	produceWith(t, client.Config{ZKServers: []string{zkBJ}, ZKRoot: zkRoot}, "orders", 20, "a")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	zc := zkClient(t, &testEnv{zk: zkHF, root: zkRoot})
	viewMaster := func(want string, why string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			data, _, err := zc.Get(context.Background(), view+"/brokers/ids/0/master")
			if err != nil || !registry.SameViewURL(string(data), want) {
				return fmt.Errorf("%s: hf's view master in hf's ZooKeeper = %q %v, want %s", why, data, err, want)
			}
			parts, _, err := zc.Get(context.Background(), view+"/brokers/topics-sub/orders/0-m")
			if err != nil {
				return fmt.Errorf("%s: topics-sub/orders/0-m: %v", why, err)
			}
			if string(parts) != `{"numParts":2,"broker":"0-m"}` {
				return fmt.Errorf("%s: topics-sub/orders/0-m = %s", why, parts)
			}
			return nil
		})
	}
	viewMaster(hf.Broker.URL(), "hf healthy")

	// hf's replication breaks: the view falls back to bj, then returns.
	repl.SetRefuse(true)
	repl.CutAll()
	viewMaster(bj.Broker.URL(), "hf's replication broken")
	repl.SetRefuse(false)
	viewMaster(hf.Broker.URL(), "hf's replication back")

	// A consumer on hf's view, in hf's ensemble.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{ZKServers: []string{zkHF}, ZKRoot: view, ZKSyncTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := client.NewConsumer(cl, "hf-readers", client.WithStart(client.StartEarliest()))
	if err != nil {
		t.Fatal(err)
	}
	consumed := consumeDistinct(t, ctx, cons, "orders")
	defer cons.Close(context.Background())
	consumed(20, 40*time.Second)

	// bj reports that group's lag from the offsets it committed in hf's
	// ensemble, labelled with hf's site.
	metricsURL := "http://" + mustComp[*dashboardComponent](t, bj).Addr() + "/metrics"
	testutil.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
		_, body := testutil.HTTPDo(t, "GET", metricsURL, "")
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "metaq_consumer_lag_bytes{") && strings.Contains(line, `group="hf-readers"`) &&
				strings.Contains(line, `site="hf"`) && strings.Contains(line, `root="`+view+`"`) {
				return nil
			}
		}
		return fmt.Errorf("no consumer lag series for hf-readers at site hf in bj's /metrics")
	})

	// hf's bundle dies: bj keeps hf's view, in hf's ensemble.
	hfURL := hf.Broker.URL()
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}
	viewMaster(bj.Broker.URL(), "hf's bundle down")
	if k := bjTopo.Topology().ViewKeeper("hf"); k != bjTopo.Topology().Name() {
		t.Errorf("hf's view keeper = %q, want bj's bundle %q", k, bjTopo.Topology().Name())
	}
	bjGets := statInt(bj, "cmd_get")
	produceWith(t, client.Config{ZKServers: []string{zkBJ}, ZKRoot: zkRoot}, "orders", 20, "b")
	consumed(40, 40*time.Second)
	if statInt(bj, "cmd_get") == bjGets {
		t.Error("the consumer on hf's view read nothing from bj while hf was down")
	}

	// hf returns: the view points at its replica again.
	hf = startSite(t, filepath.Join(dir, "hf"), shared, hfSpec)
	if hf.Broker.URL() == hfURL {
		t.Logf("hf came back at the same url %s", hfURL)
	}
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	viewMaster(hf.Broker.URL(), "hf back")
}
