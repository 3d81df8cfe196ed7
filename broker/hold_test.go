package broker

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/wire"
)

// holdOldMaster starts a broker as a master that hands over: writes off
// the put route refused, plain puts held with o.
func holdOldMaster(t *testing.T, o HoldOptions) (*testBroker, *Hold) {
	t.Helper()
	old := startBroker(t, vectorConfig(t), nil)
	old.RefuseWrites("switchover", Refusal{Reason: "handing over; retry", Retry: true})
	if o.Reason == "" {
		o.Reason = "this master is handing over"
	}
	h, err := old.HoldWrites(o)
	if err != nil {
		t.Fatal(err)
	}
	return old, h
}

// TestHoldForwardsToNewMaster: puts that reach a master while it hands
// over are held (no answer) until the new master is known, then sent
// there, retried while it still refuses (403: not master yet), and
// answered with the new master's id, partition and offset, where the
// record is; the old master stores nothing. A transaction's store is
// refused, not held.
func TestHoldForwardsToNewMaster(t *testing.T) {
	old, h := holdOldMaster(t, HoldOptions{MaxWait: 10 * time.Second})
	nu := startBroker(t, vectorConfig(t), nil)
	nu.RefuseWrites("slave", Refusal{Reason: "this broker is a slave"})
	if _, err := old.StoreValidated(context.Background(), "test", 0, nil); err == nil {
		t.Fatal("a transaction's store was not refused while puts are held")
	}

	cl := dial(t, old.Addr())
	var buf []byte
	for i := range 3 {
		buf = putCmd("test", int32(i%2), fmt.Sprintf("held-%d", i), int32(i+1)).AppendTo(buf)
	}
	cl.send(buf)
	cl.expectSilence(200 * time.Millisecond)

	h.Forward(func(context.Context) (string, error) { return nu.Addr().String(), nil })
	cl.expectSilence(200 * time.Millisecond) // the new master refuses: retried
	nu.AllowWrites("slave")
	got := map[int32]*wire.Result{}
	for range 3 {
		r := cl.result()
		got[r.Opaque] = r
	}
	for i := range 3 {
		r := got[int32(i+1)]
		if r == nil || r.Code != wire.StatusOK {
			t.Fatalf("held put %d: %v", i+1, r)
		}
		a, err := parsePutAnswer(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		data, err := nu.store.Read("test", i%2, a.Offset, 1<<10)
		if err != nil {
			t.Fatalf("put %d answered at offset %d: %v", i+1, a.Offset, err)
		}
		recs, _ := parseRecords(t, data)
		if len(recs) == 0 || recs[0].id != a.ID || string(recs[0].body) != fmt.Sprintf("held-%d", i) {
			t.Fatalf("put %d answered %q, the new master has %+v there", i+1, r.Body, recs)
		}
	}
	for p := range 2 {
		if partitionEnd(t, old, "test", p) > 0 {
			t.Fatalf("the old master stored a held put in test-%d", p)
		}
	}
	if st := h.Stats(); st.Held != 3 || st.Forwarded != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Until End, later puts go the same way.
	cl.sendCmd(putCmd("test", 0, "later", 9))
	if r := cl.result(); r.Code != wire.StatusOK {
		t.Fatalf("put after Forward: %s", r)
	}
	h.End()
	old.RefuseWrites("replica", Refusal{Reason: "this broker follows the new master"})
	cl.sendCmd(putCmd("test", 0, "after the hold", 10))
	if r := cl.result(); r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "follows the new master") {
		t.Fatalf("put after the hold ended: %s", r)
	}
}

