package bundle

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/client"
	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/broker/wire"
	"metaq/configsync"
	"metaq/internal/testutil"
)

// TestTransactionsComponent: a bundle answers transactions (MetaQ's local
// transaction: begin, put, commit) through the broker, and the message is
// invisible until commit.
func TestTransactionsComponent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startSite(t, dir, sharedINI("", "", "[topic=test]\n"), siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	if _, err := os.Stat(filepath.Join(dir, "data", "transactions")); err != nil {
		t.Fatalf("transaction journal directory: %v", err)
	}
	nc, err := net.Dial("tcp", b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dec := wire.NewDecoder(bufio.NewReader(nc))
	opaque := int32(0)
	do := func(cmd wire.Command) wire.Command {
		t.Helper()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(cmd.AppendTo(nil)); err != nil {
			t.Fatal(err)
		}
		resp, err := dec.Decode()
		if err != nil {
			t.Fatalf("%s: %v", cmd.Name(), err)
		}
		return resp
	}
	key := "TX:s1:1"
	id, err := wire.ParseTxKey(key)
	if err != nil {
		t.Fatal(err)
	}
	tx := func(typ wire.TxType) *wire.Result {
		opaque++
		r, ok := do(&wire.Transaction{TxKey: key, Tx: id, SessionID: "s1", Type: typ, Opaque: opaque}).(*wire.Result)
		if !ok {
			t.Fatalf("%s: not a result", typ)
		}
		return r
	}
	get := func() wire.Command {
		opaque++
		return do(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 1 << 20, Opaque: opaque})
	}
	if r := tx(wire.TxBegin); !r.OK() {
		t.Fatalf("begin: %d %s", r.Code, r.Body)
	}
	body := []byte("inside a transaction")
	opaque++
	if r := do(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(body), TxKey: key, Tx: id, Body: body, Opaque: opaque}).(*wire.Result); !r.OK() {
		t.Fatalf("put in tx: %d %s", r.Code, r.Body)
	}
	if v, ok := get().(*wire.Value); ok && bytes.Contains(v.Data, body) {
		t.Fatal("message visible before commit")
	}
	if r := tx(wire.TxCommitOnePhase); !r.OK() {
		t.Fatalf("commit: %d %s", r.Code, r.Body)
	}
	v, ok := get().(*wire.Value)
	if !ok || !bytes.Contains(v.Data, body) {
		t.Fatalf("after commit: %#v", v)
	}
	if st, _ := b.Status().Components[compTxn].(map[string]any); st["running"] != true {
		t.Errorf("status: %v", b.Status().Components)
	}
	// Close removes the handler before closing the journal.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicationComponents: a master with [replication] ships to a slave
// started with masterAddress; the slave's store converges, `stats slave`
// reports the link on both sides and slave-status answers on the slave.
func TestReplicationComponents(t *testing.T) {
	t.Parallel()
	shared := sharedINI("", "", "[topic=test]\nnumPartitions=2\n")
	root := t.TempDir()
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	ship := mustComp[*shipperComponent](t, master)
	if ship.Addr() == "" {
		t.Fatal("shipper has no address")
	}
	slave := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: ship.Addr(), natsURL: "nats://127.0.0.1:1"})
	produce(t, master.Broker.Addr().String(), "test", 50, "r")
	waitCaughtUp(t, master, slave, "test", 20*time.Second)

	for p := range 2 {
		mb, _ := master.Store.Read("test", p, 0, 1<<20)
		sb, _ := slave.Store.Read("test", p, 0, 1<<20)
		if !bytes.Equal(mb, sb) {
			t.Errorf("partition %d differs: master %d bytes, slave %d bytes", p, len(mb), len(sb))
		}
	}
	ms := statsOf(master, "slave")
	if !strings.Contains(ms, "meta-slave-group-hf slave_id 1 connected true") {
		t.Errorf("master stats slave:\n%s", ms)
	}
	ss := statsOf(slave, "slave")
	if !strings.Contains(ss, "connected true") || !strings.Contains(ss, "slave_group meta-slave-group-hf") {
		t.Errorf("slave stats slave:\n%s", ss)
	}
	if !strings.Contains(statsOf(slave, ""), "slave true") {
		t.Errorf("slave's system stats do not say slave true")
	}
	st, err := slave.SlaveStatus()
	if err != nil {
		t.Fatal(err)
	}
	if rep, ok := st.(SlaveReport); !ok || rep.Method != methodStream || rep.Stream == nil || !rep.Stream.Connected || rep.Stream.MasterAddr != ship.Addr() {
		t.Errorf("slave-status = %#v", st)
	}
	if _, err := master.SlaveStatus(); err == nil {
		t.Error("slave-status on the master did not fail")
	}
}

