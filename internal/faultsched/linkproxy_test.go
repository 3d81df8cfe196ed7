package faultsched

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	return testutil.ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
}

// roundTrip sends one byte and waits up to d for it to come back.
func roundTrip(c net.Conn, d time.Duration) bool {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil
}

// TestLinkCutHoldsOnlyItsPair: the proxy names the dialing site from the
// socket this process holds (this test's pid is "hf"), so cutting hf-bj
// holds hf's bytes and new connections, cutting gz-bj does not, and a
// heal lets the held bytes through.
func TestLinkCutHoldsOnlyItsPair(t *testing.T) {
	target := echoServer(t)
	ls := NewLinks(func() map[int]string { return map[int]string{os.Getpid(): "hf"} })
	defer ls.Close()
	addr, err := ls.Listen("bj", "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !roundTrip(c, 5*time.Second) {
		t.Fatal("no echo through the open link")
	}
	ls.Cut("gz", "bj", true)
	if !roundTrip(c, 5*time.Second) {
		t.Fatal("cutting gz-bj held hf's connection to bj")
	}
	ls.Cut("bj", "hf", true)
	if roundTrip(c, 300*time.Millisecond) {
		t.Fatal("bytes crossed the cut hf-bj link")
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if roundTrip(c2, 300*time.Millisecond) {
		t.Fatal("a new connection crossed the cut hf-bj link")
	}
	ls.Cut("hf", "bj", false)
	// The held byte of each connection arrives, then its echo.
	for i, cc := range []net.Conn{c, c2} {
		cc.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(cc, b); err != nil {
			t.Fatalf("connection %d: the held byte did not come back after the heal: %v", i, err)
		}
	}
	if !roundTrip(c2, 5*time.Second) {
		t.Fatal("no echo after the heal")
	}
}

// TestScheduleIsAFunctionOfItsSeed: the same seed gives the same schedule,
// another seed another one, and every lasting fault is healed in time.
func TestScheduleIsAFunctionOfItsSeed(t *testing.T) {
	a := NewSchedule(42, 30*time.Second, nil)
	b := NewSchedule(42, 30*time.Second, nil)
	if a.String() != b.String() {
		t.Fatalf("seed 42 gave two schedules:\n%s\n%s", a, b)
	}
	if c := NewSchedule(43, 30*time.Second, nil); c.String() == a.String() {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	open := map[int]Event{}
	for _, e := range a.Events {
		if e.At > a.Duration {
			t.Fatalf("%v after the end", e)
		}
		if e.Heal {
			delete(open, e.ID)
		} else if e.Kind.lasting() {
			open[e.ID] = e
		}
	}
	if len(open) > 0 {
		t.Fatalf("faults never healed: %v", open)
	}
	if len(a.Events) < 20 {
		t.Fatalf("only %d events in 30 s:\n%s", len(a.Events), a)
	}
}

// TestClientCutHoldsTheWorkloadOnly: a client-cut of bj black-holes the
// connections that came through bj's client proxy (the workload's), not
// those of a site's link to bj, and not the clients' way to gz.
func TestClientCutHoldsTheWorkloadOnly(t *testing.T) {
	target := echoServer(t)
	ls := NewLinks(func() map[int]string { return map[int]string{os.Getpid(): "hf"} })
	defer ls.Close()
	siteAddr, err := ls.Listen("bj", "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	bjClients, err := ls.ListenClients("bj", "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	gzClients, err := ls.ListenClients("gz", "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	site, toBJ, toGZ := dial(siteAddr), dial(bjClients), dial(gzClients)
	for _, c := range []net.Conn{site, toBJ, toGZ} {
		if !roundTrip(c, 5*time.Second) {
			t.Fatal("no echo before the cut")
		}
	}
	ls.Cut(Clients, "bj", true)
	if roundTrip(toBJ, 300*time.Millisecond) {
		t.Fatal("the workload's bytes crossed the client-cut to bj")
	}
	if roundTrip(dial(bjClients), 300*time.Millisecond) {
		t.Fatal("a new workload connection crossed the client-cut to bj")
	}
	if !roundTrip(site, 5*time.Second) {
		t.Fatal("a client-cut of bj held hf's link to bj")
	}
	if !roundTrip(toGZ, 5*time.Second) {
		t.Fatal("a client-cut of bj held the clients' connection to gz")
	}
	ls.Cut(Clients, "bj", false)
	toBJ.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(toBJ, make([]byte, 1)); err != nil {
		t.Fatalf("the held byte did not come back after the heal: %v", err)
	}
}

// TestAllDrawsWhatItDrew: "all" still draws the schedule it drew when
// seeds were recorded with it (SOAK.md, testdata/regressions-long.txt),
// whatever kinds are added on their own.
func TestAllDrawsWhatItDrew(t *testing.T) {
	kinds, err := ParseKinds("all")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchedule(1635651954, 30*time.Second, kinds)
	var got []string
	for _, e := range s.Events[:6] {
		got = append(got, e.String())
	}
	want := []string{
		"   0.928s #1 flip gz",
		"   1.827s #2 lossy hf gz 137‰",
		"   2.472s #2 heal lossy hf gz",
		"   3.040s #3 pause hf",
		"   4.064s #4 cut gz bj",
		"   5.546s #5 lossy gz bj 64‰",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("seed 1635651954 with all draws\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
