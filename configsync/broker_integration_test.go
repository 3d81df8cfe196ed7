package configsync_test

// Rollout against real in-process brokers: each site runs broker.Broker over
// its own store, the agent reloads it through the bundle-style Reloader, and
// a MetaQ producer (raw protocol) puts to the pushed topic at every site.
// With METAQ_TEST_ZK set, every site also registers in its own ZooKeeper
// root, and the new topic must be registered there as soon as push returns.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/configsync"
	"metaq/internal/testutil"
)

func sharedIni(extra string) []byte {
	return []byte(`;; shared by every site
[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1073741824
maxTransferSize=1048576

[zookeeper]
zk.zkConnect=127.0.0.1:2181
zk.zkEnable=false
zk.zkSyncTimeMs=1

[site]
overlay=site.ini

[topic=test]
` + extra)
}

type brokerSite struct {
	name   string
	path   string
	broker *broker.Broker
	reg    *registry.Registry
	agent  *configsync.Agent
}

func startBrokerSite(t testing.TB, name string, id int, natsURL, zkAddr, zkRoot string) *brokerSite {
	t.Helper()
	dir := t.TempDir()
	s := &brokerSite{name: name, path: filepath.Join(dir, "server.ini")}
	overlay := fmt.Sprintf("[system]\nbrokerId=%d\nserverPort=%d\ndataPath=%s\n\n[site]\nname=%s\n\n[nats]\ntrustedKeys=%s\n",
		id, 20000+id*10, filepath.Join(dir, "data"), name, config.FormatPublicKey(pushKey.Public().(ed25519.PublicKey)))
	if zkAddr != "" {
		// Each datacenter has its own ZooKeeper; here, its own root.
		overlay += fmt.Sprintf("\n[zookeeper]\nzk.zkConnect=%s\nzk.zkEnable=true\nzk.zkRoot=%s/%s\n", zkAddr, zkRoot, name)
	}
	check(t, os.WriteFile(s.path, sharedIni(""), 0o644))
	check(t, os.WriteFile(filepath.Join(dir, "site.ini"), []byte(overlay), 0o644))
	cfg, _, err := config.Load(s.path)
	check(t, err)
	st, err := store.Open(store.Options{Dir: cfg.System.DataPath, BrokerID: cfg.System.BrokerID})
	check(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	opts := broker.Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0"}
	if cfg.ZooKeeper.Enable {
		s.reg, err = registry.New(ctx, registry.Options{Connect: cfg.ZooKeeper.Connect, Root: cfg.ZooKeeper.Root,
			SessionTimeout: 10 * time.Second, ConnectionTimeout: 10 * time.Second, SyncTime: time.Millisecond,
			BrokerID: cfg.System.BrokerID, Host: "127.0.0.1", Port: cfg.System.ServerPort, ConfigChecksum: cfg.Checksum})
		check(t, err)
		opts.Registry = s.reg
	}
	s.broker, err = broker.New(opts)
	check(t, err)
	// The broker runs until its Start context ends: give it the test's lifetime.
	check(t, s.broker.Start(context.Background()))
	// The bundle's wiring: the broker's Reload behind configsync.Reloader.
	s.agent, err = configsync.NewAgent(configsync.Options{ConfigPath: s.path, Running: cfg, URL: natsURL,
		HeartbeatInterval: 200 * time.Millisecond,
		Reloader: configsync.ReloaderFunc(func(_ context.Context, c *config.Server) (config.Changes, error) {
			return s.broker.Reload(c)
		})})
	check(t, err)
	check(t, s.agent.Start(ctx))
	select {
	case <-s.agent.Ready():
	case <-ctx.Done():
		t.Fatalf("%s: agent not ready", name)
	}
	t.Cleanup(func() {
		s.agent.Close()
		s.broker.Close()
		if s.reg != nil {
			s.reg.Close()
		}
		st.Close()
	})
	return s
}

// put sends one MetaQ put and returns the response code.
func put(t testing.TB, addr net.Addr, topic string) int {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	check(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	body := []byte("hello " + topic)
	cmd := &wire.Put{Topic: topic, Partition: 0, Body: body, Checksum: wire.Checksum(body), Opaque: 1}
	_, err = nc.Write(cmd.AppendTo(nil))
	check(t, err)
	resp, err := wire.NewDecoder(bufio.NewReader(nc)).Decode()
	check(t, err)
	r, ok := resp.(*wire.Result)
	if !ok {
		t.Fatalf("put answered %T", resp)
	}
	return r.Code
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pushKey signs this file's pushes; every site trusts it.
var pushKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))

func startBrokerSites(t testing.TB, zkAddr string) (*configsync.Client, []*brokerSite) {
	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	check(t, err)
	t.Cleanup(ns.Close)
	root := fmt.Sprintf("/metaq-test-configsync-%d", rand.Uint64())
	var sites []*brokerSite
	for i, n := range []string{"bj", "hf", "gz"} {
		sites = append(sites, startBrokerSite(t, n, i+1, ns.ClientURL(), zkAddr, root))
	}
	c, err := configsync.NewClient(context.Background(), configsync.ClientOptions{URL: ns.ClientURL(), SigningKey: pushKey})
	check(t, err)
	t.Cleanup(c.Close)
	return c, sites
}

func TestPushedTopicAcceptsPutsAtEveryBroker(t *testing.T) {
	c, sites := startBrokerSites(t, "")
	for _, s := range sites {
		if code := put(t, s.broker.Addr(), "orders"); code == 200 {
			t.Fatalf("%s accepted a put to an unconfigured topic", s.name)
		}
	}
	rep, err := c.Push(context.Background(), configsync.PushOptions{File: "server.ini",
		Data: sharedIni("\n[topic=orders]\nnumPartitions=2\n"), Sites: []string{"bj", "hf", "gz"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("%v %+v", err, rep)
	}
	// Push returns once every site reloaded: no wait before producing.
	for _, s := range sites {
		if r := rep.Results[s.name]; len(r.TopicsAdded) != 1 || r.TopicsAdded[0] != "orders" || len(r.PendingRestart) != 0 {
			t.Fatalf("%s: %+v", s.name, r)
		}
		if code := put(t, s.broker.Addr(), "orders"); code != 200 {
			t.Fatalf("%s: put to pushed topic answered %d", s.name, code)
		}
		if tc, _ := s.broker.Config().TopicFor("orders"); tc.NumPartitions != 2 {
			t.Fatalf("%s: orders has %d partitions", s.name, tc.NumPartitions)
		}
		// Site identity from the overlay survived the push.
		if cfg := s.broker.Config(); cfg.Site.Name != s.name {
			t.Fatalf("%s: broker runs site %q", s.name, cfg.Site.Name)
		}
	}
}

func TestPushedTopicRegisteredInZooKeeper(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	c, sites := startBrokerSites(t, zk)
	rep, err := c.Push(context.Background(), configsync.PushOptions{File: "server.ini",
		Data: sharedIni("\n[topic=orders]\nnumPartitions=3\n"), Sites: []string{"bj", "hf", "gz"}, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("%v %+v", err, rep)
	}
	ctx := context.Background()
	for i, s := range sites {
		// Registered by the reload itself, before any put.
		tbs, err := s.reg.TopicBrokers(ctx, registry.TreeTopicsPub, "orders")
		check(t, err)
		if len(tbs) != 1 || tbs[0].BrokerID != i+1 || tbs[0].NumParts != 3 {
			t.Fatalf("%s: topics-pub/orders = %+v", s.name, tbs)
		}
		if code := put(t, s.broker.Addr(), "orders"); code != 200 {
			t.Fatalf("%s: put answered %d", s.name, code)
		}
	}
}

// BenchmarkPushTopicUntilPutAtEveryBroker times a rollout end to end: from
// push until a producer's put to the new topic succeeds at all three sites.
// The target is under a second.
func BenchmarkPushTopicUntilPutAtEveryBroker(b *testing.B) {
	c, sites := startBrokerSites(b, "")
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		topic := fmt.Sprintf("t%d", i)
		_, err := c.Push(ctx, configsync.PushOptions{File: "server.ini", Data: sharedIni("[topic=" + topic + "]\n"),
			Sites: []string{"bj", "hf", "gz"}, Timeout: 10 * time.Second})
		check(b, err)
		for _, s := range sites {
			if code := put(b, s.broker.Addr(), topic); code != 200 {
				b.Fatalf("%s: put answered %d", s.name, code)
			}
		}
	}
}
