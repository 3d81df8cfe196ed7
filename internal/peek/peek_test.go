package peek

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestFirstLeavesTheByte(t *testing.T) {
	client, server := tcpPair(t)
	go client.Write([]byte("put x\r\n"))
	b, c, err := First(server, time.Now().Add(5*time.Second))
	if err != nil || b != 'p' {
		t.Fatalf("First = %q, %v", b, err)
	}
	if c != server {
		t.Fatalf("a TCP connection came back wrapped: %T", c)
	}
	got := make([]byte, 7)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "put x\r\n" {
		t.Fatalf("read after peek %q, %v", got, err)
	}
	// The deadline is cleared: a later read waits past it.
	server.SetReadDeadline(time.Time{})
}

func TestFirstDeadline(t *testing.T) {
	_, server := tcpPair(t)
	start := time.Now()
	_, _, err := First(server, time.Now().Add(100*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent peer: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestFirstEOF(t *testing.T) {
	client, server := tcpPair(t)
	client.Close()
	if _, _, err := First(server, time.Now().Add(5*time.Second)); !errors.Is(err, io.EOF) {
		t.Fatalf("closed peer: %v, want EOF", err)
	}
}

// wrapped hides the TCP connection behind NetConn, as tls.Conn does.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestFirstThroughNetConn(t *testing.T) {
	client, server := tcpPair(t)
	go client.Write([]byte{0xA7, 1})
	w := wrapped{server}
	b, c, err := First(w, time.Now().Add(5*time.Second))
	if err != nil || b != 0xA7 || c != net.Conn(w) {
		t.Fatalf("First = %x, %T, %v", b, c, err)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(c, got); err != nil || got[0] != 0xA7 || got[1] != 1 {
		t.Fatalf("read %x, %v", got, err)
	}
}

func TestFirstPipeReplays(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go a.Write([]byte{0x16, 3, 1})
	first, c, err := First(b, time.Now().Add(5*time.Second))
	if err != nil || first != 0x16 {
		t.Fatalf("First = %x, %v", first, err)
	}
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || got[0] != 0x16 || got[2] != 1 {
		t.Fatalf("read %x, %v", got, err)
	}
}
