//go:build unix

package peek

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

func firstByte(c net.Conn) (byte, error) {
	s, ok := socket(c)
	if !ok {
		return 0, ErrUnsupported
	}
	sc, ok := s.(syscall.Conn)
	if !ok {
		return 0, ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peek: %w", err)
	}
	var buf [1]byte
	var n int
	var rerr error
	// rc.Read waits for readability through the runtime's poller, which
	// honours the read deadline; the callback returns false to wait again.
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
		return !(errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EINTR))
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, fmt.Errorf("peek: %w", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return buf[0], nil
}
