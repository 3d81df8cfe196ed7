package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the netns mode re-run this test binary inside a
// namespace as it re-runs the demo binary.
func TestMain(m *testing.M) {
	if internalMain(os.Args[1:]) {
		return
	}
	os.Exit(m.Run())
}

var dashRE = regexp.MustCompile(`(?m)^  (bj|hf|gz)  http://(127\.0\.0\.1:\d+)/$`)

// TestDemoOnce runs the tour on free ports and checks what it reports: every
// step, the per-site configsync results, the lag table with both slave
// groups caught up, and that nothing listens any more once it returned.
func TestDemoOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo-data")
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := run(ctx, []string{"-once", "-no-netns", "-dir", dir, "-base-port", "0", "-messages", "300"}, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{
		"network namespaces: off (-no-netns); the sites run in this process",
		"[1/5] produced 300 messages to orders at bj",
		"[2/5] replicated: hf and gz hold bj's",
		"read 300 messages;",
		"bj served 0 gets",
		"bj ok (topics added: payments); gz ok (topics added: payments); hf ok (topics added: payments)",
		// hf and gz refuse client puts as slaves: only their write
		// gateways, on for the pushed topic, can have taken these.
		"a producer in each of bj, hf and gz published to payments at its own site",
		"hf's and gz's write gateways carried the puts to bj",
		"SLAVE GROUP",
		"stopped; config sets and logs are in",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, g := range []string{"meta-slave-group-hf  hf", "meta-slave-group-gz  gz"} {
		if !regexp.MustCompile(regexp.QuoteMeta(g) + `\s+0\s+\d+\s+0\s+0\s+0\.0\s+ok`).MatchString(s) {
			t.Errorf("lag table lacks a caught-up row for %s:\n%s", g, s)
		}
	}
	// The config sets are left for the user to read.
	for _, f := range []string{"bj/conf/server.ini", "bj/conf/site.ini", "hf/conf/async_slave.properties", "gz/conf/site.ini", "hf/bundle.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// Replication ran authenticated: the slaves caught up (above) through a
	// master that requires the shared secret.
	if fi, err := os.Stat(filepath.Join(dir, "bj/conf/replication.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("bj/conf/replication.key: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "bj/bundle.log")); !strings.Contains(string(b), "authenticated=true") {
		t.Errorf("bj's replication listener did not require authentication:\n%.2000s", b)
	}
	ms := dashRE.FindAllStringSubmatch(s, -1)
	if len(ms) != 3 {
		t.Fatalf("found %d dashboard URLs in the output", len(ms))
	}
	for _, m := range ms {
		if c, err := net.DialTimeout("tcp", m[2], time.Second); err == nil {
			c.Close()
			t.Errorf("%s's dashboard %s still listens after the demo returned", m[1], m[2])
		}
	}
	// A second run in the same folder starts clean.
	out.Reset()
	if err := run(ctx, []string{"-once", "-no-netns", "-dir", dir, "-base-port", "0", "-messages", "10"}, &out, &errOut); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	// A folder the demo did not make is refused.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "keep.txt"), []byte("x"), 0o644)
	if err := run(ctx, []string{"-once", "-no-netns", "-dir", other, "-base-port", "0"}, &out, &errOut); err == nil {
		t.Error("the demo used a non-empty folder it did not make")
	}
}

// TestDemoInterrupt builds the command, runs it without -once, waits for
// the periodic lag lines, sends SIGINT and checks that it exits 0, closes
// every listener and leaves no process behind.
func TestDemoInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "metaq-demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "demo-data")
	p := startDemoProc(t, &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}, os.Kill,
		bin, "-no-netns", "-dir", dir, "-base-port", "0", "-messages", "50", "-every", "300ms")
	all := p.waitLag(t, 90*time.Second)
	var dashes []string
	for _, m := range dashRE.FindAllStringSubmatch(strings.Join(all, "\n"), -1) {
		dashes = append(dashes, m[2])
	}
	all = append(all, p.stop(t, syscall.SIGINT, 30*time.Second)...)
	if !strings.Contains(strings.Join(all, "\n"), "stopped; config sets and logs are in") {
		t.Errorf("no stop message:\n%s", strings.Join(all, "\n"))
	}
	if len(dashes) != 3 {
		t.Fatalf("dashboards in output: %v", dashes)
	}
	for _, a := range dashes {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still listens", a)
		}
	}
}

// TestDemoFailover runs the tour with -failover in process and checks
// that every failover step ran and held (wantFailover).
func TestDemoFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("three sites and four failovers")
	}
	dir := filepath.Join(t.TempDir(), "demo-data")
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"-once", "-failover", "-no-netns", "-dir", dir, "-base-port", "0", "-messages", "50"}, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	wantFailover(t, out.String(), dir, "bj's bundle stopped without a handover")
}

// wantFailover checks the -failover steps in a demo's output: no
// acknowledged message lost in either switchover, hf promoted after bj's
// loss (lost as lostHow says) with gz following it, and bj back as hf's
// slave with the messages hf lacks saved aside.
func wantFailover(t *testing.T, s, dir, lostHow string) {
	t.Helper()
	for _, re := range []string{
		`\[failover 1/4\] planned switchover bj -> hf`,
		`hf took over at generation 1: bj refused puts for \S+ until hf held its durable log`,
		`none of the \d+ acknowledged messages lost: all at hf; bj answers puts "403: [^"]*hf`,
		`\[failover 2/4\] planned switchover hf -> bj`,
		`bj took over at generation 2`,
		`none of the \d+ acknowledged messages lost: all at bj; hf answers puts "403: [^"]*bj`,
		`\(at hf, bj still reachable\): refused`,
		`acknowledged \d+ more messages in \S+; then ` + regexp.QuoteMeta(lostHow),
		`\(at hf, once it lost bj\): generation 3 in`,
		`the producer's first put at hf was acknowledged \S+ after bj was lost`,
		`gz follows hf \(same \d+ bytes, crc32 [0-9a-f]{8}\) and (saved nothing aside|cut and saved aside the \d+ records it had received from bj beyond hf's ends); hf lacks [1-9]\d* messages bj acknowledged`,
		`\[failover 4/4\] bj returns as a slave of hf`,
		`bj follows hf byte for byte`,
		`orders-\d+\s+\d+\s+\d+\s+3\s+[1-9]\d*\s+\S*/bj/data/replication/unreplicated/orders-\d+-\d+-\d+-gen3\.records`,
		`every one of the [1-9]\d* acknowledged messages hf lacks is in bj's saved tail`,
		`(?m)^      bj: slave, refuses puts\n      hf: master, takes puts\n      gz: slave, refuses puts$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("output lacks %s:\n%s", re, s)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "bj/data/replication/unreplicated/*.records")); len(files) == 0 {
		t.Error("bj saved no unreplicated records")
	}
}
