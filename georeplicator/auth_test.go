package georeplicator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/testutil"
)

const (
	goodSecret  = "0123456789abcdef0123456789abcdef"
	otherSecret = "fedcba9876543210fedcba9876543210"
	// configMarker stands in for the master's server.ini: it must never
	// reach a peer that did not authenticate.
	configMarker = "[system]\nbrokerId=7\n; CONFIG-MARKER\n"
)

func TestSharedSecretReplicates(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.shOpts.Secret = []byte(goodSecret)
	g.rcOpts.Secret = []byte(goodSecret)
	var got []byte
	var mu sync.Mutex
	g.shOpts.ConfigBytes = func() ([]byte, error) { return []byte(configMarker), nil }
	g.rcOpts.AutoSyncMasterConfig = true
	g.rcOpts.OnMasterConfig = func(_ context.Context, b []byte) error {
		mu.Lock()
		got = append([]byte(nil), b...)
		mu.Unlock()
		return nil
	}
	g.startMaster()
	g.startSlave()
	g.load(30, defaultParts())
	g.waitConverged(10 * time.Second)
	g.waitLagZero(10 * time.Second)
	if lag := g.sh.Lag(); len(lag) != 1 || lag[0].Group != "g1" || lag[0].Auth != "secret" {
		t.Fatalf("lag report %+v, want the one slave g1, authenticated by the secret", lag)
	}
	mu.Lock()
	defer mu.Unlock()
	if string(got) != configMarker {
		t.Fatalf("slave got config %q", got)
	}
}

func TestSecretMismatchRefused(t *testing.T) {
	for _, c := range []struct {
		name                string
		master, slave       string
		masterLog, slaveErr string
	}{
		{"wrong secret", goodSecret, otherSecret,
			"the slave's replication shared secret differs from the master's", "shared secret differs"},
		{"slave has no secret", goodSecret, "",
			"the slave has none configured", "requires the replication shared secret and this slave has none"},
		{"master has no secret", "", goodSecret,
			"slave requires authentication", "did not authenticate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, kinds()[1])
			var mlog testutil.SyncBuffer
			g.shOpts.Logger = mlog.Logger()
			g.shOpts.Secret = []byte(c.master)
			g.rcOpts.Secret = []byte(c.slave)
			g.shOpts.ConfigBytes = func() ([]byte, error) { return []byte(configMarker), nil }
			g.rcOpts.AutoSyncMasterConfig = true
			configs := 0
			var mu sync.Mutex
			g.rcOpts.OnMasterConfig = func(context.Context, []byte) error {
				mu.Lock()
				configs++
				mu.Unlock()
				return nil
			}
			g.load(20, defaultParts())
			g.startMaster()
			g.startSlave()
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				st := g.rc.Status()
				if st.Reconnects < 2 || !strings.Contains(st.LastError, c.slaveErr) {
					return fmt.Errorf("slave status %+v, want an error with %q", st, c.slaveErr)
				}
				if !strings.Contains(mlog.String(), c.masterLog) {
					return fmt.Errorf("master log lacks %q:\n%s", c.masterLog, mlog.String())
				}
				return nil
			})
			st := g.rc.Status()
			if st.Frames != 0 || st.Entries != 0 || len(g.slave.Partitions()) != 0 {
				t.Fatalf("slave replicated without authenticating: %+v", st)
			}
			mu.Lock()
			if configs != 0 {
				t.Fatalf("slave took %d configs from an unauthenticated link", configs)
			}
			mu.Unlock()
			if c.master != "" {
				if lag := g.sh.Lag(); len(lag) != 0 {
					t.Fatalf("unauthenticated slave listed in the lag report: %+v", lag)
				}
			}
		})
	}
}

