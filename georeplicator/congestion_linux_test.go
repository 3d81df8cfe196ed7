package georeplicator

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSetCongestion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get := func() string {
		raw, _ := c.(*net.TCPConn).SyscallConn()
		var v string
		raw.Control(func(fd uintptr) { v, _ = unix.GetsockoptString(int(fd), syscall.IPPROTO_TCP, unix.TCP_CONGESTION) })
		return v
	}
	for _, algo := range []string{"reno", "bbr"} {
		if err := setCongestion(c, algo); err != nil {
			t.Skipf("kernel lacks %s: %v", algo, err)
		}
		if got := get(); got != algo {
			t.Fatalf("congestion control %q, want %q", got, algo)
		}
	}
	if err := setCongestion(c, "no-such-algorithm"); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}
