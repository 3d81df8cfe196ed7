// Package peek reads the first byte a peer sends on a connection without
// taking it off the connection, so that one port can serve more than one
// protocol: whoever serves the connection next reads it from its first byte,
// and keeps the socket itself (no wrapper that would hide *net.TCPConn from
// writev, TLS or socket options).
package peek

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrUnsupported: the connection is not a socket the kernel can peek at.
var ErrUnsupported = errors.New("peek: connection cannot be peeked")

// First returns the first byte the peer sends, waiting at most until
// deadline (zero: no deadline). The byte stays on the connection: the
// returned conn, which is c unless c cannot be peeked at (then a wrapper
// that replays the byte), reads it again. A peer that closes before
// sending anything gives io.EOF; one that sends nothing before the deadline
// gives an error matching os.ErrDeadlineExceeded. The read deadline is
// cleared afterwards.
func First(c net.Conn, deadline time.Time) (byte, net.Conn, error) {
	if err := c.SetReadDeadline(deadline); err != nil {
		return 0, c, fmt.Errorf("peek: set deadline: %w", err)
	}
	defer c.SetReadDeadline(time.Time{})
	b, err := firstByte(c)
	if !errors.Is(err, ErrUnsupported) {
		return b, c, err
	}
	// Not a socket (a pipe in a test, a wrapper without NetConn): read it
	// and hand back a conn that returns it first.
	br := bufio.NewReaderSize(c, 16)
	p, err := br.Peek(1)
	if err != nil {
		return 0, c, err
	}
	return p[0], &replayConn{Conn: c, r: br}, nil
}

// socket finds the kernel socket under c, unwrapping connections that
// expose the one they wrap (tls.Conn and the like, through NetConn).
func socket(c net.Conn) (net.Conn, bool) {
	for range 8 {
		switch x := c.(type) {
		case *net.TCPConn, *net.UnixConn:
			return x, true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// replayConn reads through the buffer that holds the peeked byte.
type replayConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// NetConn returns the wrapped connection.
func (c *replayConn) NetConn() net.Conn { return c.Conn }
