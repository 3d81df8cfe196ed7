package georeplicator

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
)

// GatewayLinks is a master's register of the named gateway links it
// serves (version 2 hellos, see gatewaylink.go): per name, the highest
// epoch admitted and the link that carries it. A newer link supersedes
// the older one; an older or equal epoch is refused. The zero value is
// ready; its methods are safe for concurrent use.
type GatewayLinks struct {
	mu     sync.Mutex
	byName map[string]*gatewayLink
}

// gatewayLink is one admitted named link.
type gatewayLink struct {
	epoch      uint64
	conn       *gatewayConn  // set once its handshake is done; under GatewayLinks.mu
	superseded bool          // under GatewayLinks.mu
	prev       *gatewayLink  // the link it superseded, until that one is released
	released   chan struct{} // closed by its release
	once       sync.Once
}

func (l *gatewayLink) release() { l.once.Do(func() { close(l.released) }) }

// Accept runs GatewayAccept's handshake on nc. A link that names its
// gateway is refused when its epoch is not above the highest admitted
// for that name; otherwise it becomes the name's link, the previous one
// is superseded (read no further), and Accept returns once the previous
// one was released, so that nothing read from it is applied after the
// new link's first request. The caller serves the link and then calls
// release (also for an anonymous link, where it does nothing).
func (ls *GatewayLinks) Accept(nc net.Conn, secrets [][]byte, tc *tls.Config) (net.Conn, func(), error) {
	var mine *gatewayLink
	admit := func(id GatewayIdentity) error {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		prev := ls.byName[id.Name]
		if prev != nil && id.Epoch <= prev.epoch {
			return fmt.Errorf("%s%d (gateway %q, this link's epoch %d: an older link)", gatewayStaleMark, prev.epoch, id.Name, id.Epoch)
		}
		if ls.byName == nil {
			ls.byName = map[string]*gatewayLink{}
		}
		mine = &gatewayLink{epoch: id.Epoch, prev: prev, released: make(chan struct{})}
		ls.byName[id.Name] = mine
		if prev != nil {
			prev.superseded = true
			if prev.conn != nil {
				prev.conn.supersede()
			}
		}
		return nil
	}
	c, err := gatewayAccept(nc, secrets, tc, admit)
	if mine == nil {
		if err != nil {
			return nil, nil, err
		}
		return c, func() {}, nil
	}
	if err != nil {
		// Admitted, then the handshake failed: it served nothing.
		ls.mu.Lock()
		mine.prev = nil
		ls.mu.Unlock()
		mine.release()
		return nil, nil, err
	}
	ls.mu.Lock()
	mine.conn = c
	if mine.superseded {
		c.supersede() // a newer link came during the handshake
	}
	prev := mine.prev
	mine.prev = nil
	ls.mu.Unlock()
	if prev != nil {
		<-prev.released
	}
	return c, mine.release, nil
}

// GatewayLinkName says which gateway a link accepted by GatewayAccept or
// GatewayLinks.Accept belongs to and its epoch; false for an anonymous
// (version 1) link or another connection.
func GatewayLinkName(c net.Conn) (GatewayIdentity, bool) {
	gc, ok := c.(*gatewayConn)
	if !ok || gc.id.Name == "" {
		return GatewayIdentity{}, false
	}
	return gc.id, true
}
