package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"metaq/broker/brokertest"
	"metaq/internal/testutil"
)

// startBroker runs the project's broker in process, registered under a
// fresh ZooKeeper root, and returns that root.
func startBroker(t *testing.T, zk string) string {
	t.Helper()
	root := fmt.Sprintf("/metaq-test-cli-%d", rand.Int64())
	brokertest.Start(t, zk, root, map[string]int{"cli": 2}, nil)
	return root
}

func metaq(t *testing.T, stdinText string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, args, strings.NewReader(stdinText), &out, &errb)
	return out.String(), errb.String(), err
}

func TestCommands(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := startBroker(t, zk)
	g := []string{"-zk", zk, "-root", root}

	// produce from stdin prints one result per line.
	out, errs, err := metaq(t, "alpha\nbeta\ngamma\n", append(g, "produce", "-topic", "cli")...)
	if err != nil {
		t.Fatalf("produce: %v %s", err, errs)
	}
	res := regexp.MustCompile(`(?m)^(\d+-\d+) offset=(\d+) id=(-?\d+)$`).FindAllStringSubmatch(out, -1)
	if len(res) != 3 {
		t.Fatalf("produce output %q", out)
	}
	firstTime := time.Now()
	time.Sleep(20 * time.Millisecond)
	mark := time.Now()
	if _, errs, err := metaq(t, "", append(g, "produce", "-topic", "cli", "-n", "40", "-size", "50", "-async")...); err != nil {
		t.Fatalf("produce -n: %v %s", err, errs)
	}

	// consume the 43 messages as a group, then the offsets are committed.
	out, errs, err = metaq(t, "", append(g, "consume", "-topic", "cli", "-group", "cg", "-n", "43")...)
	if err != nil {
		t.Fatalf("consume: %v %s", err, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 43 || !strings.Contains(out, "alpha") || !strings.Contains(out, "gamma") {
		t.Fatalf("consume got %d lines: %q", len(lines), out)
	}
	out, _, err = metaq(t, "", append(g, "offsets", "-group", "cg", "-topic", "cli")...)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^0-0\t\d+\t-?\d+\t\d+\t0\t-$`).MatchString(out) {
		t.Fatalf("offsets after consuming: %q", out)
	}

	// reset by time: only the 40 generated messages are consumed again.
	if _, errs, err := metaq(t, "", append(g, "offsets", "-group", "cg", "-topic", "cli", "-reset", "time:"+mark.Format(time.RFC3339Nano))...); err != nil {
		t.Fatalf("reset: %v %s", err, errs)
	}
	out, _, err = metaq(t, "", append(g, "consume", "-topic", "cli", "-group", "cg", "-n", "40")...)
	if err != nil || strings.Contains(out, "alpha") || len(strings.Split(strings.TrimSpace(out), "\n")) != 40 {
		t.Fatalf("after reset by time: %v %q", err, out)
	}

	// fetch from a time returns the stdin messages first.
	out, _, err = metaq(t, "", append(g, "fetch", "-topic", "cli", "-partition", res[0][1], "-time", firstTime.Add(-time.Minute).Format(time.RFC3339Nano), "-n", "1")...)
	if err != nil || !strings.Contains(out, "offset=0 ") {
		t.Fatalf("fetch by time: %v %q", err, out)
	}
	// find by id.
	out, errs, err = metaq(t, "", append(g, "find", "-topic", "cli", "-id", res[1][3])...)
	if err != nil || !strings.Contains(out, "beta") || !strings.Contains(out, "offset="+res[1][2]+" ") {
		t.Fatalf("find: %v %q %q", err, out, errs)
	}
	// topics and partitions.
	out, _, err = metaq(t, "", append(g, "topics")...)
	if err != nil || !strings.Contains(out, "cli\tpublish 2 partitions") {
		t.Fatalf("topics: %v %q", err, out)
	}
	out, _, err = metaq(t, "", append(g, "partitions", "-topic", "cli")...)
	if err != nil || !regexp.MustCompile(`(?m)^0-1\t0\t\d+$`).MatchString(out) {
		t.Fatalf("partitions: %v %q", err, out)
	}
	// unknown command.
	if _, _, err := metaq(t, "", "nosuch"); err == nil {
		t.Fatal("unknown command accepted")
	}
}

func TestParseTimeAndStart(t *testing.T) {
	if _, err := parseTime("2026-01-02T03:04:05Z"); err != nil {
		t.Fatal(err)
	}
	if tm, err := parseTime("10m"); err != nil || time.Since(tm) < 9*time.Minute {
		t.Fatalf("relative time %v %v", tm, err)
	}
	if _, err := parseTime("yesterday"); err == nil {
		t.Fatal("bad time accepted")
	}
	for _, s := range []string{"earliest", "latest", "offset:42", "time:5m"} {
		if _, err := parseStart(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if _, err := parseStart("offset:x"); err == nil {
		t.Fatal("bad start accepted")
	}
}

// fakeMetaQ answers MetaQ's version command and closes the connection on
// an unknown command line, as the broker does; bytes without a line end
// (ZooKeeper's handshake) get no answer.
func fakeMetaQ(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "version ") {
			return
		}
		fmt.Fprintf(c, "result 200 1.4.6 %s", strings.TrimPrefix(line, "version "))
	}
}

// TestErrorsNameWhatAnswered: pointed at the wrong kind of port, the
// commands say what answered instead of timing out or saying EOF.
func TestErrorsNameWhatAnswered(t *testing.T) {
	mq := testutil.ServeTCP(t, fakeMetaQ)
	start := time.Now()
	_, _, err := metaq(t, "", "-zk", mq, "topics")
	if err == nil || !strings.Contains(err.Error(), mq+" is a MetaQ broker port, not ZooKeeper") {
		t.Errorf("topics -zk <MetaQ port>: %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("topics -zk <MetaQ port> took %v", d)
	}
	_, _, err = metaq(t, "", "lag", "-addr", mq)
	if err == nil || !strings.Contains(err.Error(), mq+" is a MetaQ broker port") || !strings.Contains(err.Error(), "dashboardHttpPort") {
		t.Errorf("lag -addr <MetaQ port>: %v", err)
	}
	// A port that reads a request and closes without a word (a replication
	// listener does).
	closer := testutil.ServeTCP(t, func(c net.Conn) { c.Read(make([]byte, 512)) })
	_, _, err = metaq(t, "x\n", "-brokers", closer, "produce", "-topic", "t")
	if err == nil || !strings.Contains(err.Error(), closer+" closed the connection without answering anything") || strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("produce to a non-MetaQ port: %v", err)
	}
}

// TestProduceReportsFailuresAsTheyHappen: reading stdin, each failed line
// is named on stderr when it fails (before the summary), not only in the
// count at exit.
func TestProduceReportsFailuresAsTheyHappen(t *testing.T) {
	closer := testutil.ServeTCP(t, func(c net.Conn) { c.Read(make([]byte, 512)) })
	_, errs, err := metaq(t, "first\nsecond\n", "-brokers", closer, "produce", "-topic", "t")
	if err == nil {
		t.Fatal("produce to a port that closes succeeded")
	}
	first, second, summary := strings.Index(errs, `line 1 ("first") failed: `), strings.Index(errs, `line 2 ("second") failed: `), strings.Index(errs, "produce: sent 0 messages")
	if first < 0 || second < 0 || summary < second {
		t.Errorf("stderr does not name each failed line before the summary:\n%s", errs)
	}
}
