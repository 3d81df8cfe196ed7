package bundle

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// wireConn sends MetaQ commands one at a time and decodes the answers.
type wireConn struct {
	t      *testing.T
	nc     net.Conn
	dec    *wire.Decoder
	opaque int32
}

func dialWire(t *testing.T, addr string) *wireConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &wireConn{t: t, nc: nc, dec: wire.NewDecoder(bufio.NewReader(nc))}
}

// do sends cmd with the next opaque and returns the answer.
func (w *wireConn) do(cmd wire.Command) wire.Command {
	w.t.Helper()
	w.send(cmd)
	resp, err := w.dec.Decode()
	if err != nil {
		w.t.Fatalf("%s: %v", cmd.Name(), err)
	}
	return resp
}

// send sends cmd with the next opaque.
func (w *wireConn) send(cmd wire.Command) {
	w.t.Helper()
	w.opaque++
	switch c := cmd.(type) {
	case *wire.Put:
		c.Opaque = w.opaque
	case *wire.Transaction:
		c.Opaque = w.opaque
	case *wire.Get:
		c.Opaque = w.opaque
	}
	w.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := w.nc.Write(cmd.AppendTo(nil)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wireConn) result(cmd wire.Command) *wire.Result {
	w.t.Helper()
	r, ok := w.do(cmd).(*wire.Result)
	if !ok {
		w.t.Fatalf("%s: answer is not a result", cmd.Name())
	}
	return r
}

// TestSlaveRefusesWrites: an async slave answers a client's put, and a
// transactional put, with 403 naming its master, stores nothing, and keeps
// replicating byte-identically afterwards.
func TestSlaveRefusesWrites(t *testing.T) {
	t.Parallel()
	shared := sharedINI("", "", "[topic=test]\nnumPartitions=2\n")
	root := t.TempDir()
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	ship := mustComp[*shipperComponent](t, master)
	slave := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: ship.Addr(), natsURL: "nats://127.0.0.1:1"})
	produce(t, master.Broker.Addr().String(), "test", 20, "before")
	waitCaughtUp(t, master, slave, "test", 20*time.Second)

	sc := dialWire(t, slave.Broker.Addr().String())
	body := []byte("stray")
	for _, p := range []int32{0, 1, -1} {
		r := sc.result(&wire.Put{Topic: "test", Partition: p, Checksum: wire.Checksum(body), Body: body})
		if r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "failed.Detail:this broker is a slave") ||
			!strings.Contains(string(r.Body), ship.Addr()) {
			t.Errorf("put to partition %d of the slave: %s", p, r)
		}
	}
	// A transaction gets no further: its put is refused the same way.
	key := "TX:hf:1"
	id, err := wire.ParseTxKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if r := sc.result(&wire.Transaction{TxKey: key, Tx: id, SessionID: "hf", Type: wire.TxBegin}); !r.OK() {
		t.Fatalf("begin: %s", r)
	}
	if r := sc.result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(body), TxKey: key, Tx: id, Body: body}); r.Code != wire.StatusForbidden {
		t.Errorf("transactional put to the slave: %s", r)
	}
	if r := sc.result(&wire.Transaction{TxKey: key, Tx: id, SessionID: "hf", Type: wire.TxCommitOnePhase}); !r.OK() {
		t.Fatalf("commit: %s", r)
	}

	produce(t, master.Broker.Addr().String(), "test", 20, "after")
	waitCaughtUp(t, master, slave, "test", 10*time.Second)
	for p := range 2 {
		mb, err := master.Store.Read("test", p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := slave.Store.Read("test", p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mb, sb) {
			t.Errorf("partition %d differs: master %d bytes, slave %d bytes", p, len(mb), len(sb))
		}
		if bytes.Contains(sb, body) {
			t.Errorf("partition %d of the slave holds the refused put", p)
		}
	}
	st, err := slave.SlaveStatus()
	if err != nil {
		t.Fatal(err)
	}
	if rep, ok := st.(SlaveReport); !ok || rep.Stream == nil || !rep.Stream.Connected {
		t.Errorf("slave-status after the refused puts = %#v", st)
	}
	// The master still takes puts.
	mc := dialWire(t, master.Broker.Addr().String())
	if r := mc.result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(body), Body: body}); !r.OK() {
		t.Fatalf("put to the master: %s", r)
	}
}

// TestSlaveRefusalNamesRegisteredMaster: with ZooKeeper, a slave's refusal
// names the meta:// URL its master registered.
func TestSlaveRefusalNamesRegisteredMaster(t *testing.T) {
	t.Parallel()
	me := newEnv(t, "[topic=test]\nnumPartitions=1\n")
	me.start(t)
	se := &testEnv{dir: t.TempDir(), root: me.root, zk: me.zk, port: testutil.FreePort(t)}
	se.ini = filepath.Join(se.dir, "server.ini")
	se.writeINI(t, "[topic=test]\nnumPartitions=1\n")
	props := filepath.Join(se.dir, "async_slave.properties")
	if err := os.WriteFile(props, []byte("slaveId=0\nslaveGroup=meta-slave-group\nautoSyncMasterConfig=false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	slave := startBundle(t, Options{ConfigPath: se.ini, Mode: ModeSlave, PluginPath: props, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(se.port), AdminAddr: "off"})
	body := []byte("stray")
	r := dialWire(t, slave.Broker.Addr().String()).result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(body), Body: body})
	want := "failed.Detail:this broker is a slave of broker 0 and takes no puts; send them to its master meta://127.0.0.1:" + strconv.Itoa(me.port)
	if r.Code != wire.StatusForbidden || !strings.HasSuffix(string(r.Body), want) {
		t.Fatalf("put to the slave: %s", r)
	}
}

// TestSlaveRefusalNamesCurrentMaster (ZooKeeper off, gossip on): after hf
// is promoted, gz follows it by gossip, and gz's put refusal names hf, the
// master it follows now, not bj, the one its async_slave.properties names.
func TestSlaveRefusalNamesCurrentMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)
	if r := gz.Broker.WriteRefusal(); r == nil || !strings.Contains(r.Reason, toGZ.Addr()) {
		t.Fatalf("gz's refusal before the failover: %+v, want it to name %s", r, toGZ.Addr())
	}
	for _, p := range []*netproxy.Proxy{toHF, toGZ} {
		p.SetRefuse(true)
		p.CutAll()
	}
	if _, err := hf.Promote(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	wantFollowsByteIdentical(t, hf, gz, "orders")
	hfAddr := hf.ReplicationAddr()
	if hfAddr == "" {
		t.Fatal("hf, promoted, has no replication address")
	}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		r := gz.Broker.WriteRefusal()
		if r == nil || !strings.Contains(r.Reason, hfAddr) || strings.Contains(r.Reason, toGZ.Addr()) {
			return fmt.Errorf("gz's refusal %+v does not name hf (%s), the master it follows", r, hfAddr)
		}
		return nil
	})
}
