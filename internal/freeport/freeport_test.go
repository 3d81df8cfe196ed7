package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestPickDistinctBindableOutsideEphemeralRange(t *testing.T) {
	ports, err := Pick(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p > high {
			t.Fatalf("port %d outside %d..%d", p, low, high)
		}
		if seen[p] {
			t.Fatalf("port %d picked twice in %v", p, ports)
		}
		seen[p] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("picked port %d cannot be bound: %v", p, err)
		}
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("picked port %d cannot be bound for UDP: %v", p, err)
		}
		l.Close()
		c.Close()
	}
}

func TestPickSkipsTakenPorts(t *testing.T) {
	// Hold every port of a small window and check Pick never returns one.
	var held []net.Listener
	taken := map[int]bool{}
	for p := low; p < low+200; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		held = append(held, l)
		taken[p] = true
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for i := 0; i < 50; i++ {
		p, err := One()
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("One returned %d, which this test listens on", p)
		}
	}
}

// TestPickSkipsLeasedPorts: a port another process leased a moment ago is
// not handed out again, even though nothing listens on it yet; a stale lease
// is taken over.
func TestPickSkipsLeasedPorts(t *testing.T) {
	dir := t.TempDir()
	old := leaseDir
	leaseDir = dir
	t.Cleanup(func() { leaseDir = old })
	leased := map[int]bool{}
	for p := low; p <= high; p++ {
		if p%4 != 0 { // leave a quarter of the range unleased
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(p)), nil, 0o666); err != nil {
				t.Fatal(err)
			}
			leased[p] = true
		}
	}
	ports, err := Pick(30)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if leased[p] {
			t.Fatalf("Pick returned %d, which holds a live lease", p)
		}
		if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(p))); err != nil {
			t.Fatalf("port %d handed out without a lease: %v", p, err)
		}
	}
	// Age one lease past the TTL: it is taken over.
	stale := low + 1
	past := time.Now().Add(-2 * leaseTTL)
	if err := os.Chtimes(filepath.Join(dir, strconv.Itoa(stale)), past, past); err != nil {
		t.Fatal(err)
	}
	if !lease(stale) {
		t.Fatalf("a lease older than %v was not taken over", leaseTTL)
	}
	if lease(stale) {
		t.Fatal("a port leased just now was leased again")
	}
}

func TestConsecutive(t *testing.T) {
	p, err := Consecutive(5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
		if err != nil {
			t.Fatalf("port %d of %d..%d: %v", p+i, p, p+4, err)
		}
		l.Close()
	}
}

// TestConsecutiveFindsTheOneFreeStretch: with every port leased but one
// stretch of 60 (the fault schedules' block), Consecutive finds it; random
// tries alone failed in CI once the suite's other packages had leased
// ports all over the range.
func TestConsecutiveFindsTheOneFreeStretch(t *testing.T) {
	dir := t.TempDir()
	old := leaseDir
	leaseDir = dir
	t.Cleanup(func() { leaseDir = old })
	free := low + (high-low)/2
	for !allFree(free, 60) { // a stretch nothing on this machine holds now
		free += 60
	}
	for p := low; p <= high; p++ {
		if p >= free && p < free+60 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(p)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Consecutive(60)
	if err != nil {
		t.Fatal(err)
	}
	if p != free {
		t.Fatalf("Consecutive(60) = %d, the only free stretch starts at %d", p, free)
	}
	if _, err := Consecutive(60); err == nil {
		t.Fatal("a second stretch of 60 was found where none is left")
	}
}
