package bundle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestReplicationSharedSecret: one line in the shared server.ini
// ([replication] secretFile) turns authentication on at every site. A slave
// with the same key file replicates; one with another key is refused, holds
// nothing and is not in the master's lag report. The server.ini a slave
// takes from its master (autoSyncMasterConfig) carries no [site] token of
// the master's; the slave keeps its own.
func TestReplicationSharedSecret(t *testing.T) {
	t.Parallel()
	// On a port of its own ([replication] listen), and on the MetaQ port.
	for _, metaqPort := range []bool{false, true} {
		t.Run(map[bool]string{false: "own port", true: "MetaQ port"}[metaqPort], func(t *testing.T) {
			testReplicationSharedSecret(t, metaqPort)
		})
	}
}

func testReplicationSharedSecret(t *testing.T, metaqPort bool) {
	root := t.TempDir()
	shared := sharedINI("", "", "[topic=test]\nnumPartitions=1\n")
	shared = strings.Replace(shared, "[replication]\n", "[replication]\nsecretFile=repl.key\n", 1)
	shared = strings.Replace(shared, "[site]\n", "[site]\ntoken=dashboard-s3cr3t-token\n", 1)
	writeKey := func(site, key string) {
		dir := filepath.Join(root, site)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "repl.key"), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey("bj", "the-deployment-replication-key-1")
	writeKey("hf", "the-deployment-replication-key-1")
	writeKey("gz", "some-other-replication-key-00000")

	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0", metaqPort: metaqPort})
	ship := mustComp[*shipperComponent](t, master)
	if on := ship.Addr() == addrString(master.Broker); on != metaqPort {
		t.Fatalf("replication at %s, MetaQ port %s", ship.Addr(), addrString(master.Broker))
	}
	// Without configsync on this slave, which would own server.ini instead.
	slaveINI := strings.Replace(shared, "[nats]\nbucket=metaq_config\n", "", 1)
	slaveINI = strings.Replace(slaveINI, "token=dashboard-s3cr3t-token\n", "token=hf-own-dashboard-token\n", 1)
	good := startSite(t, filepath.Join(root, "hf"), slaveINI, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: ship.Addr(), noNATS: true, autoSync: true})
	bad := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2,
		masterAddr: ship.Addr(), natsURL: "nats://127.0.0.1:1", autoSync: true})

	produce(t, master.Broker.Addr().String(), "test", 20, "secret")
	waitCaughtUp(t, master, good, "test", 20*time.Second)
	mb, _ := master.Store.Read("test", 0, 0, 1<<20)
	gb, _ := good.Store.Read("test", 0, 0, 1<<20)
	if len(mb) == 0 || !bytes.Equal(mb, gb) {
		t.Fatalf("slave with the key: %d bytes, master %d", len(gb), len(mb))
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		st, err := bad.SlaveStatus()
		if err != nil {
			return err
		}
		rep := st.(SlaveReport)
		if rs := rep.Stream; rs == nil || rs.Connected || !strings.Contains(rs.LastError, "shared secret differs") {
			return fmt.Errorf("slave with another key: %#v", rep)
		}
		return nil
	})
	if b, err := bad.Store.Read("test", 0, 0, 1<<20); err == nil && len(b) > 0 {
		t.Fatalf("slave with another key stored %d bytes", len(b))
	}
	for _, l := range ship.Shipper().Lag() {
		if l.SlaveID != 1 {
			t.Fatalf("lag report lists an unauthenticated slave: %+v", l)
		}
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		synced, err := os.ReadFile(filepath.Join(root, "hf", "server.ini"))
		if err != nil {
			return err
		}
		if !bytes.Contains(synced, []byte("bucket=metaq_config")) {
			return fmt.Errorf("the slave has not taken the master's server.ini yet:\n%s", synced)
		}
		return nil
	})
	synced, _ := os.ReadFile(filepath.Join(root, "hf", "server.ini"))
	if !bytes.Contains(synced, []byte("secretFile=repl.key")) {
		t.Fatalf("synced server.ini lost more than the secret:\n%s", synced)
	}
	if bytes.Contains(synced, []byte("dashboard-s3cr3t-token")) {
		t.Fatal("token replicated")
	}
	if !bytes.Contains(synced, []byte("token=hf-own-dashboard-token")) {
		t.Fatalf("the slave lost its own token:\n%s", synced)
	}
	if got := statsOf(master, "config"); strings.Contains(got, "dashboard-s3cr3t-token") {
		t.Fatal("stats config returns the token")
	}
}

// TestSecretSlaveDoesNotFallBackToMetaQGet: MetaQ's get authenticates no one,
// so a slave with [replication] secretFile never copies with it, and says why.
func TestSecretSlaveDoesNotFallBackToMetaQGet(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	root := uniqueRoot(t, zk)
	ms, ss := metaqFiles(t, "\n[replication]\nenable=false\n"), metaqFiles(t, "\n[replication]\nsecretFile=repl.key\n")
	if err := os.WriteFile(filepath.Join(filepath.Dir(ss.ini), "repl.key"), []byte("the-deployment-replication-key-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	master := ms.start(t, ModeMaster, zk, root)
	putN(t, addrString(master.Broker), "test", 0, 20, "secret")
	slave := ss.start(t, ModeSlave, zk, root)
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		method, st := slaveMethod(t, slave)
		if method != "" || !strings.Contains(fmt.Sprint(st["MethodReason"]), "secretFile is set") {
			return fmt.Errorf("slave-status = %v", st)
		}
		return nil
	})
	if b, err := slave.Store.Read("test", 0, 0, 1<<20); err == nil && len(b) > 0 {
		t.Fatalf("slave with a secret copied %d bytes with MetaQ's get", len(b))
	}
}
