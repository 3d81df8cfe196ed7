package georeplicator

import (
	"errors"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestReceiverStatusTellsWhenTheMasterWasLastReached: Started is set when
// the receiver starts; LinkUp stays zero while it never reached a master
// (a slave restarted while its master is gone: automatic failover then
// counts the time since Started as the master's silence), is now while
// connected, and after the link is lost stays at about when it ended.
func TestReceiverStatusTellsWhenTheMasterWasLastReached(t *testing.T) {
	g := newRig(t, kinds()[0])
	g.startMaster()
	g.proxy.SetRefuse(true)
	before := time.Now()
	g.startSlave()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st := g.rc.Status(); st.Reconnects == 0 {
			return errors.New("no attempt to reach the master yet")
		}
		return nil
	})
	st := g.rc.Status()
	if st.Started.Before(before) || st.Started.After(time.Now()) {
		t.Fatalf("Started %v, want between %v and now", st.Started, before)
	}
	if !st.LinkUp.IsZero() || st.Connected {
		t.Fatalf("LinkUp %v, connected %t before the master was ever reached, want zero and false", st.LinkUp, st.Connected)
	}

	g.proxy.SetRefuse(false)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !g.rc.Status().Connected {
			return errors.New("not connected yet")
		}
		return nil
	})
	if st := g.rc.Status(); time.Since(st.LinkUp) > time.Second {
		t.Fatalf("LinkUp %v while connected, want about now", st.LinkUp)
	}

	g.proxy.SetRefuse(true)
	g.proxy.CutAll()
	cut := time.Now()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if g.rc.Status().Connected {
			return errors.New("still connected")
		}
		return nil
	})
	st = g.rc.Status()
	if st.LinkUp.IsZero() || st.LinkUp.Before(cut.Add(-time.Second)) {
		t.Fatalf("LinkUp %v after the link was cut at %v, want about the cut", st.LinkUp, cut)
	}
	time.Sleep(50 * time.Millisecond)
	if again := g.rc.Status().LinkUp; !again.Equal(st.LinkUp) {
		t.Fatalf("LinkUp moved from %v to %v while the master cannot be reached", st.LinkUp, again)
	}
}
