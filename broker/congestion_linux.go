package broker

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestion sets the TCP congestion control of a TCP listener: the
// connections it accepts from then on start with it.
func setCongestion(ln net.Listener, algo string) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return fmt.Errorf("listener %T is not a socket", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("listener socket: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	}); err != nil {
		return fmt.Errorf("listener socket: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("set TCP_CONGESTION %q: %w", algo, serr)
	}
	return nil
}
