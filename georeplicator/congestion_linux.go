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
	if algo == "" {
		return nil
	}
	return tcpSockopt(c, func(fd int) error {
		return unix.SetsockoptString(fd, syscall.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	})
}

// tcpSockopt runs set on c's socket; a connection that is not TCP (a test
// pipe) is left alone.
func tcpSockopt(c net.Conn, set func(fd int) error) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = set(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// notSentLowat bounds the bytes queued in the kernel but not yet sent. The
// master writes frames as fast as the window allows; without a bound they
// pile up in the socket buffer (megabytes, seconds on a 50 Mbit/s link) and
// every keepalive, and so every RTT sample and the lag of fresh records,
// waits behind them. With it the queue stays about one frame deep while TCP
// still keeps a full congestion window in flight.
const notSentLowat = 128 << 10

func setNotSentLowat(c net.Conn) error {
	return tcpSockopt(c, func(fd int) error {
		return unix.SetsockoptInt(fd, syscall.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, notSentLowat)
	})
}
