package freeport

import (
	"net"
	"strconv"
	"testing"
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
