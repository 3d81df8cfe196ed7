package georeplicator

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testutil.WriteCert(t, dir, "ca", true, nil, nil)
	testutil.WriteCert(t, dir, "master", false, ca, caKey)
	testutil.WriteCert(t, dir, "slave", false, ca, caKey)
	testutil.WriteCert(t, dir, "rogue", false, nil, nil) // not signed by the CA
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
				if lag := g.sh.Lag(); len(lag) != 1 || lag[0].Auth != "tls-client-cert" {
					t.Fatalf("lag %+v, want the slave authenticated by its certificate", lag)
				}
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
	// A slave without TLS is told why, in a frame it can read.
	t.Run("plain-text slave", func(t *testing.T) {
		g := newRig(t, kinds()[1])
		g.shOpts.TLS = srv
		g.startMaster()
		g.startSlave()
		g.load(5, defaultParts())
		testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
			if e := g.rc.Status().LastError; !strings.Contains(e, "TLS only") {
				return fmt.Errorf("last error %q", e)
			}
			return nil
		})
		if st := g.rc.Status(); st.Frames != 0 || len(g.slave.Partitions()) != 0 {
			t.Fatalf("plain-text slave received data: %+v", st)
		}
	})
	if _, err := ServerTLS(p("nope.pem"), p("nope.key"), ""); err == nil {
		t.Fatal("missing files accepted")
	}
	if _, err := ClientTLS("", "", p("master.key"), ""); err == nil {
		t.Fatal("CA file without certificates accepted")
	}
}
