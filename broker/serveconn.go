package broker

import (
	"net"
)

// ServeConn serves the MetaQ protocol on nc, a connection another protocol
// of the port handed over after its own handshake (a slave site's gateway
// link, see ListenFirstBytes), as on a client connection accepted here,
// and returns once it is closed. nc counts against the connection limits
// as its handoff listener's connections do (it is not admitted again).
// Gets are copied, not sent with sendfile: nc is not a bare socket. A
// sync on nc is a put that keeps the id it carries (a slave site's outbox
// entry, broker/storeforward.go), checked and stored as any client's put.
func (b *Broker) ServeConn(nc net.Conn) error {
	ip := remoteIP(nc)
	b.mu.Lock()
	if b.closing.Load() {
		b.mu.Unlock()
		nc.Close()
		return ErrClosed
	}
	// The broker's byte budget, not an address's share: one gateway
	// link carries a whole site's producers.
	c := b.newConn(nc, ip, b.mem, b.opts.MaxInFlight*gatewayLinkInFlightFactor)
	c.gatewayPeer = true
	b.conns[c] = struct{}{}
	b.connWG.Add(1)
	b.stats.connections.Add(1)
	b.mu.Unlock()
	defer b.connWG.Done()
	c.serve()
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	b.stats.connections.Add(-1)
	return nil
}
