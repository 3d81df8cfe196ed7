package registry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestSessionMayBeAliveThroughADisconnect: a registry cut off from
// ZooKeeper still says its session may be alive (a disconnect is no
// session loss) until the session timeout has passed since it lost the
// connection; an expiry ZooKeeper reports on reconnection ends it at once,
// and the new session is alive again. Close ends it too.
func TestSessionMayBeAliveThroughADisconnect(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	tap := &zktest.Tap{}
	opts := testOptions(t, root)
	opts.SessionTimeout = 4 * time.Second
	opts.Dialer = tap.Dial
	r := newRegistry(t, opts)
	if !r.Connected() || !r.SessionMayBeAlive() {
		t.Fatalf("a new registry: connected %t, session may be alive %t", r.Connected(), r.SessionMayBeAlive())
	}
	old := r.SessionID()

	tap.Block()
	cut := time.Now()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if r.Connected() {
			return fmt.Errorf("still connected")
		}
		return nil
	})
	if alive := r.SessionMayBeAlive(); !alive && time.Since(cut) < opts.SessionTimeout {
		t.Fatalf("disconnected for %v of a %v session: session may be alive = false", time.Since(cut), opts.SessionTimeout)
	}
	testutil.Eventually(t, opts.SessionTimeout+10*time.Second, 20*time.Millisecond, func() error {
		if r.SessionMayBeAlive() {
			return fmt.Errorf("disconnected for %v of a %v session: the session may still be alive", time.Since(cut), opts.SessionTimeout)
		}
		return nil
	})
	if since := time.Since(cut); since < opts.SessionTimeout {
		t.Fatalf("the session was given up %v after the disconnect, before its timeout %v", since, opts.SessionTimeout)
	}

	// ZooKeeper expires it (its own expiry runs a tick or so late: made
	// sure of here, unless it already has), the reconnection says so, and a
	// new session follows.
	session, passwd := tap.Credentials()
	if err := zktest.ExpireSession(opts.Connect, session, passwd); err != nil && !errors.Is(err, zktest.ErrSessionGone) {
		t.Fatal(err)
	}
	tap.Unblock()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !r.Connected() || r.SessionID() == old || !r.SessionMayBeAlive() {
			return fmt.Errorf("no new session yet (connected %t, session 0x%x, was 0x%x)", r.Connected(), r.SessionID(), old)
		}
		return nil
	})

	r.Close()
	if r.SessionMayBeAlive() {
		t.Fatal("a closed registry's session may be alive")
	}
}
