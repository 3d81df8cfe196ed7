package bundle

import (
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestSteppedDownMasterDoesNotReportMaster: bj hands over to hf with its
// ZooKeeper cut, so its demotion stops its shipper and then cannot
// register as a slave; it acknowledges nothing, refuses puts as a replica
// and waits to finish the demotion. Its /status must not say master while
// hf is the master: before the fix it did until the retried demotion
// went through, and the fault schedules counted two masters after the
// heal (seed 945058: bj's ZooKeeper refused sessions for 30 s after its
// switchover to hf, and bj still said master when the checker looked).
func TestSteppedDownMasterDoesNotReportMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	bj, hf := s.site("bj"), s.site("hf")
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, bj, hf, "orders", 30*time.Second)

	s.switchoverHalfDemoted("bj", "hf")
	if r := bj.Role(); r.IsMaster() {
		t.Fatalf("bj: role %v: it handed over and should have stepped down", r)
	}
	if st := bj.Status(); st.Mode != "slave" || st.SteppedDown == "" {
		t.Fatalf("bj (stepped down, demotion not finished): status mode %q, steppedDown %q; want slave, with why", st.Mode, st.SteppedDown)
	} else {
		t.Logf("bj status: mode %s, steppedDown %q", st.Mode, st.SteppedDown)
	}
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if st := hf.Status(); st.Mode != "master" {
			return fmt.Errorf("hf: status mode %q, want master", st.Mode)
		}
		return nil
	})

	s.healZK("bj")
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if r := bj.Role(); r.Role != siterole.Slave || bj.demotedReceiver() == nil {
			return fmt.Errorf("bj: role %v, following: %v", r, bj.demotedReceiver() != nil)
		}
		return nil
	})
	if st := bj.Status(); st.Mode != "slave" || st.SteppedDown != "" {
		t.Fatalf("bj (a slave of hf now): status mode %q, steppedDown %q; want slave, none", st.Mode, st.SteppedDown)
	}
	s.produce("hf", "orders", 10)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
}