// TestHoldBounds: a held put not sent within MaxWait, and one beyond
// MaxBytes, are answered 503 saying they were not stored; nothing is
// stored.
func TestHoldBounds(t *testing.T) {
	old, _ := holdOldMaster(t, HoldOptions{MaxWait: 300 * time.Millisecond, MaxBytes: 10})
	cl := dial(t, old.Addr())
	start := time.Now()
	cl.sendCmd(putCmd("test", 0, "0123456789", 1)) // 10 bytes: fits
	cl.expectSilence(50 * time.Millisecond)
	cl.sendCmd(putCmd("test", 0, "x", 2)) // beyond the bound
	r := cl.result()
	if r.Opaque != 2 || r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not stored (more than 10 bytes of puts held); retry") {
		t.Fatalf("put beyond MaxBytes: %s", r)
	}
	r = cl.result()
	if r.Opaque != 1 || r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "this master is handing over; the put was held and not stored (no new master to send it to within 300ms); retry") {
		t.Fatalf("put held past MaxWait: %s", r)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before MaxWait", waited)
	}
	if partitionEnd(t, old, "test", 0) > 0 {
		t.Fatal("a held put was stored")
	}
}

// TestHoldEndStoresHere: when the handover fails, the Hold ends without
// forwarding and what it held is stored here once writes pass again.
func TestHoldEndStoresHere(t *testing.T) {
	old, h := holdOldMaster(t, HoldOptions{MaxWait: 10 * time.Second})
	cl := dial(t, old.Addr())
	cl.sendCmd(putCmd("test", 1, "kept", 1))
	cl.expectSilence(100 * time.Millisecond)
	old.AllowWrites("switchover")
	h.End()
	if r := cl.result(); r.Code != wire.StatusOK || !strings.HasSuffix(string(r.Body), " 1 0") {
		t.Fatalf("held put after a failed handover: %s", r)
	}
	if partitionEnd(t, old, "test", 1) <= 0 {
		t.Fatal("not stored here")
	}
}

// TestLocalHoldAnswersAsTheGateDoes: a Local Hold (a master confirming
// its generation) holds puts while the write check refuses them; a put
// whose time is up gets the check's refusal, as without a Hold, and is
// not stored; once the check lets writes through and the Hold ends, what
// it held is stored here and acknowledged; one stored while the check lets
// it through but answered after it turned is not acknowledged.
func TestLocalHoldAnswersAsTheGateDoes(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	var refuse atomic.Bool
	refuse.Store(true)
	var refuseAtAnswer atomic.Bool
	brk.SetWriteCheck(func() *Refusal {
		if refuse.Load() {
			return &Refusal{Reason: "this master has not confirmed its generation in ZooKeeper yet; retry", Retry: true}
		}
		if refuseAtAnswer.CompareAndSwap(true, false) {
			refuse.Store(true) // from the next ask on
		}
		return nil
	})
	h, err := brk.HoldWrites(HoldOptions{MaxWait: 300 * time.Millisecond, Reason: "this master is confirming its generation", Local: true})
	if err != nil {
		t.Fatal(err)
	}
	cl := dial(t, brk.Addr())
	start := time.Now()
	cl.sendCmd(putCmd("test", 0, "expires", 1))
	r := cl.result()
	if r.Opaque != 1 || r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "this master has not confirmed its generation in ZooKeeper yet; retry") {
		t.Fatalf("held put past MaxWait while the check refuses: %s", r)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before MaxWait", waited)
	}
	if partitionEnd(t, brk, "test", 0) > 0 {
		t.Fatal("a put held while the check refused was stored")
	}

	cl.sendCmd(putCmd("test", 1, "confirmed", 2))
	cl.expectSilence(100 * time.Millisecond)
	refuse.Store(false)
	h.End()
	if r := cl.result(); r.Opaque != 2 || r.Code != wire.StatusOK {
		t.Fatalf("held put after the confirmation: %s", r)
	}
	if partitionEnd(t, brk, "test", 1) <= 0 {
		t.Fatal("not stored here")
	}

	h, err = brk.HoldWrites(HoldOptions{MaxWait: 10 * time.Second, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	cl.sendCmd(putCmd("test", 1, "turned", 3))
	cl.expectSilence(100 * time.Millisecond)
	refuseAtAnswer.Store(true)
	h.End()
	r = cl.result()
	if r.Opaque != 3 || r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "stored here, but not acknowledged") {
		t.Fatalf("held put stored and answered after the check turned: %s", r)
	}
}

