package registry

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// silentServer accepts connections and never answers them, as a ZooKeeper
// that accepted a connection while it was still starting did in a fault
// schedule (seed 941054). closed receives once per connection the client
// closed.
func silentServer(t *testing.T) (addr string, closed <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(io.Discard, c) // read the connect request, answer nothing
				ch <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// TestHandshakeWithoutAnswerIsBounded: the first connection reaches a
// server that accepts it and never answers the connect request. Before the
// fix the library waited ten read timeouts (20 s with a 3 s session) on
// it, longer than New's 18 s: New failed with no session. Now the
// handshake is given up after the session timeout and the next connection
// reaches ZooKeeper.
func TestHandshakeWithoutAnswerIsBounded(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	silent, closed := silentServer(t)
	var mu sync.Mutex
	dials := 0
	opts := testOptions(t, root)
	opts.SessionTimeout = 3 * time.Second
	opts.ConnectionTimeout = 18 * time.Second
	opts.Dialer = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		dials++
		n := dials
		mu.Unlock()
		if n == 1 {
			addr = silent
		}
		return net.DialTimeout(network, addr, timeout)
	}
	r := newRegistry(t, opts)
	if !r.Connected() {
		t.Fatal("no session after New")
	}
	select {
	case <-closed:
	default:
		t.Fatal("the registry has a session, but the connection that got no answer is still open")
	}
}

// TestHandshakeConnDeadlines: the first write and read deadlines (the
// handshake's) are capped, the clearing of the read deadline between the
// answer's length and body keeps the cap, and later deadlines pass.
func TestHandshakeConnDeadlines(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &handshakeConn{Conn: a, bound: 50 * time.Millisecond}
	far := time.Now().Add(time.Hour)
	if err := c.SetReadDeadline(far); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("handshake read: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handshake read was not bounded")
	}
	// The receive loop's own deadline (then a read that gets data) passes.
	if err := c.SetReadDeadline(far); err != nil {
		t.Fatal(err)
	}
	go b.Write([]byte{1})
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("read after the handshake with the receive loop's deadline: %v", err)
	}
}

// TestSessionRegained: the channel SessionRegained returns is closed when
// the registry has its session again after its connections were cut, and
// the next call returns a new, open one.
func TestSessionRegained(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	tap := &zktest.Tap{}
	opts := testOptions(t, root)
	opts.Dialer = tap.Dial
	r := newRegistry(t, opts)
	back := r.SessionRegained()
	tap.Block()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, _, err := r.Exists(context.Background(), root); err == nil {
			return errors.New("ZooKeeper still answers: the tap has not cut the connection yet")
		}
		return nil
	})
	select {
	case <-back:
		t.Fatal("SessionRegained's channel closed while the registry has no connection")
	default:
	}
	tap.Unblock()
	select {
	case <-back:
	case <-time.After(30 * time.Second):
		t.Fatal("SessionRegained's channel not closed after the session came back")
	}
	if !r.Connected() {
		t.Fatal("not connected after SessionRegained's channel closed")
	}
	select {
	case <-r.SessionRegained():
		t.Fatal("the next SessionRegained channel is closed already")
	default:
	}
}
