package georeplicator

import (
	"errors"
	"testing"
	"time"

	"metaq/internal/clock"
	"metaq/internal/testutil"
)

// TestReconnectPauseFollowsInjectedClock: the receiver's pause before a
// reconnect is measured on its Clock, not on real time. With an hour-long
// backoff it reconnects only once the fake clock is advanced past it.
func TestReconnectPauseFollowsInjectedClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	g := newRig(t, kinds()[0])
	g.rcOpts.Clock = fake
	g.rcOpts.BackoffMin, g.rcOpts.BackoffMax = time.Hour, time.Hour
	g.startMaster()
	g.startSlave()
	connected := func() error {
		if !g.rc.Status().Connected {
			return errors.New("not connected")
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, connected)
	g.proxy.CutAll()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st := g.rc.Status(); st.Connected || st.Reconnects == 0 {
			return errors.New("session not ended yet")
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		fake.Advance(time.Hour)
		return connected()
	})
}
