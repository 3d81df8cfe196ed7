package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestResyncGivesUpOnSlaveNodeHeld: a slave whose session expired finds,
// in its new session, its node ids/0/slave1 held by another live session
// (another broker took slaveId 1 meanwhile). The re-registration gives up
// with the reason in Registration().Problem, and the new session's
// callbacks run (before, resyncLoop retried for ever, waiting out the
// other session's timeout each time, and OnNewSession owners never got
// their watches back).
func TestResyncGivesUpOnSlaveNodeHeld(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	tap := &zktest.Tap{}
	opts := testOptions(t, root)
	opts.SessionTimeout = 2 * time.Second
	opts.Slave, opts.SlaveID = true, 1
	opts.Dialer = tap.Dial
	a := newRegistry(t, opts)
	if err := a.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	newSession := make(chan struct{}, 1)
	a.OnNewSession(func() { newSession <- struct{}{} })

	// a's session expires while it is cut off, and b takes slaveId 1.
	session, passwd := tap.Credentials()
	tap.Block()
	if err := zktest.ExpireSession(opts.Connect, session, passwd); err != nil {
		t.Fatal(err)
	}
	other := testOptions(t, root)
	other.SessionTimeout = 2 * time.Second
	other.Slave, other.SlaveID, other.Port = true, 1, 8124
	b := newRegistry(t, other)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		return b.RegisterBroker(ctx)
	})
	tap.Unblock()

	select {
	case <-newSession:
	case <-time.After(30 * time.Second):
		t.Fatalf("the new session's callbacks did not run: the re-registration is still retrying (problem %q)", a.Registration().Problem)
	}
	p := a.Registration().Problem
	if !strings.Contains(p, "slave 1 is not registered") || !strings.Contains(p, "belongs to live session") {
		t.Fatalf("Registration().Problem = %q, want the held slave node named", p)
	}
	t.Logf("problem: %s", p)
	_, st, err := b.Get(ctx, root+"/brokers/ids/0/slave1")
	if err != nil || st.EphemeralOwner != b.SessionID() {
		t.Fatalf("ids/0/slave1 owned by 0x%x (%v), want the other broker's 0x%x", st.EphemeralOwner, err, b.SessionID())
	}
	// Once the other broker is gone, a role change writes the node again
	// and the problem is cleared.
	if err := b.UnregisterAll(ctx); err != nil && !errors.Is(err, ErrNoNode) {
		t.Fatal(err)
	}
	if err := a.BecomeSlave(ctx, 2); err != nil {
		t.Fatalf("BecomeSlave(2): %v", err)
	}
	if p := a.Registration().Problem; p != "" {
		t.Fatalf("Registration().Problem = %q after the node was written again", p)
	}
}
