package bundle

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir and returns their paths.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	ca, caKey := testutil.WriteCert(t, dir, "ca", true, nil, nil)
	testutil.WriteCert(t, dir, "bj", false, ca, caKey)
	testutil.WriteCert(t, dir, "hf", false, ca, caKey)
	p := func(name string) string { return filepath.Join(dir, name) }
	return testPKI{ca: p("ca.pem"), serverCert: p("bj.pem"), serverKey: p("bj.key"), clientCert: p("hf.pem"), clientKey: p("hf.key")}
}

// TestReplicationMutualTLS: with [replication] tlsCert/tlsKey/tlsCA on the
// master, a slave with a certificate from the CA replicates, and a slave
// without one is refused and stores nothing.
func TestReplicationMutualTLS(t *testing.T) {
	t.Parallel()
	// On a port of its own ([replication] listen), and on the MetaQ port,
	// where MetaQ clients in plain text are served beside it.
	for _, metaqPort := range []bool{false, true} {
		t.Run(map[bool]string{false: "own port", true: "MetaQ port"}[metaqPort], func(t *testing.T) {
			testReplicationMutualTLS(t, metaqPort)
		})
	}
}

func testReplicationMutualTLS(t *testing.T, metaqPort bool) {
	root := t.TempDir()
	pki := newTestPKI(t, root)
	shared := sharedINI("", "", "[topic=test]\nnumPartitions=1\n")
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0",
		extraOverlay: "\n[replication]\ntlsCert=" + pki.serverCert + "\ntlsKey=" + pki.serverKey + "\ntlsCA=" + pki.ca + "\n", metaqPort: metaqPort})
	ship := mustComp[*shipperComponent](t, master)
	if on := ship.Addr() == addrString(master.Broker); on != metaqPort {
		t.Fatalf("replication at %s, MetaQ port %s", ship.Addr(), addrString(master.Broker))
	}

	good := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: ship.Addr(),
		natsURL: "nats://127.0.0.1:1", slaveExtra: "tlsCert=" + pki.clientCert + "\ntlsKey=" + pki.clientKey + "\ntlsCA=" + pki.ca + "\n"})
	// Trusts the master but has no client certificate.
	bad := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: ship.Addr(),
		natsURL: "nats://127.0.0.1:1", slaveExtra: "tlsCA=" + pki.ca + "\n"})

	produce(t, master.Broker.Addr().String(), "test", 20, "tls")
	waitCaughtUp(t, master, good, "test", 20*time.Second)
	mb, _ := master.Store.Read("test", 0, 0, 1<<20)
	gb, _ := good.Store.Read("test", 0, 0, 1<<20)
	if len(mb) == 0 || !bytes.Equal(mb, gb) {
		t.Fatalf("slave with a client certificate: %d bytes, master %d", len(gb), len(mb))
	}
	st, err := bad.SlaveStatus()
	if err != nil {
		t.Fatal(err)
	}
	if rs := st.(SlaveReport).Stream; rs == nil || rs.Connected {
		t.Fatalf("slave without a client certificate is connected: %#v", rs)
	}
	if b, err := bad.Store.Read("test", 0, 0, 1<<20); err == nil && len(b) > 0 {
		t.Fatalf("slave without a client certificate stored %d bytes", len(b))
	}
}
