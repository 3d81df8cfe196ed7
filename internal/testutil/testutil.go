// Package testutil holds small helpers shared by the project's tests.
package testutil

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/freeport"
)

// HTTPDo sends a bodyless request, with "Authorization: Bearer token" when
// token is set, and returns the status and body.
func HTTPDo(t testing.TB, method, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// FreePort returns a loopback port nothing listens on (TCP or UDP), for a
// server that must know its port before it binds (see internal/freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Eventually calls fn every step until it returns nil or timeout passes, then
// fails the test with fn's last error.
func Eventually(t testing.TB, timeout, step time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(step)
	}
}

// ZKEnv names the environment variable that holds the address of a real
// ZooKeeper for integration tests. .ci/run starts one and sets it.
const ZKEnv = "METAQ_TEST_ZK"

// ZooKeeper returns the address of the test ZooKeeper, or skips the test with
// a clear message when none is configured.
func ZooKeeper(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(ZKEnv)
	if addr == "" {
		t.Skipf("%s is not set: this test needs a real ZooKeeper (bash .ci/run starts one)", ZKEnv)
	}
	return addr
}

// ZK2Env names the environment variable that holds a second, separate
// ZooKeeper server, for tests of one ensemble per site.
const ZK2Env = "METAQ_TEST_ZK2"

// ZK3Env names the environment variable that holds a third ZooKeeper
// server, for tests of three sites with one ensemble each.
const ZK3Env = "METAQ_TEST_ZK3"

// SecondZooKeeper returns the address of a ZooKeeper server other than
// ZooKeeper(t)'s: METAQ_TEST_ZK2 when set, otherwise one started for this
// test with the repository's .ci/zookeeper.sh and stopped when it ends. It
// skips the test when METAQ_TEST_ZK is not set or no server can be started.
func SecondZooKeeper(t testing.TB) string {
	t.Helper()
	return extraZooKeeper(t, ZK2Env)
}

// ThirdZooKeeper is SecondZooKeeper for a third server (METAQ_TEST_ZK3),
// other than both.
func ThirdZooKeeper(t testing.TB) string {
	t.Helper()
	return extraZooKeeper(t, ZK3Env)
}

func extraZooKeeper(t testing.TB, env string) string {
	t.Helper()
	ZooKeeper(t)
	if addr := os.Getenv(env); addr != "" {
		return addr
	}
	return StartZooKeeper(t, FreePort(t))
}

// StartZooKeeper starts a ZooKeeper server of its own on 127.0.0.1:port
// with the repository's .ci/zookeeper.sh (empty data), stopped when the
// test ends, and returns its address: a test of an ensemble that is down
// and comes up later starts it only then. It skips the test when
// METAQ_TEST_ZK is not set or no server can be started.
func StartZooKeeper(t testing.TB, port int) string {
	t.Helper()
	ZooKeeper(t)
	script := ""
	for dir, _ := os.Getwd(); dir != "" && script == ""; {
		if _, err := os.Stat(filepath.Join(dir, ".ci", "zookeeper.sh")); err == nil {
			script = filepath.Join(dir, ".ci", "zookeeper.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if script == "" {
		t.Skip(".ci/zookeeper.sh was not found to start another ZooKeeper")
	}
	dir, err := os.MkdirTemp("", "metaq-zk-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", script, "start", strconv.Itoa(port), dir).Output()
	t.Cleanup(func() {
		exec.Command("bash", script, "stop", dir).Run()
		os.RemoveAll(dir)
	})
	if err != nil {
		t.Skipf("another ZooKeeper did not start on port %d: %v", port, err)
	}
	return strings.TrimSpace(string(out))
}

// CopyTree copies the directory tree from into to (created as needed),
// for a test that keeps a copy of a data directory.
func CopyTree(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", from, to, err)
	}
}

// ServeTCP listens on a loopback port until the test ends and hands each
// connection to serve on a goroutine of its own, closing it afterwards.
// It returns the listener's address.
func ServeTCP(t testing.TB, serve func(c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return l.Addr().String()
}
