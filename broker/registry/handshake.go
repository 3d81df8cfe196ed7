package registry

import (
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// handshakeBound is how long a new connection may take to answer the
// connect request: ZooKeeper's Java client gives up a connection attempt
// after the session timeout divided by the number of servers
// (ClientCnxn's connectTimeout), then tries the next server.
// go-zookeeper waits ten read timeouts instead (6.7 session timeouts: 27 s
// with a 4 s session) on a server that accepted the connection and does
// not answer, such as one still starting, or a proxy in front of one.
func handshakeBound(sessionTimeout time.Duration, servers int) time.Duration {
	if servers < 1 {
		servers = 1
	}
	return max(sessionTimeout/time.Duration(servers), time.Second)
}

// boundHandshake wraps dial so that every connection it opens answers the
// library's connect handshake within bound (handshakeBound).
func boundHandshake(dial zk.Dialer, bound time.Duration) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, bound: bound}, nil
	}
}

// handshakeConn caps the deadlines go-zookeeper sets for its connect
// handshake. The library sets a write deadline and a read deadline for the
// handshake, clears the read deadline after reading the answer's length
// (the body is read with none), and then, in its receive loop, sets a read
// deadline before every read. So the first write deadline and the first
// read deadline are the handshake's: each is capped at bound from when it
// is set, and the read one is kept until the receive loop sets its own, so
// the answer's body is bounded too. Later deadlines pass unchanged.
type handshakeConn struct {
	net.Conn
	bound time.Duration

	mu        sync.Mutex
	wrote     bool // the handshake's write deadline was set
	readPhase int  // 0: none set yet; 1: handshake read deadline set; 2: receive loop
}

func (c *handshakeConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	first := !c.wrote && !t.IsZero()
	if first {
		c.wrote = true
	}
	c.mu.Unlock()
	if first {
		t = capDeadline(t, c.bound)
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	phase := c.readPhase
	switch {
	case phase == 0 && !t.IsZero():
		c.readPhase = 1
	case phase == 1 && !t.IsZero():
		c.readPhase = 2
	}
	c.mu.Unlock()
	switch {
	case phase == 0 && !t.IsZero():
		return c.Conn.SetReadDeadline(capDeadline(t, c.bound))
	case phase == 1 && t.IsZero():
		return nil // keep the handshake's deadline for the answer's body
	}
	return c.Conn.SetReadDeadline(t)
}

// capDeadline returns t, or now+bound when that is sooner.
func capDeadline(t time.Time, bound time.Duration) time.Time {
	if limit := time.Now().Add(bound); t.After(limit) {
		return limit
	}
	return t
}
