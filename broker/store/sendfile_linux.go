package store

import (
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// sendSections sends head and then the sections to w with sendfile(2)
// when w is a TCP socket (a syscall.Conn whose descriptor accepts it),
// head in the same packet as the first section; ok is false when it
// is not, and nothing was sent. The socket's write deadline applies: the
// runtime's poller waits for it to be writable and gives up at the
// deadline. A section the file cannot fill (it ended before) stops the
// send with io.ErrUnexpectedEOF after a correct prefix.
func sendSections(w io.Writer, head []byte, secs []section, progress func()) (sent int64, ok bool, err error) {
	sc, isConn := w.(syscall.Conn)
	if !isConn || !sendfileWriter(w) {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	if len(secs) > 1 {
		// Several sections: let the kernel fill whole packets across
		// them instead of sending one (and waking the reader) per section.
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) })
		defer rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 0) })
	}
	if len(head) > 0 {
		// The head waits in the socket (MSG_MORE) for the first section,
		// which pushes both out together.
		flags := unix.MSG_NOSIGNAL
		if len(secs) > 0 {
			flags |= unix.MSG_MORE
		}
		var serr error
		werr := rc.Write(func(fd uintptr) bool {
			for len(head) > 0 {
				n, e := unix.SendmsgN(int(fd), head, nil, nil, flags)
				if n > 0 {
					head = head[n:]
					sent += int64(n)
				}
				switch {
				case e == unix.EAGAIN:
					return false
				case e == unix.EINTR:
					continue
				case e != nil:
					serr = e
					return true
				}
			}
			return true
		})
		if werr == nil {
			werr = serr
		}
		if werr != nil {
			return sent, true, fmt.Errorf("store: send answer header: %w", werr)
		}
	}
	for _, s := range secs {
		off, left := s.off, s.n
		in := int(s.f.Fd())
		var serr error
		werr := rc.Write(func(fd uintptr) bool {
			for left > 0 {
				n, e := unix.Sendfile(int(fd), in, &off, int(min(left, 1<<30)))
				if n > 0 {
					left -= int64(n)
					sent += int64(n)
					if progress != nil {
						progress()
					}
				}
				switch {
				case e == unix.EAGAIN:
					return false // wait until the socket is writable
				case e == unix.EINTR:
					continue
				case e != nil:
					serr = e
					return true
				case n == 0:
					serr = io.ErrUnexpectedEOF // the file ended before the section
					return true
				}
			}
			return true
		})
		if werr == nil {
			werr = serr
		}
		if werr != nil {
			return sent, true, fmt.Errorf("store: sendfile %s at %d: %w", s.f.Name(), off, werr)
		}
	}
	return sent, true, nil
}

// sendfileWriter reports whether w is a plain TCP socket (a TLS connection
// is not: its bytes must be encrypted in the process).
func sendfileWriter(w io.Writer) bool {
	_, ok := w.(*net.TCPConn)
	return ok
}
