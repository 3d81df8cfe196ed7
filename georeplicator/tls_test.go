package georeplicator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// writeCert creates a key pair signed by ca (self-signed when ca is nil) and
// writes <name>.pem and <name>.key into dir.
func writeCert(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         isCA, BasicConstraintsValid: true,
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", nil, nil, true)
	writeCert(t, dir, "master", ca, caKey, false)
	writeCert(t, dir, "slave", ca, caKey, false)
	writeCert(t, dir, "rogue", nil, nil, false) // not signed by the CA
	p := func(n string) string { return filepath.Join(dir, n) }

	srv, err := ServerTLS(p("master.pem"), p("master.key"), p("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, cert, key string
		ok              bool
	}{{"no client cert", "", "", false}, {"foreign cert", "rogue.pem", "rogue.key", false}, {"good cert", "slave.pem", "slave.key", true}} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, kinds()[1])
			g.shOpts.TLS = srv
			cert, key := "", ""
			if c.cert != "" {
				cert, key = p(c.cert), p(c.key)
			}
			cli, err := ClientTLS(cert, key, p("ca.pem"), "")
			if err != nil {
				t.Fatal(err)
			}
			g.rcOpts.TLS = cli
			g.startMaster()
			g.startSlave()
			g.load(20, defaultParts())
			if c.ok {
				g.waitConverged(10 * time.Second)
				return
			}
			testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
				st := g.rc.Status()
				if st.Reconnects < 2 || st.LastError == "" {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
			if st := g.rc.Status(); st.Frames != 0 || len(g.slave.Partitions()) != 0 {
				t.Fatalf("slave without a valid certificate received data: %+v", st)
			}
			if e := g.rc.Status().LastError; !strings.Contains(e, "tls") && !strings.Contains(e, "certificate") &&
				!strings.Contains(e, "reset") && !strings.Contains(e, "EOF") && !strings.Contains(e, "broken pipe") {
				t.Fatalf("unexpected error %q", e)
			}
		})
	}
	if _, err := ServerTLS(p("nope.pem"), p("nope.key"), ""); err == nil {
		t.Fatal("missing files accepted")
	}
	if _, err := ClientTLS("", "", p("master.key"), ""); err == nil {
		t.Fatal("CA file without certificates accepted")
	}
}
