package broker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"metaq/broker/wire"
	"metaq/internal/peek"
)

// Other protocols on the MetaQ port. A connection's first byte tells a
// MetaQ client (every request line starts with a byte wire.CanStartRequest
// accepts) from a protocol that registered bytes no request can start with
// (ListenFirstBytes): the replication stream's frame magic, a TLS
// ClientHello. The byte is peeked, not read, so each protocol reads its
// stream from the start on the socket itself. A connection is admitted by
// the connection limits before its first byte is awaited, waits for it at
// most SniffTimeout, and stays counted by the limits until it is closed,
// whichever protocol serves it.

// ErrFirstByteTaken is returned by ListenFirstBytes for a byte another
// listener holds.
var ErrFirstByteTaken = errors.New("broker: first byte already served by another listener")

// ListenFirstBytes returns a listener whose Accept yields the connections
// of the broker's port whose first byte is one of first. Each byte must be
// one no MetaQ request starts with. The broker must be listening (Listen
// or Start). Closing the listener gives the bytes back: later connections
// starting with them are closed at once, as MetaQ closes a connection whose
// request it cannot decode (answering nothing). The connections it yields count against the connection
// limits until closed; they do not use the broker's byte budget.
func (b *Broker) ListenFirstBytes(first ...byte) (net.Listener, error) {
	if len(first) == 0 {
		return nil, errors.New("broker: ListenFirstBytes needs at least one byte")
	}
	for _, c := range first {
		if wire.CanStartRequest(c) {
			return nil, fmt.Errorf("broker: a MetaQ request may start with %#x", c)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing.Load() {
		return nil, ErrClosed
	}
	if b.ln == nil {
		return nil, errors.New("broker: ListenFirstBytes before Listen")
	}
	for _, c := range first {
		if b.handoffs[c] != nil {
			return nil, fmt.Errorf("%w: %#x", ErrFirstByteTaken, c)
		}
	}
	l := &handoffListener{b: b, first: append([]byte(nil), first...), addr: b.ln.Addr(),
		conns: make(chan net.Conn), done: make(chan struct{})}
	if b.handoffs == nil {
		b.handoffs = map[byte]*handoffListener{}
	}
	for _, c := range first {
		b.handoffs[c] = l
	}
	return l, nil
}

// handoffListener is what ListenFirstBytes returns.
type handoffListener struct {
	b     *Broker
	first []byte
	addr  net.Addr
	conns chan net.Conn // unbuffered: a connection is handed to an Accept or closed
	done  chan struct{}
	once  sync.Once
}

// Accept waits for the next connection starting with one of the bytes.
func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.b.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close gives the bytes back to the MetaQ protocol; connections already
// accepted stay open.
func (l *handoffListener) Close() error {
	l.once.Do(func() {
		l.b.mu.Lock()
		for _, c := range l.first {
			if l.b.handoffs[c] == l {
				delete(l.b.handoffs, c)
			}
		}
		l.b.mu.Unlock()
		close(l.done)
	})
	return nil
}

// Addr is the broker's listening address.
func (l *handoffListener) Addr() net.Addr { return l.addr }

// deliver hands c to an Accept, or closes it when the listener or the
// broker closes first.
func (l *handoffListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	case <-l.b.ctx.Done():
		c.Close()
	}
}

// handedConn is a connection served by another protocol: closing it gives
// its place in the connection limits back.
type handedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *handedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn returns the socket, for socket options and TLS.
func (c *handedConn) NetConn() net.Conn { return c.Conn }

// route waits for the first byte of an admitted connection and serves it:
// as a MetaQ connection, or through the listener that claimed the byte.
func (b *Broker) route(nc net.Conn, ip netip.Addr, addrBytes *byteBudget) {
	// Only a bare socket is sniffed: the connections of a listener of
	// another kind (Options.Listener with TLS, say) are all MetaQ's, and
	// their first bytes belong to that listener's protocol.
	var first byte
	pc, err := nc, error(nil)
	_, sniffed := nc.(*net.TCPConn)
	if sniffed {
		first, pc, err = peek.First(nc, time.Now().Add(b.opts.SniffTimeout))
	}
	b.mu.Lock()
	delete(b.sniffing, nc)
	closing := b.closing.Load()
	var h *handoffListener
	var c *conn
	// A first byte no request starts with, and no listener claims: MetaQ
	// would close the connection at the end of that line, answering
	// nothing; close it now (a slave or TLS client that reached a broker
	// serving no replication learns it at once).
	stray := sniffed && err == nil && !closing && !wire.CanStartRequest(first) && b.handoffs[first] == nil
	if err == nil && !closing && !stray {
		if sniffed {
			h = b.handoffs[first]
		}
		if h == nil {
			c = b.newConn(pc, ip, addrBytes, b.opts.MaxInFlight)
			b.conns[c] = struct{}{}
			b.connWG.Add(1)
			b.stats.connections.Add(1)
		}
	}
	b.mu.Unlock()
	switch {
	case c != nil:
		defer b.connWG.Done()
		c.serve()
		b.mu.Lock()
		delete(b.conns, c)
		b.mu.Unlock()
		b.limits.done(c.ip)
		b.stats.connections.Add(-1)
	case h != nil:
		h.deliver(&handedConn{Conn: pc, release: func() { b.limits.done(ip) }})
	default:
		nc.Close()
		b.limits.done(ip)
		if stray {
			b.stats.protocolErrors.Add(1)
			b.log.Debug("CONN: first byte starts no MetaQ request and no other protocol here claims it, closing connection",
				"remote", nc.RemoteAddr().String(), "first", fmt.Sprintf("%#x", first))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !closing {
			n := b.stats.connClosedIdle.Add(1)
			b.limitLog.idle.Do(func() {
				b.log.Info("BROKER: closing connections that sent nothing", "remote", nc.RemoteAddr().String(),
					"timeout", b.opts.SniffTimeout, "key", "[limits] idleTimeoutMs", "closed_so_far", n)
			})
		}
	}
}
