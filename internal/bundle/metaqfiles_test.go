package bundle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/internal/testutil"
)

// metaqSite is one bundle started from MetaQ 1.4.6's own files
// (testdata/metaq-1.4.6, byte for byte as MetaQ ships them). The files are
// copied unchanged; what two bundles on one test host cannot share (ports,
// data directory, ZooKeeper) is changed in the loaded configuration only.
type metaqSite struct {
	dir, ini, props string
	port            int
}

func metaqFiles(t *testing.T, extra string) *metaqSite {
	t.Helper()
	s := &metaqSite{dir: t.TempDir(), port: testutil.FreePort(t)}
	s.ini = filepath.Join(s.dir, "conf", "server.ini")
	s.props = filepath.Join(s.dir, "conf", "async_slave.properties")
	os.MkdirAll(filepath.Dir(s.ini), 0o755)
	for src, dst := range map[string]string{"server.ini": s.ini, "async_slave.properties": s.props} {
		data, err := os.ReadFile(filepath.Join("testdata", "metaq-1.4.6", src))
		if err != nil {
			t.Fatal(err)
		}
		if src == "server.ini" {
			data = append(data, extra...)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *metaqSite) start(t *testing.T, mode Mode, zk, root string) *Bundle {
	t.Helper()
	b, err := New(Options{
		ConfigPath: s.ini, Mode: mode, PluginPath: s.props, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(s.port), AdminAddr: "127.0.0.1:0",
		DataPath: filepath.Join(s.dir, "data"),
		Adjust: func(c *config.Server) {
			c.ZooKeeper.Connect, c.ZooKeeper.Root = zk, root
			c.ZooKeeper.SyncTime = 100 * time.Millisecond
			c.Site.DashboardAddr = "127.0.0.1:0"
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func uniqueRoot(t *testing.T, zk string) string {
	b := make([]byte, 6)
	rand.Read(b)
	root := "/metaq-test-" + hex.EncodeToString(b)
	t.Cleanup(func() { removeTree(zk, root) })
	return root
}

// sameLog checks that the slave holds exactly the master's bytes of every
// partition the master has, at the same offsets.
func sameLog(master, slave *Bundle) error {
	for _, mp := range master.Store.Partitions() {
		sp, err := slave.Store.Partition(mp.Topic, mp.Partition)
		if err != nil {
			return fmt.Errorf("%s-%d: %v", mp.Topic, mp.Partition, err)
		}
		if sp.Min != mp.Min || sp.Max != mp.Max {
			return fmt.Errorf("%s-%d: slave holds [%d,%d), master [%d,%d)", mp.Topic, mp.Partition, sp.Min, sp.Max, mp.Min, mp.Max)
		}
		if mp.Max == mp.Min {
			continue
		}
		want, err := master.Store.Read(mp.Topic, mp.Partition, mp.Min, int(mp.Max-mp.Min))
		if err != nil {
			return err
		}
		got, err := slave.Store.Read(mp.Topic, mp.Partition, mp.Min, int(mp.Max-mp.Min))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s-%d: bytes differ", mp.Topic, mp.Partition)
		}
	}
	return nil
}

func putN(t *testing.T, addr, topic string, partition, n int, prefix string) {
	t.Helper()
	c, err := dialMeta(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, _, err := c.put(topic, partition, []byte(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
			t.Fatalf("put %s-%d: %v", topic, partition, err)
		}
	}
}

func slaveMethod(t *testing.T, b *Bundle) (string, map[string]any) {
	t.Helper()
	st, err := b.SlaveStatus()
	if err != nil {
		t.Fatal(err)
	}
	// As the admin endpoint serves it.
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	method, _ := m["Method"].(string)
	return method, m
}

// TestMetaQFilesReplicate: a master started with MetaQ 1.4.6's server.ini
// (no [replication] section) and a slave started with that server.ini and
// MetaQ's async_slave.properties replicate, with nothing added to either
// file: the master offers the compressed stream and publishes its address
// in ZooKeeper, the slave finds it there and ends byte-identical.
func TestMetaQFilesReplicate(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	ms, ss := metaqFiles(t, ""), metaqFiles(t, "")
	master := ms.start(t, ModeMaster, zk, root)
	putN(t, addrString(master.Broker), "test", 0, 50, "before")
	slave := ss.start(t, ModeSlave, zk, root)
	putN(t, addrString(master.Broker), "meta-test", 0, 20, "after")

	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error { return sameLog(master, slave) })
	method, st := slaveMethod(t, slave)
	if method != methodStream || !strings.Contains(st["MethodReason"].(string), "replication") || st["Connected"] != true {
		t.Fatalf("slave-status = %v", st)
	}
	ship := mustComp[*shipperComponent](t, master)
	if st["MasterAddr"] != ship.Addr() {
		t.Errorf("slave reached %v, master listens on %s", st["MasterAddr"], ship.Addr())
	}
	if n := len(master.Store.Partitions()); n < 2 {
		t.Fatalf("master has %d partitions", n)
	}
}

// TestDefaultReplicationPortTaken: MetaQ's integration tests, and many
// MetaQ users, run two brokers on one host at adjacent ports (31123 and
// 31124). With MetaQ's files unchanged, a master and its slave on adjacent
// ports both start (the master takes no serverPort+1), the master serves
// replication on its MetaQ port and publishes that address, the slave finds
// it there and ends byte-identical, and MetaQ clients on the same port are
// served as before.
func TestDefaultReplicationPortTaken(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	port := adjacentFreePorts(t)
	// MetaQ's integration tests give server1.ini and server2.ini adjacent
	// serverPorts; so do these copies, and nothing else differs.
	ms, ss := metaqFilesAt(t, port), metaqFilesAt(t, port+1)
	master := ms.start(t, ModeMaster, zk, root)
	maddr := addrString(master.Broker)
	putN(t, maddr, "test", 0, 30, "before")
	slave := ss.start(t, ModeSlave, zk, root)
	if got := addrString(slave.Broker); got != "127.0.0.1:"+strconv.Itoa(port+1) {
		t.Fatalf("slave listens on %s", got)
	}
	putN(t, maddr, "meta-test", 0, 20, "after")
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error { return sameLog(master, slave) })

	addr := mustComp[*shipperComponent](t, master).Addr()
	if addr != maddr {
		t.Fatalf("replication address %s, want the MetaQ port %s", addr, maddr)
	}
	data, _, err := zkClient(t, &testEnv{zk: zk, root: root}).Get(context.Background(), root+"/brokers/ids/0/replication")
	if err != nil || string(data) != addr {
		t.Fatalf("published %q %v, want %s", data, err, addr)
	}
	if method, st := slaveMethod(t, slave); method != methodStream || st["MasterAddr"] != maddr || st["Connected"] != true {
		t.Fatalf("slave-status = %v", st)
	}
	// The Go client reads back through the same port.
	c, err := dialMeta(maddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.get("test", "readers", 0, 0, 1<<20)
	if err != nil {
		t.Fatalf("MetaQ get beside the replication stream: %v", err)
	}
	if recs, err := decodeRecords(r.body, 0); err != nil || len(recs) != 30 {
		t.Fatalf("get answered %d records (%v), want 30", len(recs), err)
	}
}

// metaqFilesAt is metaqFiles with serverPort=port written in server.ini.
func metaqFilesAt(t *testing.T, port int) *metaqSite {
	t.Helper()
	s := metaqFiles(t, "")
	data, err := os.ReadFile(s.ini)
	if err != nil {
		t.Fatal(err)
	}
	const line = "serverPort=8123"
	if !bytes.Contains(data, []byte(line)) {
		t.Fatalf("MetaQ's server.ini has no %s", line)
	}
	data = bytes.Replace(data, []byte(line), []byte("serverPort="+strconv.Itoa(port)), 1)
	if err := os.WriteFile(s.ini, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s.port = port
	return s
}

// adjacentFreePorts finds p with p and p+1 both free on loopback.
func adjacentFreePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := testutil.FreePort(t)
		if p >= 65535 {
			continue
		}
		if ln, err := listenLoopback(p + 1); err == nil {
			ln.Close()
			return p
		}
	}
	t.Skip("no two adjacent free ports on loopback")
	return 0
}

func listenLoopback(port int) (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
}

// TestMetaQMethod: a master that serves only the MetaQ protocol (our broker
// with [replication] enable=false, which is what a MetaQ 1.4.6 Java master
// looks like on the wire and in ZooKeeper) is copied with MetaQ's own
// async-slave method: byte-identical records at the same offsets, a topic
// added on the master and partitions added to a topic are followed.
func TestMetaQMethod(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	ms, ss := metaqFiles(t, "\n[replication]\nenable=false\n"), metaqFiles(t, "")
	master := ms.start(t, ModeMaster, zk, root)
	if _, ok := findComp[*shipperComponent](master); ok {
		t.Fatal("[replication] enable=false still runs the shipper")
	}
	maddr := addrString(master.Broker)
	putN(t, maddr, "test", 0, 200, "before")
	slave := ss.start(t, ModeSlave, zk, root)
	putN(t, maddr, "meta-test", 0, 30, "after")
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error { return sameLog(master, slave) })

	method, st := slaveMethod(t, slave)
	if method != methodMetaQ || !strings.Contains(st["MethodReason"].(string), "no replication address") ||
		st["Group"] != "meta-slave-group" || st["Connected"] != true {
		t.Fatalf("slave-status = %v", st)
	}
	if lines := slave.Broker.Stats("slave"); !strings.Contains(lines, "method metaq") {
		t.Errorf("stats slave lacks the method:\n%s", lines)
	}

	// A new topic and new partitions of an old one, by a reload of the
	// master's server.ini.
	ini, _ := os.ReadFile(ms.ini)
	ini = bytes.Replace(ini, []byte("[topic=test]"), []byte("[topic=test]\r\nnumPartitions=3"), 1)
	ini = append(ini, "\n[topic=fresh]\nnumPartitions=2\n"...)
	if err := os.WriteFile(ms.ini, ini, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := master.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 3; p++ {
		putN(t, maddr, "test", p, 10, "grown")
	}
	for p := 0; p < 2; p++ {
		putN(t, maddr, "fresh", p, 10, "new")
	}
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		for _, k := range []string{"test-2", "fresh-1"} {
			i := strings.LastIndexByte(k, '-')
			p, _ := strconv.Atoi(k[i+1:])
			if _, err := slave.Store.Partition(k[:i], p); err != nil {
				return fmt.Errorf("slave lacks %s: %v", k, err)
			}
		}
		// MetaQ's async_slave.properties says autoSyncMasterConfig=true: the
		// slave took the master's new server.ini (stats config), as MetaQ's does.
		if got, _ := os.ReadFile(ss.ini); !bytes.Equal(got, ini) {
			return fmt.Errorf("slave's server.ini is not the master's")
		}
		return sameLog(master, slave)
	})
}

// TestSlaveFollowsMethodChange: the slave changes method when its master
// does: the stream from our master, MetaQ's get once the master comes back
// without a replication listener (as when a Java master takes over), and
// the copy stays byte-identical across the change.
func TestSlaveFollowsMethodChange(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	ms, ss := metaqFiles(t, ""), metaqFiles(t, "")
	master := ms.start(t, ModeMaster, zk, root)
	putN(t, addrString(master.Broker), "test", 0, 20, "stream")
	slave := ss.start(t, ModeSlave, zk, root)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error { return sameLog(master, slave) })
	if m, st := slaveMethod(t, slave); m != methodStream {
		t.Fatalf("slave-status %v", st)
	}

	master.Close()
	ini, _ := os.ReadFile(ms.ini)
	os.WriteFile(ms.ini, append(ini, "\n[replication]\nenable=false\n"...), 0o644)
	master = ms.start(t, ModeMaster, zk, root)
	putN(t, addrString(master.Broker), "test", 0, 20, "metaq")
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if m, _ := slaveMethod(t, slave); m != methodMetaQ {
			return fmt.Errorf("slave method %q", m)
		}
		return sameLog(master, slave)
	})
}

