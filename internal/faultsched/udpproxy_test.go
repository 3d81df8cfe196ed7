package faultsched

import (
	"net"
	"testing"
	"time"
)

// udpEcho answers every datagram to its source until the test ends.
func udpEcho(t *testing.T) *net.UDPConn {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			pc.WriteToUDP(buf[:n], from)
		}
	}()
	return pc
}

// udpRoundTrip sends one datagram through the relay and waits up to d for
// the echo to come back from the relay's address.
func udpRoundTrip(t *testing.T, c *net.UDPConn, relay *net.UDPAddr, d time.Duration) bool {
	t.Helper()
	if _, err := c.WriteToUDP([]byte("ping"), relay); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 16)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == "ping" && from.Port == relay.Port {
			return true
		}
	}
}

// TestGossipRelayCutsItsPairOnly: the relay names the sending site by its
// source port, drops a cut pair's datagrams both ways, passes other pairs',
// and passes again after the heal; answers to a datagram's source reach the
// sender through the relay.
func TestGossipRelayCutsItsPairOnly(t *testing.T) {
	target := udpEcho(t)
	hf, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	gz, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	siteOf := func(p int) string {
		switch p {
		case hf.LocalAddr().(*net.UDPAddr).Port:
			return "hf"
		case gz.LocalAddr().(*net.UDPAddr).Port:
			return "gz"
		}
		return ""
	}
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.LocalAddr().(*net.UDPAddr)
	probe.Close()
	ls := NewLinks(func() map[int]string { return nil })
	defer ls.Close()
	if err := ls.ListenUDP("bj", addr.String(), target.LocalAddr().String(), siteOf); err != nil {
		t.Fatal(err)
	}
	if !udpRoundTrip(t, hf, addr, 2*time.Second) || !udpRoundTrip(t, gz, addr, 2*time.Second) {
		t.Fatal("no echo through the open relay")
	}
	ls.Cut("hf", "bj", true)
	if udpRoundTrip(t, hf, addr, 300*time.Millisecond) {
		t.Fatal("a datagram crossed the cut hf-bj")
	}
	if !udpRoundTrip(t, gz, addr, 2*time.Second) {
		t.Fatal("cutting hf-bj dropped gz's datagrams")
	}
	ls.Slow("gz", "bj", 150*time.Millisecond)
	start := time.Now()
	if !udpRoundTrip(t, gz, addr, 3*time.Second) {
		t.Fatal("a slow link lost the datagram")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("slow gz-bj (150 ms each way) answered in %v", took)
	}
	ls.HealAll()
	if !udpRoundTrip(t, hf, addr, 2*time.Second) {
		t.Fatal("no echo after the heal")
	}
}
