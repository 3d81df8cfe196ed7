// Package deploy holds the deployment files (see README.md); its test runs
// local-three-sites.sh end to end.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/freeport"
)

// TestLocalThreeSites runs deploy/local-three-sites.sh up (deploy/'s
// layout: bj's two masters, brokerIds 1 and 2, and a slave of each at hf and
// gz), produces at bj, reads the messages at hf and gz (from each site's two
// replicas, and through each site's ZooKeeper view as a Java consumer there
// would), checks that configsync reached all six bundles, runs the scenario of
// stoppedMasterAcknowledgesNothing, and runs down, which must leave no
// process behind. It needs ZooKeeper's jars and openssl, as CI has them: skipped
// without METAQ_TEST_ZK.
func TestLocalThreeSites(t *testing.T) {
	l := upLayout(t)
	dir, base, env, run, sh := l.dir, l.base, l.env, l.run, l.sh
	start := l.start

	// configsync: the first version reached all three sites.
	st := run("configsync", "status", "-nats", "nats://127.0.0.1:"+strconv.Itoa(base+1))
	for _, agent := range []string{"bj-1", "bj-2", "hf-1", "hf-2", "gz-1", "gz-2"} {
		if !regexp.MustCompile(`(?m)^` + agent + `\s+v1\s`).MatchString(st) {
			t.Errorf("configsync status: %s does not run v1:\n%s", agent, st)
		}
	}

	const n = 100
	if out := run("metaq", "produce", "-zk", env["BJ_ZK"], "-topic", "orders", "-n", strconv.Itoa(n), "-q"); !strings.Contains(out, "0 failed") {
		t.Fatalf("produce: %s", out)
	}
	for _, site := range []string{"hf", "gz"} {
		upper := strings.ToUpper(site)
		// The site's two replicas hold every message between them, each
		// its master's partitions (replication over mutual TLS with the
		// shared secret); the producer used both masters.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got [2]int
			for b, addr := range []string{env[upper+"_BROKER"], env[upper+"_BROKER2"]} {
				for p := 0; p < 8; p++ {
					out := run("metaq", "fetch", "-brokers", addr, "-topic", "orders", "-partition", fmt.Sprintf("%d-%d", b+1, p), "-n", "0")
					got[b] += strings.Count(out, "\n") - strings.Count(out, "end of partition")
				}
			}
			if got[0]+got[1] == n && got[0] > 0 && got[1] > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's replicas hold %d and %d of %d messages", site, got[0], got[1], n)
			}
			time.Sleep(500 * time.Millisecond)
		}
		// A consumer at the site reads them through the site's own view.
		out := run("metaq", "consume", "-zk", env[upper+"_ZK"], "-root", "/meta-view-"+site, "-topic", "orders",
			"-group", "recipe-"+site, "-n", strconv.Itoa(n), "-q")
		if got := strings.Count(out, "\n"); got < n {
			t.Errorf("consume at %s: %d lines, want %d", site, got, n)
		}
	}

	// bj paused (SIGSTOP) while hf or gz is promoted, then let run again.
	t.Run("StoppedMasterAcknowledgesNothingAfterPromotion", func(t *testing.T) { stoppedMasterAcknowledgesNothing(t, l) })

	out, err := sh("down", dir)
	l.downDone = true
	if err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s: %v", dir, err)
	}
	for off := 0; off < 60; off++ {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off)), 200*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("port %d still answers after down", base+off)
		}
	}
	t.Logf("up to down in %v", time.Since(start).Round(time.Second))
}

// layout is deploy/local-three-sites.sh up in a temporary directory,
// taken down when the test ends.
type layout struct {
	dir      string
	base     int
	env      map[string]string
	start    time.Time
	ctx      context.Context
	downDone bool
	// sh runs the script with args; run runs one of the built commands
	// with the layout's token and configuration, failing the test on error,
	// and returns its stdout followed by its stderr.
	sh  func(args ...string) (string, error)
	run func(name string, args ...string) string
}

// upLayout runs local-three-sites.sh up. It needs ZooKeeper's jars and
// openssl, as CI has them: skipped without METAQ_TEST_ZK.
func upLayout(t *testing.T) *layout {
	t.Helper()
	if os.Getenv("METAQ_TEST_ZK") == "" {
		t.Skip("METAQ_TEST_ZK is not set (CI sets it; the script starts its own three ZooKeepers)")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	l := &layout{dir: filepath.Join(t.TempDir(), "sites"), base: freeBase(t)}
	script, err := filepath.Abs("local-three-sites.sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	l.ctx = ctx
	l.sh = func(args ...string) (string, error) {
		// Not ctx: down must run in the cleanup too, after ctx is cancelled.
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.WaitDelay = time.Minute
		cmd.Env = append(os.Environ(), "METAQ_PORT_BASE="+strconv.Itoa(l.base))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		if !l.downDone {
			if out, err := l.sh("down", l.dir); err != nil {
				t.Logf("down: %v\n%s", err, out)
			}
		}
	})
	l.start = time.Now()
	if out, err := l.sh("up", l.dir); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	t.Logf("up in %v", time.Since(l.start).Round(time.Second))
	l.env = readEnv(t, filepath.Join(l.dir, "env"))
	l.run = func(name string, args ...string) string {
		t.Helper()
		out, err := l.runErr(name, args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return out
	}
	return l
}

// runErr runs one of the built commands with the layout's token and
// configuration and returns its stdout followed by its stderr.
func (l *layout) runErr(name string, args ...string) (string, error) {
	cmd := exec.CommandContext(l.ctx, filepath.Join(l.dir, "bin", name), args...)
	cmd.Env = append(os.Environ(), "METAQ_TOKEN="+l.env["METAQ_TOKEN"], "METAQ_CONF="+l.env["METAQ_CONF"])
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String() + errb.String(), err
}

// freeBase finds a port base whose 60 ports (three sites of 20) nothing
// listens on, leased through internal/freeport from the stretch below its
// single ports that the fault schedules use too. It used to pick from
// 30000-59999, inside the kernel's ephemeral range (32768-60999), where an
// outgoing connection of another test could take a port between the check
// and the bundle's listen ("bind: address already in use" in a CI run).
func freeBase(t *testing.T) int {
	t.Helper()
	base, err := freeport.ConsecutiveIn(60, 10000, 19999)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// readEnv reads the KEY=VALUE words of the env file up writes.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, w := range strings.Fields(strings.TrimPrefix(sc.Text(), "export ")) {
			if k, v, ok := strings.Cut(w, "="); ok {
				env[k] = v
			}
		}
	}
	return env
}
