package netproxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	return testutil.ServeTCP(t, func(c net.Conn) { io.Copy(c, c) })
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestForwardDelayRate(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetDelay(20 * time.Millisecond)
	p.SetRate(200 << 10)
	c := dial(t, p)
	msg := bytes.Repeat([]byte("x"), 100<<10)
	start := time.Now()
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if !bytes.Equal(got, msg) {
		t.Fatal("echo mismatch")
	}
	// 100 KiB each way at 200 KiB/s plus 2x20ms can not arrive faster than ~0.3 s
	// (first burst of 16 KiB is free in each direction).
	if el < 300*time.Millisecond {
		t.Fatalf("delay/rate not applied: %v", el)
	}
}

func TestFlipAndCut(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	p.FlipAfter(Upstream, 3)
	c.Write([]byte("abcdef"))
	got := make([]byte, 6)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got[:3]) != "abc" || got[3] != 'd'^0xff || string(got[4:]) != "ef" {
		t.Fatalf("flip: got %q", got)
	}
	if p.Flips() != 1 {
		t.Fatalf("flips = %d", p.Flips())
	}
	p.CutAfter(Downstream, 2)
	c.Write([]byte("wxyz"))
	got, _ = io.ReadAll(c)
	if string(got) != "wx" {
		t.Fatalf("cut: got %q", got)
	}
	c2 := dial(t, p)
	c2.Write([]byte("ok"))
	got = make([]byte, 2)
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "ok" {
		t.Fatalf("after cut: %q %v", got, err)
	}
	p.CutAll()
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c2.Read(got); err == nil {
		t.Fatal("read after CutAll succeeded")
	}
}

func TestStall(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	p.SetStall(true)
	c.Write([]byte("held"))
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 4)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %q through a stalled link", buf[:n])
	}
	p.SetStall(false)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after stall: %q %v", buf, err)
	}
}
