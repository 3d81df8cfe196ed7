// Package freeport picks loopback ports for servers that must be told their
// port before they bind (a gossip node's TCP and UDP pair, a broker that
// advertises its serverPort, a child process).
//
// Asking the kernel for port 0 and closing the listener again is racy: the
// kernel hands the same range (ip_local_port_range, 32768-60999 by default)
// to every outgoing connection, so a connection can take the port before the
// server binds it. Ports here come from below that range, at random, and are
// checked free for TCP and UDP.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// The range ports are picked from: above the well-known and registered
// ports most services use, below the kernel's ephemeral range.
const (
	low  = 20000
	high = 32767
)

// Pick returns n distinct ports on 127.0.0.1 that nothing listened on (TCP
// or UDP) when they were checked.
func Pick(n int) ([]int, error) {
	var (
		held  []net.Listener
		conns []net.PacketConn
		ports []int
	)
	defer func() {
		for _, l := range held {
			l.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n+100 {
			return nil, fmt.Errorf("freeport: no free port between %d and %d after %d tries", low, high, tries)
		}
		p := low + rand.IntN(high-low+1)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			l.Close()
			continue
		}
		// Held until every port is picked, so the n are distinct.
		held, conns = append(held, l), append(conns, c)
		ports = append(ports, p)
	}
	return ports, nil
}

// One returns one port as Pick does.
func One() (int, error) {
	ps, err := Pick(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}
