package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"metaq/internal/testutil"
)

// TestOffsetsReset checks what `metaq offsets -reset` writes to ZooKeeper
// (earliest, latest, offset:N, one partition only), reading the nodes back
// directly, and that a consumer of the group then starts where it says.
func TestOffsetsReset(t *testing.T) {
	zkAddr := testutil.ZooKeeper(t)
	root := startBroker(t, zkAddr)
	g := []string{"-zk", zkAddr, "-root", root}

	// Ten messages spread over the two partitions of "cli".
	out, errs, err := metaq(t, "m0\nm1\nm2\nm3\nm4\nm5\nm6\nm7\nm8\nm9\n", append(g, "produce", "-topic", "cli")...)
	if err != nil {
		t.Fatalf("produce: %v %s", err, errs)
	}
	type sent struct {
		part   string
		offset int64
	}
	var msgs []sent
	ends := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^(\d+-\d+) offset=(\d+) id=(-?\d+)$`).FindAllStringSubmatch(out, -1) {
		off, _ := strconv.ParseInt(m[2], 10, 64)
		msgs = append(msgs, sent{m[1], off})
	}
	if len(msgs) != 10 {
		t.Fatalf("produce output %q", out)
	}
	out, _, err = metaq(t, "", append(g, "partitions", "-topic", "cli")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^(\d+-\d+)\t(\d+)\t(\d+)$`).FindAllStringSubmatch(out, -1) {
		hi, _ := strconv.ParseInt(m[3], 10, 64)
		ends[m[1]] = hi
	}
	if len(ends) != 2 || ends["0-0"] == 0 || ends["0-1"] == 0 {
		t.Fatalf("partitions output %q (both partitions should hold messages)", out)
	}

	conn, _, err := zk.Connect([]string{zkAddr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := func(part string) string {
		t.Helper()
		var d []byte
		testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			var err error
			d, _, err = conn.Get(fmt.Sprintf("%s/consumers/rg/offsets/cli/%s", root, part))
			return err
		})
		return string(d)
	}

	// Consuming everything commits the ends.
	if _, errs, err := metaq(t, "", append(g, "consume", "-topic", "cli", "-group", "rg", "-n", "10")...); err != nil {
		t.Fatalf("consume: %v %s", err, errs)
	}
	for p, end := range ends {
		if v := node(p); !strings.HasSuffix(v, "-"+strconv.FormatInt(end, 10)) || strings.HasPrefix(v, "-1-") {
			t.Fatalf("after consuming, %s holds %q, want <msgId>-%d", p, v, end)
		}
	}

	reset := func(spec string, extra ...string) {
		t.Helper()
		args := append(append(g, "offsets", "-group", "rg", "-topic", "cli", "-reset", spec), extra...)
		if _, errs, err := metaq(t, "", args...); err != nil {
			t.Fatalf("reset %s: %v %s", spec, err, errs)
		}
	}
	reset("earliest")
	for p := range ends {
		if v := node(p); v != "-1-0" {
			t.Fatalf("after reset earliest, %s holds %q, want -1-0", p, v)
		}
	}
	reset("latest")
	for p, end := range ends {
		if v := node(p); v != fmt.Sprintf("-1-%d", end) {
			t.Fatalf("after reset latest, %s holds %q, want -1-%d", p, v, end)
		}
	}
	// offset:N on one partition: the other keeps its value.
	var target sent
	for _, m := range msgs {
		if m.part == "0-1" && m.offset > 0 {
			target = m
			break
		}
	}
	if target.part == "" {
		t.Fatalf("no second message in 0-1: %+v", msgs)
	}
	reset(fmt.Sprintf("offset:%d", target.offset), "-partition", "0-1")
	if v := node("0-1"); v != fmt.Sprintf("-1-%d", target.offset) {
		t.Fatalf("after reset offset:%d, 0-1 holds %q", target.offset, v)
	}
	if v := node("0-0"); v != fmt.Sprintf("-1-%d", ends["0-0"]) {
		t.Fatalf("reset of 0-1 changed 0-0 to %q", v)
	}
	// The group now replays 0-1 from that message to its end, nothing else.
	want := 0
	for _, m := range msgs {
		if m.part == "0-1" && m.offset >= target.offset {
			want++
		}
	}
	out, errs, err = metaq(t, "", append(g, "consume", "-topic", "cli", "-group", "rg", "-full", "-n", strconv.Itoa(want))...)
	if err != nil {
		t.Fatalf("consume after reset: %v %s", err, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != want || !strings.Contains(lines[0], fmt.Sprintf("offset=%d ", target.offset)) {
		t.Fatalf("after reset offset:%d consumed %q", target.offset, out)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "cli 0-1 ") {
			t.Fatalf("replayed a message of 0-0: %q", l)
		}
	}
	// A bad spec changes nothing.
	if _, _, err := metaq(t, "", append(g, "offsets", "-group", "rg", "-topic", "cli", "-reset", "offset:x")...); err == nil {
		t.Fatal("reset offset:x accepted")
	}
}
