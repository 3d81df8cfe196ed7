package bundle

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"metaq/georeplicator"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir and returns their paths.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metaq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ip bool) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if ip {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		return write(cn+".crt", "CERTIFICATE", der), write(cn+".key", "EC PRIVATE KEY", kb)
	}
	p := testPKI{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, "bj", x509.ExtKeyUsageServerAuth, true)
	p.clientCert, p.clientKey = leaf(3, "hf", x509.ExtKeyUsageClientAuth, false)
	return p
}

// TestReplicationMutualTLS: with [replication] tlsCert/tlsKey/tlsCA on the
// master, a slave with a certificate from the CA replicates, and a slave
// without one is refused and stores nothing.
func TestReplicationMutualTLS(t *testing.T) {
	root := t.TempDir()
	pki := newTestPKI(t, root)
	shared := sharedINI("", "", "[topic=test]\nnumPartitions=1\n")
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0",
		extraOverlay: "\n[replication]\ntlsCert=" + pki.serverCert + "\ntlsKey=" + pki.serverKey + "\ntlsCA=" + pki.ca + "\n"})
	ship := mustComp[*shipperComponent](t, master)

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
	if rs := st.(georeplicator.ReceiverStatus); rs.Connected {
		t.Fatalf("slave without a client certificate is connected: %#v", rs)
	}
	if b, err := bad.Store.Read("test", 0, 0, 1<<20); err == nil && len(b) > 0 {
		t.Fatalf("slave without a client certificate stored %d bytes", len(b))
	}
}
