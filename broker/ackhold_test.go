package broker

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// lapsingCheck is a write check that lets a put through at the gate and
// refuses it when it is answered (lapse), for want of a confirmation of
// the generation, and, as a master confirming its generation does, starts
// a Local Hold at such a refusal (not at a stepped-down master's).
type lapsingCheck struct {
	brk     *testBroker
	maxWait atomic.Int64
	passes  atomic.Int32           // asks still let through
	refuse  atomic.Pointer[string] // the refusal after them
	hold    atomic.Pointer[Hold]
}

func (l *lapsingCheck) check() *Refusal {
	if l.passes.Add(-1) >= 0 {
		return nil
	}
	why := l.refuse.Load()
	if why == nil {
		return nil
	}
	if !l.brk.Holding() && !strings.Contains(*why, "stepped down") { // siterole.AwaitsConfirmation
		if h, err := l.brk.HoldWrites(HoldOptions{MaxWait: time.Duration(l.maxWait.Load()), Reason: "this master is confirming its generation", Local: true}); err == nil {
			l.hold.Store(h)
		}
	}
	return &Refusal{Reason: *why + "; retry", Retry: true}
}

// lapse lets the next put through the gate and refuses it, for why, when
// it is answered.
func (l *lapsingCheck) lapse(why string) {
	l.hold.Store(nil)
	l.refuse.Store(&why)
	l.passes.Store(1)
}

// waitAckHeld waits until the check's Hold keeps n answers.
func (l *lapsingCheck) waitAckHeld(t *testing.T, n int64) *Hold {
	t.Helper()
	var h *Hold
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		h = l.hold.Load()
		if h == nil || h.Stats().AckHeld < n {
			return errors.New("no answer awaits the confirmation yet")
		}
		return nil
	})
	return h
}

// TestStoredPutWaitsForTheConfirmation: a put that passed the write check
// and reached the store while the master's confirmation of its generation
// lapsed (the check refuses when it is answered) is not answered 500 at
// once: its answer waits in the Hold the refusal started, and is an
// acknowledgement once the check lets writes through again (the same
// generation confirmed); a newer generation found meanwhile (the check
// still refuses when the Hold ends) and the Hold's time bound answer it
// 500, stored here but not acknowledged.
func TestStoredPutWaitsForTheConfirmation(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	l := &lapsingCheck{brk: brk}
	l.maxWait.Store(int64(10 * time.Second))
	brk.SetWriteCheck(l.check)
	cl := dial(t, brk.Addr())
	const lapsed = "this master could not confirm its generation 3 in ZooKeeper for 1.7s"

	// Confirmed again: acknowledged, with where it is stored.
	l.lapse(lapsed)
	cl.sendCmd(putCmd("test", 0, "lapsed on its way", 1))
	h := l.waitAckHeld(t, 1)
	l.refuse.Store(nil)
	h.End()
	r := cl.result()
	if r.Opaque != 1 || r.Code != wire.StatusOK || !strings.HasSuffix(string(r.Body), " 0 0") {
		t.Fatalf("stored put after the confirmation came back: %s, want acknowledged at offset 0", r)
	}
	if st := h.Stats(); st.AckHeld != 1 || st.AckGiven != 1 || st.AckRefused != 0 {
		t.Fatalf("hold stats %+v", st)
	}

	// A newer generation: the master stepped down, the check refuses
	// when the Hold ends.
	l.lapse(lapsed)
	cl.sendCmd(putCmd("test", 0, "in the divergent tail", 2))
	h = l.waitAckHeld(t, 1)
	stepped := "this master stepped down: generation 4 took over"
	l.refuse.Store(&stepped)
	h.End()
	r = cl.result()
	if r.Opaque != 2 || r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "stored here, but not acknowledged: "+stepped) {
		t.Fatalf("stored put after a newer generation: %s", r)
	}

	// The bound passes with no confirmation: 500 then, not before.
	l.maxWait.Store(int64(300 * time.Millisecond))
	l.lapse(lapsed)
	start := time.Now()
	cl.sendCmd(putCmd("test", 1, "never confirmed", 3))
	h = l.waitAckHeld(t, 1)
	r = cl.result()
	if r.Opaque != 3 || r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "stored here, but not acknowledged: "+lapsed) {
		t.Fatalf("stored put past the bound: %s", r)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before the bound", waited)
	}
	if st := h.Stats(); st.AckRefused != 1 || st.AckGiven != 0 {
		t.Fatalf("hold stats %+v", st)
	}
	h.End()
}
