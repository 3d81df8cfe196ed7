package bundle

import (
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

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestStartWaitsForZooKeeper: a master whose ensemble is down when it
// starts (the unit restarted it during a ZooKeeper outage) waits for it,
// warning that it does, serves nothing meanwhile, and comes up and
// registers once the ensemble is started. It used to exit with "no
// ZooKeeper session ... within" zk.zkConnectionTimeoutMs (found by the
// fault schedules, internal/faultsched: seed 566489464).
func TestStartWaitsForZooKeeper(t *testing.T) {
	t.Parallel()
	testutil.ZooKeeper(t) // the ZooKeeper tooling; this test starts its own server
	zkPort := testutil.FreePort(t)
	b, e, logs := newWaitingBundle(t, zkPort)
	started := make(chan error, 1)
	go func() { started <- b.Start(context.Background()) }()
	t.Cleanup(func() { b.Close() })
	defer func() {
		if t.Failed() {
			t.Logf("bundle log:\n%s", logs.String())
		}
	}()

	// It waits, and says so at WARN with the ensemble and how long so far.
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-started:
			t.Fatalf("Start returned while ZooKeeper was down: %v", err)
		default:
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "still waiting") &&
				strings.Contains(l, e.zk) && strings.Contains(l, "waited=") {
				return nil
			}
		}
		return fmt.Errorf("no warning that it waits for ZooKeeper yet")
	})
	// Nothing is served meanwhile: not the MetaQ port.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(e.port), time.Second); err == nil {
		c.Close()
		t.Fatal("the MetaQ port accepts connections while the bundle waits for ZooKeeper")
	}

	testutil.StartZooKeeper(t, zkPort)
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start once ZooKeeper is up: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Start did not return within 60s of ZooKeeper starting")
	}

	reader, err := registry.New(t.Context(), registry.Options{Connect: e.zk, Root: e.root, SessionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	node := reader.Paths().Broker(0, -1)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		data, _, err := reader.Get(t.Context(), node)
		if err != nil || string(data) != b.Broker.URL() {
			return fmt.Errorf("master node %q %v, want %s", data, err, b.Broker.URL())
		}
		return nil
	})
	c, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.put("e2e", 0, []byte("after the wait")); err != nil {
		t.Fatalf("put once started: %v", err)
	}
}

// TestRunStopsWhileWaitingForZooKeeper: a bundle waiting for its ensemble
// at start stops when asked (Run's context here; SIGTERM in
// cmd/metaq-server's TestSIGTERMWhileWaitingForZooKeeper) and returns no
// error: being stopped is not a failed start.
func TestRunStopsWhileWaitingForZooKeeper(t *testing.T) {
	t.Parallel()
	b, _, logs := newWaitingBundle(t, testutil.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-ran:
			t.Fatalf("Run returned while ZooKeeper was down: %v\n%s", err, logs.String())
		default:
		}
		if !strings.Contains(logs.String(), "still waiting") {
			return fmt.Errorf("not waiting for ZooKeeper yet")
		}
		return nil
	})
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run stopped by its context while starting: %v\n%s", err, logs.String())
		}
		if !strings.Contains(logs.String(), "stopped while starting") {
			t.Fatalf("no log of the stop while starting:\n%s", logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return within 20s of its context ending\n%s", logs.String())
	}
}

// newWaitingBundle builds, not starts, a master bundle whose ensemble is
// to be on zkPort (nothing listens there yet), with a one-second
// zk.zkConnectionTimeoutMs, logging at INFO into the returned buffer.
func newWaitingBundle(t *testing.T, zkPort int) (*Bundle, *testEnv, *testutil.SyncBuffer) {
	t.Helper()
	e := &testEnv{dir: t.TempDir(), root: "/metaq-wait", zk: "127.0.0.1:" + strconv.Itoa(zkPort), port: testutil.FreePort(t)}
	e.ini = filepath.Join(e.dir, "server.ini")
	e.writeINI(t, "[topic=e2e]\nnumPartitions=1\n")
	shortenConnectionTimeout(t, e.ini)
	logs := &testutil.SyncBuffer{}
	b, err := New(Options{
		ConfigPath: e.ini,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(e.port),
		AdminAddr:  "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, e, logs
}

// shortenConnectionTimeout sets zk.zkConnectionTimeoutMs to one second in
// the server.ini at path.
func shortenConnectionTimeout(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), "zk.zkConnectionTimeoutMs=10000", "zk.zkConnectionTimeoutMs=1000", 1)
	if out == string(data) {
		t.Fatal("server.ini has no zk.zkConnectionTimeoutMs=10000 to shorten")
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