// TestHoldUnknownOutcome: a put sent to the new master whose connection
// breaks before it answers is answered 500 saying the outcome is unknown,
// never as stored.
func TestHoldUnknownOutcome(t *testing.T) {
	old, h := holdOldMaster(t, HoldOptions{MaxWait: 10 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 1)
		nc.Read(buf) // the put arrived
		nc.Close()
	}()
	h.Forward(func(context.Context) (string, error) { return ln.Addr().String(), nil })
	cl := dial(t, old.Addr())
	cl.sendCmd(putCmd("test", 0, "lost in the middle", 1))
	r := cl.result()
	if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "whether it is stored there is unknown") {
		t.Fatalf("put whose forward broke: %s", r)
	}
	if st := h.Stats(); st.Unknown != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := old.HoldWrites(HoldOptions{}); err == nil {
		t.Fatal("a second Hold while one is in effect")
	}
}

// TestAcknowledgementCheckedAgainWhenAnswered: a put that passed the write
// check when it arrived but is answered when the check refuses (the master
// was paused in between and cannot confirm it still is the master) is not
// acknowledged: 500, saying whether it survives is unknown.
func TestAcknowledgementCheckedAgainWhenAnswered(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	var calls atomic.Int32
	brk.SetWriteCheck(func() *Refusal {
		if calls.Add(1) == 1 {
			return nil // at validation
		}
		return &Refusal{Reason: "this master could not confirm its generation; retry", Retry: true}
	})
	cl := dial(t, brk.Addr())
	cl.sendCmd(putCmd("test", 0, "paused in between", 1))
	r := cl.result()
	if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "stored here, but not acknowledged: this master could not confirm its generation; whether the record survives") {
		t.Fatalf("put answered after the check turned: %s", r)
	}
	brk.SetWriteCheck(nil)
	cl.sendCmd(putCmd("test", 0, "fine", 2))
	if r := cl.result(); r.Code != wire.StatusOK {
		t.Fatalf("put without a check: %s", r)
	}
}

// TestAcknowledgementCheckedOncePerAnswerFrame: the write check is asked
// once per put when it arrives, and when the puts are answered once for the
// whole answer frame, not once per partition's batch (at 10,000
// partitions every put is a batch of its own).
func TestAcknowledgementCheckedOncePerAnswerFrame(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=wide]\nnumPartitions=64\n"))
	brk := startBroker(t, cfg, nil)
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "wide", 0, "first") // registers the topic
	var calls atomic.Int32
	brk.SetWriteCheck(func() *Refusal {
		calls.Add(1)
		return nil
	})
	const n = 60
	var buf []byte
	for i := range n {
		buf = putCmd("wide", int32(i%30), "m"+strconv.Itoa(i), int32(i)).AppendTo(buf)
	}
	cl.send(buf)
	for range n {
		if r := cl.result(); !r.OK() {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
	}
	// One write of 60 puts arrives in one read, or a few: one answer frame each.
	if got := calls.Load(); got < n || got > n+4 {
		t.Fatalf("write check asked %d times for %d puts over 30 partitions, want %d at arrival and one per answer frame", got, n, n)
	}
}

// TestParsePutAnswer: a put's answer `<id> <partition> <offset>`, with
// text after it or not; anything else is an error.
func TestParsePutAnswer(t *testing.T) {
	for _, tc := range []struct {
		in     string
		id     int64
		offset int64
		ok     bool
	}{
		{"2066372701240426496 1 4096", 2066372701240426496, 4096, true},
		{"7 0 -1", 7, -1, true},
		{"7 3 -1 accepted-locally", 7, -1, true},
		{"9223372036854775807 0 0", 1<<63 - 1, 0, true},
		{"9223372036854775808 0 0", 0, 0, false},
		{"7 3", 0, 0, false},
		{"", 0, 0, false},
		{"7 x 9", 0, 0, false},
		{"7x 3 9", 0, 0, false},
		{"- 3 9", 0, 0, false},
	} {
		a, err := parsePutAnswer([]byte(tc.in))
		if (err == nil) != tc.ok || (tc.ok && (a.ID != tc.id || a.Offset != tc.offset)) {
			t.Errorf("parsePutAnswer(%q) = %+v, %v", tc.in, a, err)
		}
	}
}