// TestUnreachableStreamFallsBack: when the replication address the master
// publishes cannot be reached from the slave (a firewall that lets only the
// MetaQ port through), the slave copies with MetaQ's get through the MetaQ
// port, says so, and returns to the stream once the address answers.
func TestUnreachableStreamFallsBack(t *testing.T) {
	old := reprobeEvery
	reprobeEvery = time.Second
	t.Cleanup(func() { reprobeEvery = old })
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	ms, ss := metaqFiles(t, ""), metaqFiles(t, "")
	master := ms.start(t, ModeMaster, zk, root)
	putN(t, addrString(master.Broker), "test", 0, 20, "one")
	zkc := zkClient(t, &testEnv{zk: zk, root: root})
	node := root + "/brokers/ids/0/replication"
	real := mustComp[*shipperComponent](t, master).Addr()
	blocked := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	if err := zkc.SetPersistent(context.Background(), node, []byte(blocked)); err != nil {
		t.Fatal(err)
	}

	slave := ss.start(t, ModeSlave, zk, root)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if m, st := slaveMethod(t, slave); m != methodMetaQ || !strings.Contains(st["MethodReason"].(string), blocked) {
			return fmt.Errorf("slave-status %v", st)
		}
		return sameLog(master, slave)
	})

	if err := zkc.SetPersistent(context.Background(), node, []byte(real)); err != nil {
		t.Fatal(err)
	}
	putN(t, addrString(master.Broker), "test", 0, 20, "two")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if m, st := slaveMethod(t, slave); m != methodStream || st["Connected"] != true {
			return fmt.Errorf("slave-status %v", st)
		}
		return sameLog(master, slave)
	})
}

