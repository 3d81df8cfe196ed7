// Package freeport picks loopback ports for servers that must be told their
// port before they bind (a gossip node's TCP and UDP pair, a broker that
// advertises its serverPort, a child process).
//
// Asking the kernel for port 0 and closing the listener again is racy: the
// kernel hands the same range (ip_local_port_range, 32768-60999 by default)
// to every outgoing connection, so a connection can take the port before the
// server binds it. Ports here come from below that range, at random, and are
// checked free for TCP and UDP.
//
// Checking is not enough when several processes pick at once (the test
// binaries of `go test ./...` run in parallel): two of them can find the
// same port free and both hand it out. So a picked port is also leased for
// leaseTTL through a file in a directory every process shares; a port whose
// lease is live is skipped by every other picker.
package freeport

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// leaseTTL is how long a picked port stays reserved for its picker: long
// enough for a test to bind what it picked, short enough that the range is
// never used up by leases.
const leaseTTL = 10 * time.Minute

// leaseDir holds one file per leased port, named by the port.
var leaseDir = filepath.Join(os.TempDir(), "metaq-freeport")

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
		if !lease(p) {
			continue
		}
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

// lease reserves port p for leaseTTL across processes, and reports false
// when another picker holds a live lease on it. When the lease directory
// cannot be used, every port is taken as unleased: the bind checks still
// apply.
func lease(p int) bool {
	if err := os.MkdirAll(leaseDir, 0o777); err != nil {
		return true
	}
	name := filepath.Join(leaseDir, strconv.Itoa(p))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			f.Close()
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			return true
		}
		fi, err := os.Stat(name)
		if err != nil {
			continue // removed meanwhile: try to take it again
		}
		if time.Since(fi.ModTime()) < leaseTTL {
			return false
		}
		// A stale lease: whoever removes it first may take the port.
		if os.Remove(name) != nil {
			return false
		}
	}
	return false
}

// One returns one port as Pick does.
func One() (int, error) {
	ps, err := Pick(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// Consecutive returns p such that p, p+1, ..., p+n-1 were all free (TCP and
// UDP on 127.0.0.1) when checked, and leases them as Pick does: for brokers
// laid out on adjacent ports, as MetaQ's own tests run them.
func Consecutive(n int) (int, error) { return ConsecutiveIn(n, low, high) }

// ConsecutiveIn is Consecutive within lo..hi: a caller that needs a long
// stretch takes it from a range of its own, since the ports every test
// picks one by one leave few long stretches unleased in the common range.
func ConsecutiveIn(n, lo, hi int) (int, error) {
	// Windows are scanned from a random start over the whole range, and a
	// window holding a leased port is skipped past it.
	span := hi - lo - n + 2
	if span <= 0 {
		return 0, fmt.Errorf("freeport: %d consecutive ports do not fit between %d and %d", n, lo, hi)
	}
	start := rand.IntN(span)
	for i := 0; i < span; {
		p := lo + (start+i)%span
		if k := firstLeased(p, n); k >= 0 {
			i += k + 1
			continue
		}
		if allFree(p, n) && leaseAll(p, n) {
			return p, nil
		}
		i++
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free ports between %d and %d", n, lo, hi)
}

// firstLeased returns the index of the first of p..p+n-1 another picker
// holds a live lease on, or -1.
func firstLeased(p, n int) int {
	for i := range n {
		fi, err := os.Stat(filepath.Join(leaseDir, strconv.Itoa(p+i)))
		if err == nil && time.Since(fi.ModTime()) < leaseTTL {
			return i
		}
	}
	return -1
}

func allFree(p, n int) bool {
	var closers []func() error
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range n {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		closers = append(closers, l.Close)
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		closers = append(closers, c.Close)
	}
	return true
}

// leaseAll leases p..p+n-1, or none of them when another picker holds one.
func leaseAll(p, n int) bool {
	for i := range n {
		if !lease(p + i) {
			for j := range i {
				unlease(p + j)
			}
			return false
		}
	}
	return true
}

// unlease gives back a lease this process took a moment ago.
func unlease(p int) { os.Remove(filepath.Join(leaseDir, strconv.Itoa(p))) }