// TestReplicationThroughZooKeeper: the master publishes its replication
// address under ids/<id>/replication and a slave without masterAddress finds
// it there; the slave registers as slave<id>.
func TestReplicationThroughZooKeeper(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	e := newEnv(t, "") // for the unique root and its cleanup
	t.Cleanup(func() {
		removeTree(zk, e.root+"-view-bj")
		removeTree(zk, e.root+"-view-hf")
	})
	shared := sharedINI(zk, e.root, "[topic=test]\n")
	root := t.TempDir()
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	ship := mustComp[*shipperComponent](t, master)
	zc := zkClient(t, e)
	data, _, err := zc.Get(context.Background(), e.root+"/brokers/ids/0/replication")
	if err != nil || string(data) != ship.Addr() {
		t.Fatalf("replication node = %q %v, want %s", data, err, ship.Addr())
	}
	slave := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://127.0.0.1:1",
		join: []string{master.Topology().Addr()}})
	produce(t, master.Broker.Addr().String(), "test", 20, "z")
	waitCaughtUp(t, master, slave, "test", 20*time.Second)
	if _, _, err := zc.Get(context.Background(), e.root+"/brokers/ids/0/slave1"); err != nil {
		t.Errorf("slave1 not registered: %v", err)
	}
	// hf's bundle keeps hf's site view: broker 0 points at hf's replica.
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		data, _, err := zc.Get(context.Background(), e.root+"-view-hf/brokers/ids/0/master")
		if err != nil {
			return err
		}
		if want := slave.Broker.URL(); !registry.SameViewURL(string(data), want) {
			return fmt.Errorf("view master = %s, want %s", data, want)
		}
		return nil
	})
	master.Close()
	if ok, _, _ := zc.Exists(context.Background(), e.root+"/brokers/ids/0/replication"); ok {
		t.Error("replication node left after the master closed")
	}
}

// TestConfigSyncComponent: the master embeds NATS; a push of the shared
// server.ini with a new topic reaches both sites' agents, which reload, and
// a producer can use the topic at once.
func TestConfigSyncComponent(t *testing.T) {
	t.Parallel()
	shared := sharedINI("", "", "[topic=test]\n")
	master, slave, cs := configSyncSites(t, shared, "")
	newINI := []byte(shared + "\n[topic=pushed]\nnumPartitions=2\n")
	pushServerINI(t, cs, newINI)
	for _, b := range []*Bundle{master, slave} {
		if _, ok := b.Config().TopicFor("pushed"); !ok {
			t.Errorf("%s: topic not in the running config", b.Config().Site.Name)
		}
		got, _ := os.ReadFile(b.opts.ConfigPath)
		if !bytes.Equal(got, newINI) {
			t.Errorf("%s: server.ini on disk is not the pushed bytes", b.Config().Site.Name)
		}
		if v := mustComp[*configSyncComponent](t, b).Agent().State().Version; v == 0 {
			t.Errorf("%s: agent state version 0", b.Config().Site.Name)
		}
	}
	produce(t, master.Broker.Addr().String(), "pushed", 3, "p")
	waitCaughtUp(t, master, slave, "pushed", 10*time.Second)
}

// TestConfigSyncForwardMaxInFlightBytes: a push of the shared server.ini
// that sets [site] forwardMaxInFlightBytes reaches the running gateway of
// hf, a slave site that forwards puts, without a restart (the reload was
// tested at the broker only).
func TestConfigSyncForwardMaxInFlightBytes(t *testing.T) {
	t.Parallel()
	shared := sharedINI("", "", "[topic=test]\n")
	_, slave, cs := configSyncSites(t, shared, "[site]\nforwardPuts=true\n")
	if rep := gatewayReport(slave); rep == nil || rep.MaxInFlightBytes != broker.DefaultForwardMaxInFlightBytes {
		t.Fatalf("hf's gateway before the push: %+v, want the default bound %d", rep, broker.DefaultForwardMaxInFlightBytes)
	}
	const bound = 24 << 20
	newINI := strings.Replace(shared, "[site]\noverlay=site.ini\n", fmt.Sprintf("[site]\noverlay=site.ini\nforwardMaxInFlightBytes=%d\n", bound), 1)
	if newINI == shared {
		t.Fatal("the shared server.ini has no [site] section to change")
	}
	pushServerINI(t, cs, []byte(newINI))
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if rep := gatewayReport(slave); rep == nil || rep.MaxInFlightBytes != bound {
			return fmt.Errorf("hf's gateway after the push: %+v, want maxInFlightBytes %d", rep, bound)
		}
		return nil
	})
}

