package topology

import (
	"fmt"
	"net"
	"strings"
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
	open := func() (*memberlist.NetTransport, error) {
		return memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{conf.BindAddr}, BindPort: conf.BindPort, Logger: conf.Logger})
	}
	tries := 1
	if conf.BindPort == 0 {
		tries = autoBindTries
	}
	nt, err := openRetryingInUse(tries, open)
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

// autoBindTries is how often a transport on any port (0) is opened before
// giving up, as memberlist.Create does: the kernel picks a free TCP port,
// and the UDP port of the same number may be taken by someone else.
const autoBindTries = 10

// openRetryingInUse calls open up to tries times while it fails because
// an address is already in use. memberlist formats the listener's error
// with %v, so its text is all there is to match, as memberlist.Create does.
func openRetryingInUse(tries int, open func() (*memberlist.NetTransport, error)) (*memberlist.NetTransport, error) {
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		if nt, err = open(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return nt, err
		}
	}
	return nil, err
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
