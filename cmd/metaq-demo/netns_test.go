package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	prefixRE = regexp.MustCompile(`namespaces (mqd\d+-)bj, `)
	pidRE    = regexp.MustCompile(`(?m)^(bj|hf|gz)\s+(master|slave\d)\s+mqd\d+-\w+\s+meta://198\.18\.0\.\d:8123\s+(\d+)\s`)
	rttRE    = regexp.MustCompile(`WAN round trip hf -> bj: (\d+)ms`)
)

// needNetns skips unless the netns mode can run here.
func needNetns(t *testing.T) {
	t.Helper()
	if ok, why := netnsUsable(defaultOptions()); !ok {
		t.Skipf("netns mode unavailable (%s): run the tests as root on Linux with `ip netns`", why)
	}
}

// checkGone fails when a namespace with prefix or one of pids is left.
func checkGone(t *testing.T, prefix string, pids []int) {
	t.Helper()
	list, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(list), prefix) {
		t.Errorf("namespaces %s* left behind:\n%s", prefix, list)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still running (kill 0: %v)", pid, err)
		}
	}
}

// sitePIDs reads the bundles' PIDs from the site table.
func sitePIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, m := range pidRE.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[3])
		pids = append(pids, pid)
	}
	if len(pids) != 3 {
		t.Fatalf("found %d site PIDs in the output:\n%s", len(pids), out)
	}
	return pids
}

// TestDemoNetnsOnce runs the tour with each site in its own network
// namespace behind emulated WAN links, and checks what it reports, that
// the sites ran on their 198.18.0.i addresses with the WAN delay between
// them, and that no namespace, process or forwarder is left afterwards.
func TestDemoNetnsOnce(t *testing.T) {
	needNetns(t)
	dir := filepath.Join(t.TempDir(), "demo-data")
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := run(ctx, []string{"-once", "-dir", dir, "-base-port", "0", "-messages", "300"}, &out, &errOut)
	s := out.String()
	m := prefixRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("not in netns mode: %v\n%s\n%s", err, s, errOut.String())
	}
	prefix := m[1]
	defer checkGone(t, prefix, nil)
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, s, errOut.String())
	}
	for _, want := range []string{
		"MetaQ three-site demo in network namespaces",
		"[1/5] produced 300 messages to orders at bj (from inside " + prefix + "bj)",
		"[2/5] replicated: hf and gz hold bj's",
		"read 300 messages;",
		"bj served 0 gets",
		"bj ok (topics added: payments); gz ok (topics added: payments); hf ok (topics added: payments)",
		"a producer in each of bj, hf and gz published to payments at its own site",
		"removed namespaces " + prefix + "bj, " + prefix + "hf, " + prefix + "gz and the WAN relay",
		"stopped; config sets and logs are in",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if regexp.MustCompile(`hf served 0 gets`).MatchString(s) {
		t.Errorf("hf served no gets:\n%s", s)
	}
	for _, g := range []string{"meta-slave-group-hf  hf", "meta-slave-group-gz  gz"} {
		if !regexp.MustCompile(regexp.QuoteMeta(g) + `\s+0\s+\d+\s+0\s+0\s+0\.0\s+ok`).MatchString(s) {
			t.Errorf("lag table lacks a caught-up row for %s:\n%s", g, s)
		}
	}
	// 30 ms each way: a TCP connect from hf to bj takes a full round trip.
	if m := rttRE.FindStringSubmatch(s); m == nil {
		t.Errorf("no WAN round trip in the output:\n%s", s)
	} else if ms, _ := strconv.Atoi(m[1]); ms < 55 || ms > 500 {
		t.Errorf("WAN round trip %d ms, want about 60", ms)
	}
	// The sites were configured on their namespace addresses.
	for site, want := range map[string]string{"bj/conf/site.ini": "hostName=198.18.0.1", "hf/conf/site.ini": "hostName=198.18.0.2",
		"gz/conf/site.ini": "join=198.18.0.1:8126", "hf/conf/async_slave.properties": "masterAddress=198.18.0.1:8124"} {
		b, err := os.ReadFile(filepath.Join(dir, site))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q (%v)", site, want, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, staleFile)); err == nil {
		t.Errorf("%s still marks a run that was cleaned up", staleFile)
	}
	checkGone(t, prefix, sitePIDs(t, s))
	for _, m := range dashRE.FindAllStringSubmatch(s, -1) {
		if c, err := net.DialTimeout("tcp", m[2], time.Second); err == nil {
			c.Close()
			t.Errorf("%s's dashboard forwarder %s still listens", m[1], m[2])
		}
	}
}

