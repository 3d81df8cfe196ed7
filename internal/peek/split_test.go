package peek

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestSplitRoutesByFirstByte: connections starting with the byte reach
// Matched, the others Rest, each with its first byte still to read; one
// that sends nothing in time is closed; closing Rest closes the port and
// Matched.
func TestSplitRoutesByFirstByte(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSplit(ln, 0xA8, 300*time.Millisecond)
	send := func(p []byte) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if len(p) > 0 {
			c.Write(p)
		}
		return c
	}
	read := func(l net.Listener, n int) string {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		return string(buf)
	}
	silent := send(nil)
	send([]byte{0xA8, 'g', 'w'})
	if got := read(s.Matched(), 3); got != "\xa8gw" {
		t.Fatalf("matched read %q", got)
	}
	send([]byte("\xa7repl"))
	if got := read(s.Rest(), 5); got != "\xa7repl" {
		t.Fatalf("rest read %q", got)
	}
	silent.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection that sent nothing was not closed: %v", err)
	}

	s.Rest().Close()
	if _, err := s.Matched().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("matched Accept after close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the port still accepts after close")
	}
}