// A peer that claims the right brokerId but cannot prove the secret gets a
// challenge and a refusal: no welcome, no server.ini, no log bytes, and no
// place in the lag report.
func TestFakeSlaveGetsNothing(t *testing.T) {
	g := newRig(t, kinds()[1])
	var mlog testutil.SyncBuffer
	g.shOpts.Logger = mlog.Logger()
	g.shOpts.Secret = []byte(goodSecret)
	g.shOpts.ConfigBytes = func() ([]byte, error) { return []byte(configMarker), nil }
	g.load(20, defaultParts())
	g.startMaster()

	for _, answer := range []struct {
		name  string
		reply func(challenge []byte) []byte
	}{
		{"no proof", func([]byte) []byte { return make([]byte, nonceLen) }},
		{"guessed proof", func(ch []byte) []byte {
			return append(make([]byte, nonceLen), authMAC([]byte(otherSecret), slaveLabel, ch, make([]byte, nonceLen), nil)...)
		}},
		{"secret itself", func([]byte) []byte { return append(make([]byte, nonceLen), []byte(goodSecret)...) }},
	} {
		t.Run(answer.name, func(t *testing.T) {
			c, err := net.Dial("tcp", g.sh.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			h := hello{Version: protocolVersion, BrokerID: 7, SlaveID: 9, Group: "fake", Resume: -1,
				Window: minWindow, WantConf: true}
			if _, err := writeFrame(c, header{typ: typeHello}, h.encode(), nil); err != nil {
				t.Fatal(err)
			}
			f, err := readFrame(c, nil)
			if err != nil || f.typ != typeChallenge {
				t.Fatalf("first frame type %d, err %v; want a challenge", f.typ, err)
			}
			if _, err := writeFrame(c, header{typ: typeAuth}, answer.reply(f.wire), nil); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(c) // until the master closes
			f, err = readFrame(bytes.NewReader(rest), nil)
			if err != nil || f.typ != typeError {
				t.Fatalf("answer type %d, err %v; want an error frame", f.typ, err)
			}
			if !strings.Contains(string(f.wire), "authentication") {
				t.Fatalf("refusal %q does not name authentication", f.wire)
			}
			if n := headerLen + len(f.wire); n != len(rest) {
				t.Fatalf("master sent %d more bytes after the refusal", len(rest)-n)
			}
			if bytes.Contains(rest, []byte("CONFIG-MARKER")) {
				t.Fatal("server.ini sent to an unauthenticated peer")
			}
		})
	}
	if lag := g.sh.Lag(); len(lag) != 0 {
		t.Fatalf("fake slave listed in the lag report: %+v", lag)
	}
	if !strings.Contains(mlog.String(), "authentication failed") {
		t.Fatalf("master did not log the refusal:\n%s", mlog.String())
	}
}

func TestInsecureListenerWarns(t *testing.T) {
	for _, c := range []struct {
		name   string
		listen string
		secret string
		warn   bool
	}{
		{"all interfaces plain", "0.0.0.0:0", "", true},
		{"all interfaces with secret", "0.0.0.0:0", goodSecret, false},
		{"loopback plain", "127.0.0.1:0", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, kinds()[1])
			var mlog testutil.SyncBuffer
			g.shOpts.Logger = mlog.Logger()
			g.shOpts.Listen = c.listen
			g.shOpts.Secret = []byte(c.secret)
			o := g.shOpts
			o.Source = g.master
			sh, err := NewShipper(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			sh.Close()
			got := strings.Contains(mlog.String(), "INSECURE REPLICATION LISTENER")
			if got != c.warn {
				t.Fatalf("warning logged %t, want %t:\n%s", got, c.warn, mlog.String())
			}
			if got && !strings.Contains(mlog.String(), "level=WARN") {
				t.Fatalf("warning not at WARN level:\n%s", mlog.String())
			}
		})
	}
}

