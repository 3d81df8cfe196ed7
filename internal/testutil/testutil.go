// Package testutil holds small helpers shared by the project's tests.
package testutil

import (
	"io"
	"net/http"
	"os"
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