// configSyncSites starts bj, a master embedding NATS, and hf, its slave
// (slaveOverlay appended to its overlay), with shared as their server.ini,
// and waits for both configsync agents; it returns them and bj's
// configsync component.
func configSyncSites(t *testing.T, shared, slaveOverlay string) (master, slave *Bundle, cs *configSyncComponent) {
	t.Helper()
	root := t.TempDir()
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	master = startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	cs = mustComp[*configSyncComponent](t, master)
	if cs.NATSURL() == "" {
		t.Fatal("master runs no embedded NATS")
	}
	ship := mustComp[*shipperComponent](t, master)
	slave = startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: ship.Addr(),
		natsURL: cs.NATSURL(), extraOverlay: slaveOverlay})
	for _, b := range []*Bundle{master, slave} {
		select {
		case <-mustComp[*configSyncComponent](t, b).Agent().Ready():
		case <-time.After(15 * time.Second):
			t.Fatal("agent not ready")
		}
	}
	return master, slave, cs
}

// pushServerINI pushes data as server.ini to bj and hf through cs's NATS
// and fails the test unless both took it.
func pushServerINI(t *testing.T, cs *configSyncComponent, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := configsync.NewClient(ctx, configsync.ClientOptions{URL: cs.NATSURL(), SigningKey: pushKey})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rep, err := cl.Push(ctx, configsync.PushOptions{File: "server.ini", Data: data, Sites: []string{"bj", "hf"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("push: %v (%+v)", err, rep)
	}
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("sites failed: %v (%+v)", f, rep)
	}
}

// TestTopologyAndDashboard: two sites gossip; the router sends a local-first
// consumer at hf to hf's replica; the dashboard serves the snapshot, /lag,
// and Prometheus series for broker, replication, lag, configsync and gossip;
// a configured token is required.
func TestTopologyAndDashboard(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	shared := sharedINI("", "", "[topic=test]\n")
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0", extraOverlay: "[site]\ntoken=s3cret\n"})
	mt := mustComp[*topologyComponent](t, master)
	ship := mustComp[*shipperComponent](t, master)
	slave := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: ship.Addr(),
		natsURL: mustComp[*configSyncComponent](t, master).NATSURL(), join: []string{mt.Topology().Addr()}})
	st := mustComp[*topologyComponent](t, slave)
	produce(t, master.Broker.Addr().String(), "test", 10, "d")
	waitCaughtUp(t, master, slave, "test", 20*time.Second)

	slaveAddr := slave.Broker.Addr().String()
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		if n := len(mt.Topology().Members()); n != 2 {
			return fmt.Errorf("master sees %d members", n)
		}
		addr, err := st.Router().Route(context.Background(), client.RouteRequest{Topic: "test", BrokerID: 0, Site: "hf", Preference: client.LocalFirst})
		if err != nil {
			return err
		}
		if addr != slaveAddr {
			return fmt.Errorf("routed to %s, want hf's replica %s", addr, slaveAddr)
		}
		return nil
	})
	// The master side stays the choice for a master-only consumer.
	if addr, err := st.Router().Route(context.Background(), client.RouteRequest{Topic: "test", BrokerID: 0, Site: "hf", Preference: client.MasterOnly}); err != nil || addr != master.Broker.Addr().String() {
		t.Errorf("master-only route = %s %v", addr, err)
	}

	dash := mustComp[*dashboardComponent](t, master)
	base := "http://" + dash.Addr()
	if code, _ := testutil.HTTPDo(t, "GET", base+"/api/snapshot", ""); code != http.StatusUnauthorized {
		t.Errorf("snapshot without the token: %d", code)
	}
	code, body := testutil.HTTPDo(t, "GET", base+"/api/snapshot", "s3cret")
	if code != 200 || !strings.Contains(string(body), `"name": "test"`) || !strings.Contains(string(body), `"site": "bj"`) {
		t.Errorf("snapshot: %d %s", code, body)
	}
	testutil.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		code, body := testutil.HTTPDo(t, "GET", base+"/lag", "s3cret")
		if code != 200 || !strings.Contains(string(body), `"slaveGroup": "meta-slave-group-hf"`) && !strings.Contains(string(body), `"slaveGroup":"meta-slave-group-hf"`) {
			return fmt.Errorf("/lag: %d %s", code, body)
		}
		return nil
	})
	_, metrics := testutil.HTTPDo(t, "GET", base+"/metrics", "s3cret")
	for _, want := range []string{"metaq_broker_up 1", "metaq_partition_bytes{partition=\"0\",topic=\"test\"}",
		"metaq_replication_slave_connected{slave_group=\"meta-slave-group-hf\",slave_id=\"1\"} 1",
		"metaq_replication_lag_bytes", "metaq_configsync_version", "metaq_gossip_members", "metaq_site_up{site=\"hf\"} 1",
		"metaq_broker_connections_refused_total{limit=\"maxConnections\"} 0", "metaq_broker_connections_closed_total{reason=\"idle\"} 0",
		"metaq_broker_buffered_bytes_limit 2.68435456e+08"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The slave's dashboard needs no token (loopback, none configured).
	sd := mustComp[*dashboardComponent](t, slave)
	var snap struct {
		Role   string
		Health []struct {
			Name string
			OK   bool
		}
	}
	getJSON(t, "http://"+sd.Addr()+"/api/snapshot", &snap)
	if snap.Role != "slave" {
		t.Errorf("slave snapshot role %q", snap.Role)
	}
	_, sm := testutil.HTTPDo(t, "GET", "http://"+sd.Addr()+"/metrics", "")
	if !strings.Contains(string(sm), "metaq_replication_connected 1") {
		t.Errorf("slave /metrics lacks metaq_replication_connected 1")
	}
	if !strings.Contains(string(sm), "metaq_replication_diverged_partitions 0") {
		t.Errorf("slave /metrics lacks metaq_replication_diverged_partitions 0")
	}

	// Every component stops its goroutines: closing both bundles leaves the
	// gossip, dashboard and replication listeners closed.
	addrs := []string{dash.Addr(), sd.Addr(), ship.Addr()}
	slave.Close()
	master.Close()
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", a)
		}
	}
}

