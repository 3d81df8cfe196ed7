package configsync

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/internal/testutil"
)

// baseIni is the shared server.ini of the test deployment; extra is
// appended (more topics, changed keys).
func baseIni(extra string) []byte {
	return []byte(`;; shared server.ini (test)
[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1073741824
maxTransferSize=1048576
serverPort=18123

[zookeeper]
zk.zkConnect=127.0.0.1:2181
zk.zkRoot=/metaq-configsync-test

[site]
overlay=site.ini

[topic=test]
numPartitions=2
` + extra)
}

// testKey signs the tests' pushes; every test site trusts it.
var (
	testKey       = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	testPublicKey = config.FormatPublicKey(testKey.Public().(ed25519.PublicKey))
)

func overlayIni(site string, brokerID int) []byte {
	return []byte(fmt.Sprintf(";; site-specific settings, never pushed\n[system]\nbrokerId=%d\nserverPort=%d\ndataPath=/var/metaq/%s\n\n[site]\nname=%s\n\n[nats]\ntrustedKeys=%s\n",
		brokerID, 19000+brokerID*10, site, site, testPublicKey))
}

// recorder is a Reloader that keeps the configuration it was given, the way
// a broker would, and can be told to fail.
type recorder struct {
	mu    sync.Mutex
	cfg   *config.Server
	calls int
	fail  error
}

func (r *recorder) Reload(_ context.Context, cfg *config.Server) (config.Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		return config.Changes{}, r.fail
	}
	ch := config.Diff(r.cfg, cfg)
	r.cfg = cfg
	return ch, nil
}

func (r *recorder) hasTopic(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.cfg.TopicFor(name)
	return ok
}

func (r *recorder) current() *config.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

func (r *recorder) setFail(err error) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
}

func (r *recorder) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// site is one test datacenter: a directory with server.ini and site.ini, a
// recorder standing in for the broker, and an agent.
type site struct {
	name  string
	dir   string
	path  string
	rec   *recorder
	agent *Agent
	url   string
	natsC config.NATS
}

func startNATS(t *testing.T) *EmbeddedNATS {
	t.Helper()
	e, err := StartEmbeddedNATS(EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Logger: testutil.Logger(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func newSite(t *testing.T, name string, id int, url string) *site { return newSiteB(t, name, id, url) }

func newSiteB(t testing.TB, name string, id int, url string) *site {
	t.Helper()
	dir := t.TempDir()
	s := &site{name: name, dir: dir, path: filepath.Join(dir, "server.ini"), url: url}
	must(t, os.WriteFile(s.path, baseIni(""), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "site.ini"), overlayIni(name, id), 0o644))
	s.start(t)
	return s
}

// start (re)starts the site as a bundle would: load the file with its
// overlay, hand it to the broker (recorder), start the agent.
func (s *site) start(t testing.TB) {
	t.Helper()
	cfg, _, err := config.Load(s.path)
	must(t, err)
	s.rec = &recorder{cfg: cfg}
	a, err := NewAgent(Options{
		ConfigPath:        s.path,
		Running:           cfg,
		URL:               s.url,
		NATS:              s.natsC,
		Reloader:          s.rec,
		HeartbeatInterval: 100 * time.Millisecond,
		Logger:            testutil.Logger(t, slog.LevelDebug).With("test-site", s.name),
	})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, a.Start(ctx))
	select {
	case <-a.Ready():
	case <-ctx.Done():
		t.Fatalf("%s: agent not ready", s.name)
	}
	s.agent = a
	t.Cleanup(func() { a.Close() })
}

func (s *site) stop() { s.agent.Close() }

func (s *site) file(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(s.path)
	must(t, err)
	return b
}

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, ClientOptions{URL: url, Logger: testutil.Logger(t, slog.LevelDebug), SigningKey: testKey})
	must(t, err)
	t.Cleanup(c.Close)
	return c
}

func push(t *testing.T, c *Client, data []byte, sites ...string) (*PushReport, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Push(ctx, PushOptions{File: "server.ini", Data: data, Sites: sites, Timeout: 5 * time.Second})
}

// threeSites starts an embedded NATS server and three site agents, and
// waits until each has recorded its state.
func threeSites(t *testing.T) (*Client, []*site) {
	t.Helper()
	e := startNATS(t)
	var sites []*site
	for i, n := range []string{"bj", "hf", "gz"} {
		sites = append(sites, newSite(t, n, i+1, e.ClientURL()))
	}
	c := newClient(t, e.ClientURL())
	waitSitesKnown(t, c, "bj", "gz", "hf")
	return c, sites
}

func waitSitesKnown(t *testing.T, c *Client, want ...string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		got, err := c.knownSites(context.Background())
		if err != nil {
			return err
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("known sites %v, want %v", got, want)
		}
		return nil
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: bytes differ\n got: %q\nwant: %q", what, got, want)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
