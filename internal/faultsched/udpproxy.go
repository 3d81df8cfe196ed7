package faultsched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// ListenUDP starts a datagram relay on listen for target, the owner's
// gossip socket (memberlist's UDP; its TCP goes through Listen on the same
// port). siteOf names the site a datagram came from by its source port
// (memberlist sends from its bound port), "" for any other sender. Each
// sender gets a socket of its own towards the target, so that an answer
// sent back to a datagram's source returns to that sender. A cut pair's
// datagrams are dropped (a black hole holds nothing for a datagram
// protocol), a slow pair's delayed, a lossy pair's dropped with its
// fraction: what a WAN does to UDP.
func (ls *Links) ListenUDP(owner, listen, target string, siteOf func(port int) string) error {
	la, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return fmt.Errorf("faultsched: gossip relay for %s on %s: %w", owner, listen, err)
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return fmt.Errorf("faultsched: gossip relay for %s to %s: %w", owner, target, err)
	}
	pc, err := net.ListenUDP("udp", la)
	if err != nil {
		return fmt.Errorf("faultsched: gossip relay for %s on %s: %w", owner, listen, err)
	}
	r := &udpRelay{ls: ls, owner: owner, pc: pc, target: ta, siteOf: siteOf, up: map[string]*net.UDPConn{}, done: make(chan struct{})}
	ls.mu.Lock()
	ls.closers = append(ls.closers, r.close)
	ls.mu.Unlock()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		r.readLoop()
	}()
	return nil
}

type udpRelay struct {
	ls     *Links
	owner  string
	pc     *net.UDPConn // the relay's address: what the owner advertises
	target *net.UDPAddr
	siteOf func(port int) string

	mu     sync.Mutex
	up     map[string]*net.UDPConn // sender's address -> its socket towards the target
	done   chan struct{}
	closed bool
}

func (r *udpRelay) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
	}
	ups := r.up
	r.up = map[string]*net.UDPConn{}
	r.mu.Unlock()
	r.pc.Close()
	for _, c := range ups {
		c.Close()
	}
}

// readLoop relays datagrams from senders to the target.
func (r *udpRelay) readLoop() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.pc.ReadFromUDP(buf)
		if err != nil {
			return
		}
		up, err := r.upFor(from)
		if err != nil {
			continue
		}
		pair := pairOf(r.siteOf(from.Port), r.owner)
		r.send(pair, append([]byte(nil), buf[:n]...), func(b []byte) { up.Write(b) })
	}
}

// upFor returns the sender's socket towards the target, opening it (and
// the goroutine that relays the target's answers back) the first time.
func (r *udpRelay) upFor(from *net.UDPAddr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("faultsched: relay closed")
	}
	if c, ok := r.up[from.String()]; ok {
		return c, nil
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	r.up[from.String()] = c
	back := *from
	r.ls.wg.Add(1)
	go func() {
		defer r.ls.wg.Done()
		pair := pairOf(r.siteOf(back.Port), r.owner)
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // an ICMP refusal while the owner is down
			}
			r.send(pair, append([]byte(nil), buf[:n]...), func(b []byte) { r.pc.WriteToUDP(b, &back) })
		}
	}()
	return c, nil
}

// send passes one datagram on under the pair's faults.
func (r *udpRelay) send(pair [2]string, b []byte, write func([]byte)) {
	cut, slow, lossy, _, closed := r.ls.state(pair)
	if cut || closed || (lossy > 0 && rand.Float64() < lossy) {
		return
	}
	if slow <= 0 {
		write(b)
		return
	}
	time.AfterFunc(slow, func() {
		select {
		case <-r.done:
		default:
			write(b)
		}
	})
}
