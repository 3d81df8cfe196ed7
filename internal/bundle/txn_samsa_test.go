package bundle

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// startPairBundle starts a bundle of a samsa pair (ZooKeeper off) in mode
// on its own data directory; props is the plugin file, "" for none.
func startPairBundle(t *testing.T, mode Mode, props string) *Bundle {
	t.Helper()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	ini := filepath.Join(dir, "server.ini")
	data := fmt.Sprintf("[system]\nbrokerId=0\nhostName=127.0.0.1\nserverPort=%d\nnumPartitions=2\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndataPath=%s\n\n[zookeeper]\nzk.zkEnable=false\n\n[topic=test]\n",
		port, filepath.Join(dir, "data"))
	if err := os.WriteFile(ini, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{ConfigPath: ini, Mode: mode, Logger: testutil.Logger(t, slog.LevelInfo), ListenAddr: "127.0.0.1:" + strconv.Itoa(port), AdminAddr: "off"}
	if props != "" {
		opts.PluginPath = filepath.Join(dir, "samsa_master.properties")
		if err := os.WriteFile(opts.PluginPath, []byte(props), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return startBundle(t, opts)
}

// TestTransactionsOnSamsaPair: on a synchronously replicated master, a
// committed local transaction and a committed XA transaction reach the
// slave like every other put: both stores hold the same bytes. The slave
// itself refuses a client's put.
func TestTransactionsOnSamsaPair(t *testing.T) {
	t.Parallel()
	gregor := startPairBundle(t, ModeGregor, "")
	samsa := startPairBundle(t, ModeSamsa, "slave="+gregor.Broker.Addr().String()+"\n")
	mc := dialWire(t, samsa.Broker.Addr().String())
	put := func(key string, id wire.TxID, body string) {
		t.Helper()
		b := []byte(body)
		if r := mc.result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(b), TxKey: key, Tx: id, Body: b}); !r.OK() {
			t.Fatalf("put %q: %s", body, r)
		}
	}
	tx := func(key string, id wire.TxID, typ wire.TxType, uq string) {
		t.Helper()
		if r := mc.result(&wire.Transaction{TxKey: key, Tx: id, SessionID: "s1", Type: typ, UniqueQualifier: uq}); !r.OK() {
			t.Fatalf("%s %s: %s", typ, key, r)
		}
	}
	plain := []byte("plain")
	if r := mc.result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(plain), Body: plain}); !r.OK() {
		t.Fatalf("plain put: %s", r)
	}

	local := "TX:s1:1"
	lid, err := wire.ParseTxKey(local)
	if err != nil {
		t.Fatal(err)
	}
	tx(local, lid, wire.TxBegin, "")
	put(local, lid, "local-1")
	put(local, lid, "local-2")
	tx(local, lid, wire.TxCommitOnePhase, "")

	uq := "samsa-test"
	xa := "XID:1:676c6f62616c31:6272616e636831:" + uq
	xid, err := wire.ParseTxKey(xa)
	if err != nil {
		t.Fatal(err)
	}
	tx(xa, xid, wire.TxBegin, uq)
	put(xa, xid, "xa-1")
	mc.send(&wire.Transaction{TxKey: xa, Tx: xid, SessionID: "s1", Type: wire.TxEnd, UniqueQualifier: uq}) // END gets no answer
	if r := mc.result(&wire.Transaction{TxKey: xa, Tx: xid, SessionID: "s1", Type: wire.TxPrepare, UniqueQualifier: uq}); !r.OK() || string(r.Body) != "0" {
		t.Fatalf("prepare: %s", r)
	}
	tx(xa, xid, wire.TxCommitTwoPhase, uq)

	mb, err := samsa.Store.Read("test", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"plain", "local-1", "local-2", "xa-1"} {
		if !bytes.Contains(mb, []byte(body)) {
			t.Fatalf("the master does not hold %q", body)
		}
	}
	sb, err := gregor.Store.Read("test", 0, 0, 1<<20)
	if err != nil {
		t.Fatalf("the slave holds nothing: %v", err)
	}
	if !bytes.Equal(mb, sb) {
		t.Fatalf("master and slave differ: master %d bytes, slave %d bytes", len(mb), len(sb))
	}

	// The gregor slave refuses a client's put: it holds the master's offsets.
	if r := dialWire(t, gregor.Broker.Addr().String()).result(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(plain), Body: plain}); r.Code != wire.StatusForbidden {
		t.Fatalf("put to the gregor slave: %s", r)
	}
	if sb2, _ := gregor.Store.Read("test", 0, 0, 1<<20); !bytes.Equal(sb2, sb) {
		t.Fatalf("the gregor slave stored a client's put")
	}
}