// TestAutoSyncMasterConfig: a slave with autoSyncMasterConfig=true takes the
// master's server.ini (its own overlay stays) and reloads, so a topic only
// the master's file has becomes a topic of the slave.
func TestAutoSyncMasterConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	masterINI := sharedINI("", "", "[topic=test]\n\n[topic=extra]\nnumPartitions=3\n")
	master := startSite(t, filepath.Join(root, "bj"), masterINI, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	// Without configsync on the slave: with it, configsync owns server.ini
	// (TestAutoSyncYieldsToConfigsync).
	slaveINI := sharedINI("", "", "[topic=test]\n", noConfigSync)
	slave := startSite(t, filepath.Join(root, "hf"), slaveINI, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: master.ReplicationAddr(), noNATS: true, autoSync: true})
	if _, ok := findComp[*configSyncComponent](slave); ok {
		t.Fatal("the slave runs configsync")
	}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		tc, ok := slave.Config().TopicFor("extra")
		if !ok || tc.NumPartitions != 3 {
			return fmt.Errorf("slave's topics: %v", slave.Config().Topics)
		}
		return nil
	})
	got, _ := os.ReadFile(filepath.Join(root, "hf", "server.ini"))
	if string(got) != masterINI {
		t.Errorf("slave's server.ini is not the master's")
	}
	if slave.Config().Site.Name != "hf" || slave.Config().System.DataPath != filepath.Join(root, "hf", "data") {
		t.Errorf("slave lost its overlay: site %q data %q", slave.Config().Site.Name, slave.Config().System.DataPath)
	}
}

