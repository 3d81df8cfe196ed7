package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"metaq/broker/wire"
)

// TestHoldExtendedWhileTheHandoverProgresses: a held put whose new master
// answers "not master yet" (403: its promotion is still finishing, say a
// slow registration in ZooKeeper) waits beyond MaxWait, since each answer
// shows the handover progressing, and is acknowledged once the new master
// takes it. Before, it was answered 503, not stored, once MaxWait passed
// from its arrival. A put held with no new master known yet waits beyond
// MaxWait too while Progress is called.
func TestHoldExtendedWhileTheHandoverProgresses(t *testing.T) {
	old, h := holdOldMaster(t, HoldOptions{MaxWait: time.Second, MaxHold: time.Minute})
	nu := startBroker(t, vectorConfig(t), nil)
	nu.RefuseWrites("slave", Refusal{Reason: "this broker is a slave"})
	cl := dial(t, old.Addr())

	// No new master known: Progress keeps the put held.
	cl.sendCmd(putCmd("test", 0, "held while the handover progresses", 1))
	for range 20 {
		h.Progress()
		cl.expectSilence(100 * time.Millisecond)
	}
	// The new master refuses for a while: its answers are progress.
	h.Forward(func(context.Context) (string, error) { return nu.Addr().String(), nil })
	cl.expectSilence(2 * time.Second)
	nu.AllowWrites("slave")
	if r := cl.result(); r.Opaque != 1 || r.Code != wire.StatusOK {
		t.Fatalf("held put after the new master took puts: %s", r)
	}
	if st := h.Stats(); st.Forwarded != 1 || st.Expired != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHoldHardLimit: however the handover progresses (Progress called
// throughout, and the new master answering 403), a held put is answered
// 503, not stored, once MaxHold passed since its arrival, and not before.
func TestHoldHardLimit(t *testing.T) {
	old, h := holdOldMaster(t, HoldOptions{MaxWait: 2 * time.Second, MaxHold: 3 * time.Second})
	nu := startBroker(t, vectorConfig(t), nil)
	nu.RefuseWrites("slave", Refusal{Reason: "this broker is a slave"})
	h.Forward(func(context.Context) (string, error) { return nu.Addr().String(), nil })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				h.Progress()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	cl := dial(t, old.Addr())
	start := time.Now()
	cl.sendCmd(putCmd("test", 0, "held too long", 1))
	r := cl.result()
	if r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not stored (no master took it within 3s)") {
		t.Fatalf("put held past MaxHold: %s", r)
	}
	if waited := time.Since(start); waited < 3*time.Second {
		t.Fatalf("answered after %v, before MaxHold", waited)
	}
	if partitionEnd(t, nu, "test", 0) > 0 || partitionEnd(t, old, "test", 0) > 0 {
		t.Fatal("a held put was stored")
	}
}
