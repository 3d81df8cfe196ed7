package broker

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// acceptOne accepts from l within 5 s.
func acceptOne(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection handed over within 5s")
	}
	return nil
}

// TestHandoffByFirstByte: a connection whose first byte a listener
// claimed reaches that listener with its stream whole, on the socket
// itself; MetaQ clients on the same port are served as before.
func TestHandoffByFirstByte(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	l, err := brk.ListenFirstBytes(0xA7, 0x16)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr().String() != brk.Addr().String() {
		t.Fatalf("listener addr %s, broker %s", l.Addr(), brk.Addr())
	}
	before := dial(t, brk.Addr())
	if err := before.version(); err != nil {
		t.Fatal(err)
	}
	for _, first := range []byte{0xA7, 0x16} {
		nc, err := net.Dial("tcp", brk.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		msg := []byte{first, 'h', 'e', 'l', 'l', 'o'}
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		c := acceptOne(t, l)
		if _, ok := c.(interface{ NetConn() net.Conn }).NetConn().(*net.TCPConn); !ok {
			t.Fatalf("handed-over connection does not expose its socket: %T", c)
		}
		got := make([]byte, len(msg))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
			t.Fatalf("handed-over stream %q, %v; want %q", got, err, msg)
		}
		c.Write([]byte("ok"))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(nc, got[:2]); err != nil || string(got[:2]) != "ok" {
			t.Fatalf("answer %q, %v", got[:2], err)
		}
	}
	if err := dial(t, brk.Addr()).version(); err != nil {
		t.Fatalf("MetaQ client after the handoffs: %v", err)
	}
	if err := before.version(); err != nil {
		t.Fatal(err)
	}
	if r := brk.Resources(); r.Connections != 2 {
		t.Fatalf("MetaQ connections %d, want 2 (handed-over ones are not MetaQ's)", r.Connections)
	}
}

// TestHandoffRegistration: only bytes no MetaQ request starts with can be
// claimed, once each; closing the listener gives them back to MetaQ, which
// refuses such a line as it always did.
func TestHandoffRegistration(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	for _, b := range []byte{'p', 'v', ' ', '\r', 0xC5} {
		if _, err := brk.ListenFirstBytes(b); err == nil {
			t.Fatalf("byte %#x, which a MetaQ request may start with, was claimed", b)
		}
	}
	l, err := brk.ListenFirstBytes(0xA7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := brk.ListenFirstBytes(0x16, 0xA7); !errors.Is(err, ErrFirstByteTaken) {
		t.Fatalf("second claim of 0xa7: %v", err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	// Unclaimed, such a byte is closed at once, not after a whole line (a
	// replication hello has no CRLF to wait for): MetaQ would close it too.
	cl := dial(t, brk.Addr())
	cl.send([]byte{0xA7, 'x'})
	cl.expectClosed(2 * time.Second)
	if err := dial(t, brk.Addr()).version(); err != nil {
		t.Fatal(err)
	}
	l2, err := brk.ListenFirstBytes(0xA7)
	if err != nil {
		t.Fatalf("claim after the first listener closed: %v", err)
	}
	l2.Close()
}

// TestHandoffCountsAgainstLimits: a handed-over connection holds its place
// in the connection limits until it is closed, and a connection that sends
// nothing holds it only until SniffTimeout, not for the idle timeout.
func TestHandoffCountsAgainstLimits(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.MaxConnectionsPerAddress = 2
		o.IdleTimeout = 10 * time.Minute
		o.SniffTimeout = 300 * time.Millisecond
	})
	l, err := brk.ListenFirstBytes(0xA7)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	repl := dialFrom(t, brk.Addr(), "127.0.0.1")
	repl.send([]byte{0xA7})
	handed := acceptOne(t, l)
	if err := dialFrom(t, brk.Addr(), "127.0.0.1").version(); err != nil {
		t.Fatal(err)
	}
	dialFrom(t, brk.Addr(), "127.0.0.1").expectClosed(5 * time.Second)
	if r := brk.Resources(); r.RefusedPerAddress != 1 {
		t.Fatalf("resources %+v, want the third connection refused", r)
	}
	handed.Close()
	// The place is free again; a silent client takes it, and loses it at
	// the sniff deadline.
	var silent *client
	waitResources(t, brk, "the handed-over connection's place", func(Resources) bool {
		c := dialFrom(t, brk.Addr(), "127.0.0.1")
		c.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.nc.Read(make([]byte, 1))
		if isTimeout(err) {
			silent = c
			return true
		}
		return false
	})
	start := time.Now()
	silent.expectClosed(5 * time.Second)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("silent connection closed after %v, want about the sniff timeout", d)
	}
	waitResources(t, brk, "the silent connection counted as idle", func(r Resources) bool { return r.ClosedIdle == 1 })
	if err := dialFrom(t, brk.Addr(), "127.0.0.1").version(); err != nil {
		t.Fatalf("after the silent one was dropped: %v", err)
	}
}

// TestCloseDropsSniffingConnections: Close does not wait for connections
// whose first byte has not come.
func TestCloseDropsSniffingConnections(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.SniffTimeout = time.Hour })
	silent := dial(t, brk.Addr())
	time.Sleep(50 * time.Millisecond) // let it be accepted
	done := make(chan struct{})
	go func() { brk.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for a connection that sent nothing")
	}
	silent.expectClosed(5 * time.Second)
}
