package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/internal/testutil"
)

// startStatic runs a broker without ZooKeeper whose brokerId is id.
func startStatic(t *testing.T, id int, topics string) string {
	t.Helper()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	ini := fmt.Sprintf("[system]\nbrokerId=%d\nhostName=127.0.0.1\nserverPort=%d\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\n"+
		"maxSegmentSize=1048576\nmaxTransferSize=1048576\ndataPath=%s\n[zookeeper]\nzk.zkEnable=false\n%s", id, port, dir, topics)
	cfg, _, err := config.Parse("server.ini", []byte(ini))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: dir, BrokerID: id, SegmentBytes: cfg.System.MaxSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	b, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); st.Close() })
	return addr
}

// TestStaticBrokersByID: with -brokers (no ZooKeeper), partitions lists every
// partition under each broker's own id, find finds a message fetch shows,
// fetch names partitions by broker id and reports the right next offset, and
// produce says what it sent.
func TestStaticBrokersByID(t *testing.T) {
	a := startStatic(t, 5, "[topic=t]\nnumPartitions=2\n")
	b := startStatic(t, 7, "[topic=t]\nnumPartitions=1\n")
	out, errs, err := metaq(t, "one\ntwo\nthree\n", "-brokers", a, "produce", "-topic", "t")
	if err != nil {
		t.Fatalf("produce: %v %s", err, errs)
	}
	if !strings.Contains(errs, "sent 3 messages (11 payload bytes) to t, 0 failed") {
		t.Errorf("produce summary: %q", errs)
	}
	first := regexp.MustCompile(`(?m)^\S+ offset=(\d+) id=(-?\d+)$`).FindStringSubmatch(out)
	if first == nil {
		t.Fatalf("produce output %q", out)
	}
	id := first[2]

	both := a + "," + b
	out, errs, err = metaq(t, "", "-brokers", both, "partitions", "-topic", "t")
	if err != nil {
		t.Fatalf("partitions: %v %s", err, errs)
	}
	for _, want := range []string{"\n5-0\t", "\n5-1\t", "\n7-0\t"} {
		if !strings.Contains(out, want) {
			t.Errorf("partitions lack %q:\n%s", strings.TrimSpace(want), out)
		}
	}
	if regexp.MustCompile(`(?m)^\d+--1\t`).MatchString(out) {
		t.Errorf("partitions still shows partition -1:\n%s", out)
	}

	// find: the message lives in one of broker 5's partitions.
	out, errs, err = metaq(t, "", "-brokers", both, "find", "-topic", "t", "-id", id)
	if err != nil || !strings.Contains(out, "one") || !regexp.MustCompile(`^t 5-\d `).MatchString(out) {
		t.Fatalf("find %s: %v %q %s", id, err, out, errs)
	}
	part := strings.Fields(out)[1]

	// fetch by broker id: the first message, then the offset of the next one.
	out, errs, err = metaq(t, "", "-brokers", b+","+a, "fetch", "-topic", "t", "-partition", part, "-n", "1")
	if err != nil || !strings.Contains(out, "t "+part+" offset=0 ") {
		t.Fatalf("fetch %s: %v %q %s", part, err, out, errs)
	}
	all, _, err := metaq(t, "", "-brokers", a, "fetch", "-topic", "t", "-partition", part, "-n", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(all), "\n")
	if len(lines) == 2 {
		second := regexp.MustCompile(`offset=(\d+)`).FindStringSubmatch(lines[1])[1]
		if !strings.Contains(errs, "next offset "+second) {
			t.Errorf("fetch -n 1 reports %q, want next offset %s", errs, second)
		}
	}
	if _, _, err := metaq(t, "", "-brokers", a, "fetch", "-topic", "t", "-partition", "7-0"); err == nil || !strings.Contains(err.Error(), "no broker with id 7") {
		t.Errorf("fetch from an id not among -brokers: %v", err)
	}
}