// TestDemoNetnsFailover runs -failover with the sites in network
// namespaces: the operator's commands run as metaq-server inside them, bj's
// replication port is cut on the WAN links and bj is killed with SIGKILL;
// every step must hold (wantFailover), and nothing is left afterwards.
func TestDemoNetnsFailover(t *testing.T) {
	needNetns(t)
	if testing.Short() {
		t.Skip("three sites and four failovers")
	}
	dir := filepath.Join(t.TempDir(), "demo-data")
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := run(ctx, []string{"-once", "-failover", "-dir", dir, "-base-port", "0", "-messages", "50"}, &out, &errOut)
	s := out.String()
	m := prefixRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("not in netns mode: %v\n%s\n%s", err, s, errOut.String())
	}
	defer checkGone(t, m[1], nil)
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, s, errOut.String())
	}
	wantFailover(t, s, dir, "bj's metaq-server (pid ")
	pids := sitePIDs(t, s)
	if m := regexp.MustCompile(`bj's metaq-server \(pid (\d+)\) was killed with SIGKILL`).FindStringSubmatch(s); m == nil {
		t.Errorf("bj's metaq-server was not killed:\n%s", s)
	}
	checkGone(t, m[1], pids)
}

// TestDemoNetnsSignal runs the built demo in netns mode without -once:
// the dashboards answer through the forwarders while it runs, SIGTERM ends
// it with status 0 and nothing of it is left. Then a demo killed with
// SIGKILL takes its bundles with it (parent-death signal), and the next
// start in the same folder removes the namespaces it left.
func TestDemoNetnsSignal(t *testing.T) {
	needNetns(t)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "metaq-demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	server := filepath.Join(tmp, "metaq-server")
	if out, err := exec.Command("go", "build", "-o", server, "../metaq-server").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "demo-data")
	start := func() *demoProc {
		return startDemoProc(t, &syscall.SysProcAttr{Setpgid: true}, syscall.SIGTERM,
			bin, "-dir", dir, "-base-port", "0", "-messages", "50", "-every", "300ms", "-server-bin", server)
	}

	p := start()
	out := strings.Join(p.waitLag(t, 60*time.Second), "\n")
	prefix := prefixRE.FindStringSubmatch(out)[1]
	pids := sitePIDs(t, out)
	dashes := dashRE.FindAllStringSubmatch(out, -1)
	if len(dashes) != 3 {
		t.Fatalf("dashboards in output: %v\n%s", dashes, out)
	}
	for _, m := range dashes {
		resp, err := http.Get("http://" + m[2] + "/lag")
		if err != nil {
			t.Fatalf("%s's dashboard through the forwarder: %v", m[1], err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("meta-slave-group-hf")) {
			t.Errorf("%s /lag: %s %.200s", m[1], resp.Status, body)
		}
	}
	rest := p.stop(t, syscall.SIGTERM, 40*time.Second)
	if !strings.Contains(strings.Join(rest, "\n"), "removed namespaces "+prefix+"bj") {
		t.Errorf("no cleanup message:\n%s", strings.Join(rest, "\n"))
	}
	checkGone(t, prefix, pids)

	// SIGKILL: no cleanup runs, but the bundles die with the demo...
	p = start()
	out = strings.Join(p.waitLag(t, 60*time.Second), "\n")
	prefix = prefixRE.FindStringSubmatch(out)[1]
	pids = sitePIDs(t, out)
	p.cmd.Process.Kill()
	p.cmd.Wait()
	for _, pid := range pids {
		if err := waitGone(pid, 5*time.Second); err != nil {
			t.Errorf("bundle %d outlived the demo: %v", pid, err)
		}
	}
	// ...and the next start (which calls removeStale before it empties the
	// folder) removes the namespaces and relay left behind.
	if list, _ := exec.Command("ip", "netns", "list").Output(); !strings.Contains(string(list), prefix) {
		t.Fatalf("no namespace left after SIGKILL, so the stale cleanup is untested:\n%s", list)
	}
	var next bytes.Buffer
	removeStale(dir, &next)
	if !strings.Contains(next.String(), "removing namespaces "+prefix) {
		t.Errorf("no stale cleanup: %q", next.String())
	}
	checkGone(t, prefix, pids)
}

// waitGone waits until pid no longer exists.
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
