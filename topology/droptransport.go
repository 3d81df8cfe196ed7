package topology

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// dropTransport is memberlist's own network transport with Options.DropTo
// asked before everything it sends: a packet to an address DropTo names
// is lost, a connection to one refused.
type dropTransport struct {
	*memberlist.NetTransport
	drop func(addr string) bool
}

// newDropTransport opens memberlist's network transport on conf's bind
// address, as memberlist.Create would, and sets conf's ports to the one
// it bound when conf asked for any (0).
func newDropTransport(conf *memberlist.Config, drop func(string) bool) (*dropTransport, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{conf.BindAddr}, BindPort: conf.BindPort, Logger: conf.Logger})
	if err != nil {
		return nil, fmt.Errorf("gossip transport: %w", err)
	}
	if conf.BindPort == 0 {
		conf.BindPort = nt.GetAutoBindPort()
		if conf.AdvertisePort == 0 {
			conf.AdvertisePort = conf.BindPort
		}
	}
	return &dropTransport{NetTransport: nt, drop: drop}, nil
}

// errDropped: a connection DropTo refused.
type errDropped struct{ addr string }

func (e errDropped) Error() string { return "gossip to " + e.addr + " is cut (DropTo)" }

func (d *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if d.drop(addr) {
		return time.Now(), nil // lost on the way
	}
	return d.NetTransport.WriteTo(b, addr)
}

func (d *dropTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.drop(addr) {
		return nil, errDropped{addr}
	}
	return d.NetTransport.DialTimeout(addr, timeout)
}

// WriteToAddress and DialAddressTimeout are what memberlist calls on a
// transport that has them (NetTransport does).
func (d *dropTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if d.drop(a.Addr) {
		return time.Now(), nil
	}
	return d.NetTransport.WriteToAddress(b, a)
}

func (d *dropTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if d.drop(a.Addr) {
		return nil, errDropped{a.Addr}
	}
	return d.NetTransport.DialAddressTimeout(a, timeout)
}