// A slave whose master address is another host, dialled in plain text
// without a secret, warns once. The dial goes to the local rig whatever
// the address says, so no traffic leaves the machine.
func TestInsecureLinkWarns(t *testing.T) {
	for _, secret := range []string{"", goodSecret} {
		t.Run(fmt.Sprintf("secret=%t", secret != ""), func(t *testing.T) {
			g := newRig(t, kinds()[1])
			g.shOpts.Secret = []byte(secret)
			g.rcOpts.Secret = []byte(secret)
			var rlog testutil.SyncBuffer
			g.rcOpts.Logger = rlog.Logger()
			g.startMaster()
			local := g.proxy.Addr()
			g.rcOpts.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, local)
			}
			g.load(10, defaultParts())
			g.startSlaveAt("203.0.113.7:8124") // TEST-NET-3: never routed
			g.waitConverged(10 * time.Second)
			n := strings.Count(rlog.String(), "INSECURE REPLICATION LINK")
			if want := map[bool]int{true: 1, false: 0}[secret == ""]; n != want {
				t.Fatalf("%d warnings, want %d:\n%s", n, want, rlog.String())
			}
		})
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	if s, err := LoadSecrets(write("good", goodSecret+"\n", 0o600)); err != nil || len(s) != 1 || string(s[0]) != goodSecret {
		t.Fatalf("good key file: %q, %v", s, err)
	}
	if s, err := LoadSecrets(write("rotating", "\n"+goodSecret+"\n  "+otherSecret+"  \n\n", 0o600)); err != nil ||
		len(s) != 2 || string(s[0]) != goodSecret || string(s[1]) != otherSecret {
		t.Fatalf("key file with an older secret: %q, %v", s, err)
	}
	for name, c := range map[string]struct {
		path, want string
	}{
		"short":    {write("short", "abc\n", 0o600), "at least 16"},
		"empty":    {write("empty", "\n \n", 0o600), "is empty"},
		"readable": {write("open", goodSecret, 0o644), "chmod 600"},
		"missing":  {filepath.Join(dir, "nope"), "no such file"},
	} {
		if _, err := LoadSecrets(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}

// Before a peer has authenticated, the master does not read (or allocate
// for) more than a small handshake message.
func TestOversizedHelloRefused(t *testing.T) {
	g := newRig(t, kinds()[1])
	var mlog testutil.SyncBuffer
	g.shOpts.Logger = mlog.Logger()
	g.shOpts.Secret = []byte(goodSecret)
	g.startMaster()
	c, err := net.Dial("tcp", g.sh.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hb [headerLen]byte
	h := header{typ: typeHello, rawLen: 60 << 20, wireLen: 60 << 20}
	h.put(hb[:])
	if _, err := c.Write(hb[:]); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		t.Fatalf("master answered %d bytes (%v); want the connection closed", n, err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(mlog.String(), "handshake message of 62914560 bytes") {
			return fmt.Errorf("master log:\n%s", mlog.String())
		}
		return nil
	})
}

// A new secret is rolled out one host at a time: the master, holding the new
// secret and the old one, accepts slaves with either, and none other.
func TestSecretRotation(t *testing.T) {
	const newSecret = "a-brand-new-replication-secret-0"
	for _, c := range []struct {
		slave string
		ok    bool
	}{{goodSecret, true}, {newSecret, true}, {otherSecret, false}} {
		t.Run(c.slave[:8], func(t *testing.T) {
			g := newRig(t, kinds()[1])
			g.shOpts.Secret = []byte(newSecret)
			g.shOpts.PreviousSecrets = [][]byte{[]byte(goodSecret)}
			g.rcOpts.Secret = []byte(c.slave)
			g.load(10, defaultParts())
			g.startMaster()
			g.startSlave()
			if c.ok {
				g.waitConverged(10 * time.Second)
				return
			}
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				if st := g.rc.Status(); st.Reconnects < 2 || !strings.Contains(st.LastError, "shared secret differs") {
					return fmt.Errorf("slave status %+v", st)
				}
				return nil
			})
			if len(g.slave.Partitions()) != 0 || len(g.sh.Lag()) != 0 {
				t.Fatal("slave with an unknown secret replicated")
			}
		})
	}
}

// Progress kept from a run without authentication does not carry a
// stranger into the lag report once the master requires the secret.
func TestUnauthenticatedSlavesForgotten(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.load(10, defaultParts())
	g.startMaster()
	g.startSlave() // no secret anywhere: recorded with Auth "none"
	g.waitConverged(10 * time.Second)
	if lag := g.sh.Lag(); len(lag) != 1 || lag[0].Auth != "none" {
		t.Fatalf("lag %+v", lag)
	}
	g.stopSlave(false)
	g.stopMaster(false)

	// Restarted without a secret: still listed (nothing changed).
	g.startMaster()
	if lag := g.sh.Lag(); len(lag) != 1 {
		t.Fatalf("lag after a plain restart %+v", lag)
	}
	g.stopMaster(false)

	// Restarted with a secret: the unauthenticated entry is gone, and a
	// slave that proves the secret comes back in.
	g.shOpts.Secret = []byte(goodSecret)
	g.startMaster()
	if lag := g.sh.Lag(); len(lag) != 0 {
		t.Fatalf("unauthenticated slave still listed: %+v", lag)
	}
	g.rcOpts.Secret = []byte(goodSecret)
	g.startSlave()
	g.load(5, defaultParts())
	g.waitConverged(10 * time.Second)
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if lag := g.sh.Lag(); len(lag) != 1 || lag[0].Auth != "secret" {
			return fmt.Errorf("lag %+v", lag)
		}
		return nil
	})
}