// TestJavaClientOnSharedPort: the real MetaQ 1.4.6 Java client produces and
// consumes through the MetaQ port on which the master also serves the
// replication stream, to a slave on the adjacent port, both started from
// MetaQ's files (skips unless METAQ_JAVA_CLIENT is set, see
// javaclient_test.go).
func TestJavaClientOnSharedPort(t *testing.T) {
	cp := javaClasspath(t)
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := uniqueRoot(t, zk)
	port := adjacentFreePorts(t)
	ms, ss := metaqFilesAt(t, port), metaqFilesAt(t, port+1)
	master := ms.start(t, ModeMaster, zk, root)
	slave := ss.start(t, ModeSlave, zk, root)

	cons := startJava(t, cp, "FailoverConsumer", zk, root, "test", javaGroup)
	prod := startJava(t, cp, "FailoverProducer", zk, root, "test")
	waitAcks(t, prod, 50, time.Time{})
	prod.stop()
	acks := prod.acks(t)
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		got := cons.received()
		for _, a := range acks {
			if _, ok := got[a.payload()]; !ok {
				return fmt.Errorf("the Java consumer has %d messages; %s (acknowledged) not among them", len(got), a.payload())
			}
		}
		return nil
	})
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error { return sameLog(master, slave) })
	if method, st := slaveMethod(t, slave); method != methodStream || st["MasterAddr"] != addrString(master.Broker) {
		t.Fatalf("slave-status = %v", st)
	}
	t.Logf("%d messages acknowledged to and consumed by the Java client, replicated over the same port", len(acks))
}
