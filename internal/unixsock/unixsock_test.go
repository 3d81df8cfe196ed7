package unixsock

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListenDial: a short path and one longer than a socket address holds
// both serve; a socket a live listener holds is refused, a stale one (its
// listener gone without removing it) is replaced; Close removes the file.
func TestListenDial(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "s.sock"), filepath.Join(long, "admin.sock")} {
		l, err := Listen(path, 0o600)
		if err != nil {
			t.Fatalf("listen %d-byte path: %v", len(path), err)
		}
		go func() {
			c, err := l.Accept()
			if err == nil {
				c.Write([]byte("hello"))
				c.Close()
			}
		}()
		c, err := Dial(context.Background(), path, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d-byte path: %v", len(path), err)
		}
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != "hello" {
			t.Fatalf("read %q", got)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket file: %v %v", fi, err)
		}
		if _, err := Listen(path, 0o600); !errors.Is(err, ErrInUse) {
			t.Fatalf("second listener on a live socket: %v", err)
		}
		// A listener that goes without removing its file (a killed process).
		l.Listener.Close()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the stale file should be left: %v", err)
		}
		l2, err := Listen(path, 0o600)
		if err != nil {
			t.Fatalf("listen over a stale socket: %v", err)
		}
		l2.Close()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Close left the file: %v", err)
		}
	}
}
