package georeplicator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestRedialSkipsTheBackoff: a receiver that failed to find its master
// waits out its backoff (here an hour) before the next attempt; Redial (the
// master's address changed) makes it try again at once.
func TestRedialSkipsTheBackoff(t *testing.T) {
	var attempts atomic.Int64
	res := ResolverFunc(func(context.Context) (string, error) {
		attempts.Add(1)
		return "", errors.New("no master published yet")
	})
	r, err := NewReceiver(ReceiverOptions{
		Sink: newMemStore(), Resolver: res, BrokerID: 0, SlaveID: 1,
		CheckpointFile: filepath.Join(t.TempDir(), "cp"),
		BackoffMin:     time.Hour, BackoffMax: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantAttempts := func(n int64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
			if got := attempts.Load(); got != n {
				return fmt.Errorf("%d attempts, want %d", got, n)
			}
			return nil
		})
	}
	wantAttempts(1)
	r.Redial()
	wantAttempts(2)
	r.Redial()
	wantAttempts(3)
}

// TestRedialAbandonsAnAttemptToAPausedMaster: a paused master (SIGSTOP)
// accepts connections, its kernel does, and never answers the handshake.
// A slave site dialing it when another site was promoted waited out
// DialTimeout (10 s in deploy/'s layout) before it asked for the master's
// address again, and `promote` waited that long for it to follow. Redial
// (the master's entries changed) abandons the attempt at once.
func TestRedialAbandonsAnAttemptToAPausedMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c) // kept open, never answered
			heldMu.Unlock()
			accepted.Add(1)
		}
	}()
	defer func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	var attempts atomic.Int64
	res := ResolverFunc(func(context.Context) (string, error) {
		attempts.Add(1)
		return ln.Addr().String(), nil
	})
	r, err := NewReceiver(ReceiverOptions{
		Sink: newMemStore(), Resolver: res, BrokerID: 0, SlaveID: 1,
		CheckpointFile: filepath.Join(t.TempDir(), "cp"),
		BackoffMin:     time.Hour, BackoffMax: time.Hour, DialTimeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := accepted.Load(); n != 1 {
			return fmt.Errorf("%d connections accepted by the paused master, want 1", n)
		}
		return nil
	})
	r.Redial()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := attempts.Load(); n < 2 {
			return fmt.Errorf("%d attempts after Redial, want 2: the attempt to the paused master was not abandoned (status %+v)", n, r.Status())
		}
		return nil
	})
	if st := r.Status(); !strings.Contains(st.LastError, "abandoned") {
		t.Errorf("last error %q, want the abandoned attempt", st.LastError)
	}
}