// TestAutoSyncYieldsToConfigsync: with autoSyncMasterConfig=true and a
// [nats] section, configsync owns server.ini: the slave warns at start and
// keeps its own file.
func TestAutoSyncYieldsToConfigsync(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	masterINI := sharedINI("", "", "[topic=test]\n\n[topic=extra]\nnumPartitions=3\n")
	master := startSite(t, filepath.Join(root, "bj"), masterINI, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	var logs testutil.SyncBuffer
	slaveINI := sharedINI("", "", "[topic=test]\n")
	slave := startSite(t, filepath.Join(root, "hf"), slaveINI, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: master.ReplicationAddr(), natsURL: master.NATSURL(), autoSync: true,
		logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "autoSyncMasterConfig=true is ignored: configsync owns server.ini") {
		t.Errorf("no warning at start:\n%s", logs.String())
	}
	produce(t, master.Broker.Addr().String(), "test", 1, "x")
	waitCaughtUp(t, master, slave, "test", 15*time.Second)
	if _, ok := slave.Config().TopicFor("extra"); ok {
		t.Error("the slave took the master's file although configsync owns it")
	}
	if got, _ := os.ReadFile(filepath.Join(root, "hf", "server.ini")); string(got) != slaveINI {
		t.Error("the slave's server.ini was replaced")
	}
}

// TestAutoSyncKeepsSlaveIdentity: with autoSyncMasterConfig=true and each
// site's own keys written in server.ini itself (MetaQ's layout, no
// overlay), the slave takes the master's topics but stays itself: its site
// name, ports, data path, gossip bind and replication listener are its own,
// in the running configuration and in the file it restarts from, and its
// dashboard keeps its own port (a key that needs a restart waits for it).
func TestAutoSyncKeepsSlaveIdentity(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	hostINI := func(name string, port, dashPort, gossipPort int, extraTopics string) string {
		return fmt.Sprintf(`[system]
brokerId=0
hostName=127.0.0.1
serverPort=%d
dashboardHttpPort=%d
dataPath=%s
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576

[zookeeper]
zk.zkEnable=false
zk.zkConnect=127.0.0.1:1

[site]
name=%s
adminAddr=127.0.0.1:0

[replication]
listen=127.0.0.1:0

[gossip]
bind=127.0.0.1:%d
probeIntervalMs=100

[topic=test]
%s`, port, dashPort, filepath.Join(root, name, "data"), name, gossipPort, extraTopics)
	}
	ports := func() (int, int, int) {
		return testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	}
	mPort, mDash, mGossip := ports()
	master := startSite(t, filepath.Join(root, "bj"), hostINI("bj", mPort, mDash, mGossip, "\n[topic=extra]\nnumPartitions=3\n"),
		siteSpec{name: "bj", noNATS: true})
	sPort, sDash, sGossip := ports()
	slaveFile := filepath.Join(root, "hf", "server.ini")
	slave := startSite(t, filepath.Join(root, "hf"), hostINI("hf", sPort, sDash, sGossip, ""), siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: master.ReplicationAddr(), noNATS: true, autoSync: true})
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		if tc, ok := slave.Config().TopicFor("extra"); !ok || tc.NumPartitions != 3 {
			return fmt.Errorf("slave's topics: %v", slave.Config().Topics)
		}
		return nil
	})
	identity := func(where string, cfg *config.Server) {
		t.Helper()
		if cfg.Site.Name != "hf" || cfg.System.ServerPort != sPort || cfg.System.DashboardHTTPPort != sDash ||
			cfg.System.DataPath != filepath.Join(root, "hf", "data") || cfg.Gossip.Bind != fmt.Sprintf("127.0.0.1:%d", sGossip) {
			t.Errorf("%s: the slave took the master's identity: site %q serverPort %d dashboardHttpPort %d dataPath %q gossip bind %q",
				where, cfg.Site.Name, cfg.System.ServerPort, cfg.System.DashboardHTTPPort, cfg.System.DataPath, cfg.Gossip.Bind)
		}
	}
	identity("running", slave.Config())
	if got, want := slave.DashboardAddr(), fmt.Sprintf("127.0.0.1:%d", sDash); got != want {
		t.Errorf("slave's dashboard on %s, want its own %s", got, want)
	}
	onDisk, _, err := config.Load(slaveFile)
	if err != nil {
		t.Fatalf("the slave's synced server.ini does not load: %v", err)
	}
	identity("file for the restart", onDisk)
	if _, ok := onDisk.TopicFor("extra"); !ok {
		t.Error("the synced file lacks the master's topic")
	}
	// The next offer of the same file changes nothing.
	before, _ := os.ReadFile(slaveFile)
	if err := syncMasterConfig(context.Background(), slave, master.Config().Raw); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(slaveFile); !bytes.Equal(before, after) {
		t.Errorf("the same master file offered again rewrote the slave's:\n%s\n---\n%s", before, after)
	}
}
