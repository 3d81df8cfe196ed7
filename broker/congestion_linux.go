package broker

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// congestionFallback is what setCongestion sets when the host does not let
// this process use the algorithm asked for: a process without CAP_NET_ADMIN
// may only pick those in net.ipv4.tcp_allowed_congestion_control, and the
// kernel always allows reno there. Reno, not the host's default, because
// the point of the setting is to leave BBR's per-segment pacing off.
const congestionFallback = "reno"

// setCongestion sets the TCP congestion control of a TCP listener: the
// connections it accepts from then on start with it. It returns the
// algorithm set: algo, or congestionFallback when algo is not permitted to
// this process (EPERM).
func setCongestion(ln net.Listener, algo string) (string, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return "", fmt.Errorf("listener %T is not a socket", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return "", fmt.Errorf("listener socket: %w", err)
	}
	set := func(a string) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, a)
		}); err != nil {
			return fmt.Errorf("listener socket: %w", err)
		}
		if serr != nil {
			return fmt.Errorf("set TCP_CONGESTION %q: %w", a, serr)
		}
		return nil
	}
	err = set(algo)
	if errors.Is(err, unix.EPERM) && algo != congestionFallback {
		if ferr := set(congestionFallback); ferr != nil {
			return "", fmt.Errorf("%w (not in net.ipv4.tcp_allowed_congestion_control?); then %w", err, ferr)
		}
		return congestionFallback, nil
	}
	if err != nil {
		return "", err
	}
	return algo, nil
}
