//go:build linux

package wan

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"metaq/internal/netns"
)

// TestLinkDelaysPackets builds two sites and measures a TCP connect across
// the link: it takes at least one round trip of the configured delay, and
// the namespaces are gone after Close.
func TestLinkDelaysPackets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command")
	}
	prefix := fmt.Sprintf("mqw%d-", os.Getpid()%100000)
	n, err := Setup([]string{"a", "b"}, Options{Prefix: prefix, Delay: 25 * time.Millisecond, Rate: "10mbit"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, b := n.Sites[0], n.Sites[1]
	var ln net.Listener
	if err := netns.Do(b.NS, func() (err error) {
		ln, err = net.Listen("tcp", b.Addr+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var rtt time.Duration
	if err := netns.Do(a.NS, func() error {
		start := time.Now()
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		rtt = time.Since(start)
		return c.Close()
	}); err != nil {
		t.Fatal(err)
	}
	if rtt < 50*time.Millisecond {
		t.Errorf("connect across a 25 ms one-way link took %v, want at least 50 ms", rtt)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, s := range []Site{a, b} {
		if containsField(string(out), s.NS) {
			t.Errorf("namespace %s left after Close", s.NS)
		}
	}
}

func containsField(list, name string) bool {
	for _, f := range strings.Fields(list) {
		if f == name {
			return true
		}
	}
	return false
}

// TestBlockCutsOnePort: with one port of site b blocked, a connection to it
// from a does not complete, while another port of b still answers; once
// unblocked it connects again.
func TestBlockCutsOnePort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command")
	}
	prefix := fmt.Sprintf("mqb%d-", os.Getpid()%100000)
	n, err := Setup([]string{"a", "b"}, Options{Prefix: prefix, Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, b := n.Sites[0], n.Sites[1]
	var cut, open net.Listener
	if err := netns.Do(b.NS, func() (err error) {
		if cut, err = net.Listen("tcp", b.Addr+":0"); err != nil {
			return err
		}
		open, err = net.Listen("tcp", b.Addr+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	defer open.Close()
	dial := func(ln net.Listener) error {
		return netns.Do(a.NS, func() error {
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 500*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := n.Block("b", cut.Addr().(*net.TCPAddr).Port, true); err != nil {
		t.Fatal(err)
	}
	if err := dial(cut); err == nil {
		t.Error("connected to a blocked port")
	}
	if err := dial(open); err != nil {
		t.Errorf("another port of the same site: %v", err)
	}
	if err := n.Block("b", cut.Addr().(*net.TCPAddr).Port, false); err != nil {
		t.Fatal(err)
	}
	if err := dial(cut); err != nil {
		t.Errorf("after unblocking: %v", err)
	}
	if err := n.Block("c", 1, true); err == nil {
		t.Error("blocked a port of an unknown site")
	}
}
