package configsync

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"metaq/broker/config"
	"metaq/internal/testutil"
)

// forge writes v straight into the bucket's desired key, as anyone who can
// reach NATS could.
func forge(t *testing.T, url string, v *Version) {
	t.Helper()
	nc, err := nats.Connect(url)
	must(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := openBucket(ctx, nc, DefaultBucket)
	must(t, err)
	b, err := json.Marshal(v)
	must(t, err)
	_, err = kv.Put(ctx, keyDesired, b)
	must(t, err)
}

func waitRejected(t *testing.T, s *site, version uint64, want string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		st := s.agent.State()
		if st.FailedVersion != version || !strings.Contains(st.Error, want) {
			return fmt.Errorf("site state %+v, want version %d rejected with %q", st, version, want)
		}
		return nil
	})
}

// A version written into the bucket by anyone but a trusted pusher is not
// applied; the site reports why; a signed push after it is applied.
func TestForgedVersionsAreNotApplied(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	original := s.file(t)
	evil := baseIni("[topic=evil]\nnumPartitions=1\n")
	otherKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, ed25519.SeedSize))

	unsigned := &Version{Version: 1, SHA256: hashHex(evil), Data: evil, PushedAt: time.Now()}
	forge(t, e.ClientURL(), unsigned)
	waitRejected(t, s, 1, "version 1 is unsigned")

	foreign := &Version{Version: 2, SHA256: hashHex(evil), Data: evil}
	foreign.Sign(otherKey)
	forge(t, e.ClientURL(), foreign)
	waitRejected(t, s, 2, "does not verify with any of the 1 trusted keys")

	// A signed version whose bytes were swapped afterwards (hash fixed up).
	good := baseIni("[topic=good]\nnumPartitions=1\n")
	tampered := &Version{Version: 3, SHA256: hashHex(good), Data: good}
	tampered.Sign(testKey)
	tampered.Data, tampered.SHA256 = evil, hashHex(evil)
	forge(t, e.ClientURL(), tampered)
	waitRejected(t, s, 3, "does not verify")

	// A signed version relabelled with a higher number.
	relabelled := &Version{Version: 4, SHA256: hashHex(good), Data: good}
	relabelled.Sign(testKey)
	relabelled.Version = 1 << 60
	forge(t, e.ClientURL(), relabelled)
	waitRejected(t, s, 1<<60, "does not verify")

	sameBytes(t, "server.ini after forged versions", s.file(t), original)
	if n := s.rec.callCount(); n != 0 || s.rec.hasTopic("evil") {
		t.Fatalf("broker reloaded %d times (evil topic %t)", n, s.rec.hasTopic("evil"))
	}
	st, err := c.Status(context.Background())
	must(t, err)
	if len(st.Sites) != 1 || !strings.Contains(st.Sites[0].Error, "not signed by a trusted key") {
		t.Fatalf("status does not report the rejection: %+v", st.Sites)
	}

	// The forged huge version number does not make the site skip real pushes.
	rep, err := push(t, c, good, "bj")
	if err != nil {
		t.Fatalf("signed push: %v (%+v)", err, rep)
	}
	sameBytes(t, "server.ini after a signed push", s.file(t), good)
	if !s.rec.hasTopic("good") {
		t.Fatal("signed push not reloaded")
	}
	if st := s.agent.State(); st.Error != "" || st.Version != rep.Version {
		t.Fatalf("state after signed push: %+v", st)
	}
}

func TestPushNeedsSigningKey(t *testing.T) {
	e := startNATS(t)
	ctx := context.Background()
	c, err := NewClient(ctx, ClientOptions{URL: e.ClientURL()})
	must(t, err)
	defer c.Close()
	if _, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni("")}); !errors.Is(err, ErrNoSigningKey) {
		t.Fatalf("push without a key: %v", err)
	}
	if _, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(""), DryRun: true}); err != nil {
		t.Fatalf("dry run without a key: %v", err)
	}
	if _, err := c.Desired(ctx); !errors.Is(err, ErrNoDesired) {
		t.Fatalf("something was published: %v", err)
	}
}

// A site that opts into unsigned pushes says so loudly at start, and then
// applies them.
func TestAllowUnsignedWarns(t *testing.T) {
	e := startNATS(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "server.ini")
	must(t, os.WriteFile(path, baseIni(""), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "site.ini"),
		[]byte("[site]\nname=bj\n[nats]\nallowUnsigned=true\n"), 0o644))
	cfg, _, err := config.Load(path)
	must(t, err)
	var logs testutil.SyncBuffer
	rec := &recorder{cfg: cfg}
	a, err := NewAgent(Options{ConfigPath: path, Running: cfg, URL: e.ClientURL(), Reloader: rec,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	must(t, err)
	must(t, a.Start(context.Background()))
	defer a.Close()
	<-a.Ready()
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "INSECURE: [nats] allowUnsigned=true") {
		t.Fatalf("no warning at start:\n%s", out)
	}
	ctx := context.Background()
	c, err := NewClient(ctx, ClientOptions{URL: e.ClientURL(), AllowUnsigned: true})
	must(t, err)
	defer c.Close()
	data := baseIni("[topic=plain]\n")
	if rep, err := c.Push(ctx, PushOptions{File: "server.ini", Data: data, Sites: []string{"bj"}, Timeout: 5 * time.Second}); err != nil {
		t.Fatalf("unsigned push to an allowUnsigned site: %v %+v", err, rep)
	}
	if !rec.hasTopic("plain") {
		t.Fatal("unsigned push not applied")
	}
}

