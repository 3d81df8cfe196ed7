package bundle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestStatusFollowsTheRole: after a switchover the new master's status
// reports the shipper it runs now, with its slave groups, and not the
// receiver it started with (stopped); the old master reports the receiver
// it runs now and not its stopped shipper; and a slave site started with
// masterAddress says that it follows the new master, not only why it
// started with the old one.
func TestStatusFollowsTheRole(t *testing.T) {
	t.Parallel()
	s := newSites(t, sitesSpec{})
	s.switchover("bj", "hf")
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master after the switchover: %s, want hf", m)
	}

	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		hf := s.site("hf").Status()
		if _, ok := hf.Components[compReceiver]; ok {
			return fmt.Errorf("hf (master) reports a %s component: %+v", compReceiver, hf.Components[compReceiver])
		}
		sh, ok := hf.Components[compShipper].(map[string]any)
		if !ok || sh["running"] != true {
			return fmt.Errorf("hf (master) reports no running %s: %+v", compShipper, hf.Components)
		}
		connected := 0
		for _, g := range s.site("hf").promotedShipper().Shipper().Lag() {
			if g.Connected {
				connected++
			}
		}
		if connected != 2 {
			return fmt.Errorf("%d slave sites connected to hf, want 2", connected)
		}
		return nil
	})

	bj := s.site("bj").Status()
	if _, ok := bj.Components[compShipper]; ok {
		t.Errorf("bj (now a slave) reports a %s component: %+v", compShipper, bj.Components[compShipper])
	}
	rep, ok := bj.Components[compReceiver].(SlaveReport)
	if !ok || rep.Stream == nil || !rep.Stream.Running {
		t.Errorf("bj (now a slave) reports no running %s: %+v", compReceiver, bj.Components)
	}

	hfRepl := s.site("hf").promotedShipper().Addr()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		st, err := s.site("gz").SlaveStatus()
		if err != nil {
			return err
		}
		r := st.(SlaveReport)
		if r.Stream == nil || r.Stream.MasterAddr != hfRepl {
			return fmt.Errorf("gz follows %+v, want hf's %s", r.Stream, hfRepl)
		}
		if !strings.Contains(r.MethodReason, "following "+hfRepl) {
			return fmt.Errorf("gz's reason does not say it follows hf at %s: %q", hfRepl, r.MethodReason)
		}
		return nil
	})
}
