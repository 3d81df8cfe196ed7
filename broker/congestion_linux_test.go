package broker

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
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
	if set, err := setCongestion(ln, want); err != nil || set != want {
		t.Fatalf("setCongestion(%q) = %q, %v", want, set, err)
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
	if _, err := setCongestion(ln, "no-such-algorithm"); err == nil {
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

// TestSetCongestionFallsBackWhenNotPermitted: a process without
// CAP_NET_ADMIN (the systemd unit's user) may set only the algorithms in
// net.ipv4.tcp_allowed_congestion_control; one outside it gets reno, not
// the host's default (BBR here), and setCongestion says so.
func TestSetCongestionFallsBackWhenNotPermitted(t *testing.T) {
	read := func(name string) []string {
		b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
		if err != nil {
			t.Skipf("host congestion controls unknown: %v", err)
		}
		return strings.Fields(string(b))
	}
	allowed := read("tcp_allowed_congestion_control")
	var notAllowed string
	for _, a := range read("tcp_available_congestion_control") {
		if !slices.Contains(allowed, a) {
			notAllowed = a
			break
		}
	}
	if notAllowed == "" {
		t.Skipf("every available congestion control is allowed (%v)", allowed)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		set string
		err error
	}
	done := make(chan result, 1)
	// Capabilities are per thread: drop CAP_NET_ADMIN on a locked thread
	// that is never unlocked, so the runtime ends it with the goroutine.
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- result{err: fmt.Errorf("capget: %w", err)}
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- result{err: fmt.Errorf("capset: %w", err)}
			return
		}
		set, err := setCongestion(ln, notAllowed)
		done <- result{set, err}
	}()
	r := <-done
	if r.err != nil || r.set != congestionFallback {
		t.Fatalf("setCongestion(%q) without CAP_NET_ADMIN = %q, %v; want %q", notAllowed, r.set, r.err, congestionFallback)
	}
	if got := congestionOf(t, ln.(*net.TCPListener)); got != congestionFallback {
		t.Fatalf("listener's congestion control %q, want %q", got, congestionFallback)
	}
}
