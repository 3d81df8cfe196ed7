package broker

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"metaq/broker/wire"
)

// otherCongestion is a congestion control the host has that is not its
// default (reno is always built in), so a test sees whether it was set.
func otherCongestion(t *testing.T) string {
	t.Helper()
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skipf("host congestion control unknown: %v", err)
	}
	if strings.TrimSpace(string(def)) == "reno" {
		return "cubic"
	}
	return "reno"
}

func congestionOf(t *testing.T, c syscall.Conn) string {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	var gerr error
	rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION) })
	if gerr != nil {
		t.Fatalf("getsockopt TCP_CONGESTION: %v", gerr)
	}
	return got
}

// TestSetCongestionAccepted: a connection the listener accepts after
// setCongestion starts with that congestion control.
func TestSetCongestionAccepted(t *testing.T) {
	want := otherCongestion(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := setCongestion(ln, want); err != nil {
		t.Fatalf("setCongestion(%q): %v", want, err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := congestionOf(t, a.(*net.TCPConn)); got != want {
		t.Fatalf("accepted connection's congestion control %q, want %q", got, want)
	}
	if err := setCongestion(ln, "no-such-algorithm"); err == nil {
		t.Fatal("setCongestion of an unknown algorithm: no error")
	}
}

// TestBrokerListenerCongestion: the broker sets Options.TCPCongestion on
// the listener it opens, and one it cannot set leaves the broker serving.
func TestBrokerListenerCongestion(t *testing.T) {
	want := otherCongestion(t)
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.TCPCongestion = want })
	brk.mu.Lock()
	ln := brk.ln
	brk.mu.Unlock()
	if got := congestionOf(t, ln.(*net.TCPListener)); got != want {
		t.Fatalf("listener's congestion control %q, want %q", got, want)
	}
	bad := startBroker(t, vectorConfig(t), func(o *Options) { o.TCPCongestion = "no-such-algorithm" })
	c := dial(t, bad.Addr())
	c.sendCmd(&wire.Version{Opaque: 1, HasOpaque: true})
	if r := c.result(); !r.OK() {
		t.Fatalf("version: %v", r)
	}
}