// Rollback republishes (and re-signs) old bytes only when a trusted key
// signed them.
func TestRollbackRefusesForgedHistory(t *testing.T) {
	e := startNATS(t)
	newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	_, err := push(t, c, baseIni("[topic=a]\n"), "bj")
	must(t, err)
	_, err = push(t, c, baseIni("[topic=b]\n"), "bj")
	must(t, err)
	// Replace the copy of version 1 with other bytes.
	nc, err := nats.Connect(e.ClientURL())
	must(t, err)
	defer nc.Close()
	ctx := context.Background()
	kv, err := openBucket(ctx, nc, DefaultBucket)
	must(t, err)
	evil := baseIni("[topic=evil]\n")
	b, _ := json.Marshal(&Version{Version: 1, SHA256: hashHex(evil), Data: evil})
	_, err = kv.Put(ctx, versionKey(1), b)
	must(t, err)
	if _, err := c.Rollback(ctx, RollbackOptions{To: 1, Sites: []string{"bj"}}); err == nil || !strings.Contains(err.Error(), "refusing to republish") {
		t.Fatalf("rollback to a forged version: %v", err)
	}
}

func TestSigningKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := GenerateKey()
	must(t, err)
	path := filepath.Join(dir, "push.key")
	must(t, os.WriteFile(path, priv, 0o600))
	k, err := LoadSigningKey(path)
	must(t, err)
	keys, err := config.ParseTrustedKeys(pub)
	must(t, err)
	v := &Version{Version: 1, SHA256: hashHex([]byte("x")), Data: []byte("x")}
	v.Sign(k)
	if err := v.Verify(keys); err != nil {
		t.Fatal(err)
	}
	// Permission to remove topics holding messages is part of what is signed.
	v.AllowTopicRemoval = true
	if err := v.Verify(keys); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("a signed version with the topic removal flag turned on: %v", err)
	}
	must(t, os.Chmod(path, 0o644))
	if _, err := LoadSigningKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable key: %v", err)
	}
}

// A push never carries a secret into the bucket and out to every site.
func TestPushRefusesSecrets(t *testing.T) {
	e := startNATS(t)
	c := newClient(t, e.ClientURL())
	ctx := context.Background()
	for _, extra := range []string{"[site]\ntoken=s3cr3t-token\n", "[gossip]\nkey=MDEyMzQ1Njc4OWFiY2RlZg==\n"} {
		_, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(extra)})
		if !errors.Is(err, ErrSecretInFile) || !strings.Contains(err.Error(), "overlay") {
			t.Fatalf("push with %q: %v", extra, err)
		}
	}
	if _, err := c.Desired(ctx); !errors.Is(err, ErrNoDesired) {
		t.Fatalf("something was published: %v", err)
	}
}

func TestInsecureNATSLink(t *testing.T) {
	for _, c := range []struct {
		url  string
		n    config.NATS
		want bool
	}{
		{"nats://127.0.0.1:4222", config.NATS{}, false},
		{"nats://localhost:4222,nats://[::1]:4222", config.NATS{}, false},
		{"nats://nats-1.bj.example.net:4222", config.NATS{}, true},
		{"nats://127.0.0.1:4222,nats://203.0.113.9:4222", config.NATS{}, true},
		{"tls://nats-1.bj.example.net:4222", config.NATS{}, false},
		{"nats://nats-1.bj.example.net:4222", config.NATS{CredsFile: "/etc/metaq/nats.creds"}, false},
		{"nats://nats-1.bj.example.net:4222", config.NATS{TLSCA: "/etc/metaq/ca.pem"}, false},
	} {
		if got := insecureNATSLink(c.url, c.n); got != c.want {
			t.Errorf("%s %+v: insecure %t, want %t", c.url, c.n, got, c.want)
		}
	}
}

func TestRedactURLs(t *testing.T) {
	got := redactURLs("nats://user:hunter2@a:4222,nats://s3cr3ttoken@b:4222,nats://c:4222")
	if strings.Contains(got, "hunter2") || strings.Contains(got, "s3cr3ttoken") || !strings.Contains(got, "user:xxxxx@a:4222") || !strings.Contains(got, "nats://c:4222") {
		t.Fatalf("got %q", got)
	}
}
