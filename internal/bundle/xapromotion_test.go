package bundle

import (
	"strings"
	"testing"
	"time"

	"metaq/broker/wire"
)

// TestPreparedXAAfterUnplannedPromotion: an XA transaction prepared at bj
// (BEGIN, a put, END, PREPARE, as MetaQ's XAResource sends them) is in
// bj's journal alone, which is not replicated (as in MetaQ 1.4.6). bj is
// killed and hf promoted: RECOVER at hf (XAResource.recover through the new
// master) does not list it, and hf stores none of its messages. bj,
// started again by its unit's command, follows hf and keeps the
// transaction prepared: RECOVER sent to bj itself lists it, a COMMIT there
// is refused (XAER_RMFAIL, code=-7: a slave stores nothing), and a
// ROLLBACK ends it (README, "Writing at a slave site", Transactions).
func TestPreparedXAAfterUnplannedPromotion(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	const session, uq = "10.0.0.9-1370000000000-8", "XAProducer-bj"
	xid := "XID:1:676c6f62616c31:6272616e636831:" + uq
	tx := func(w *wireConn, key string, typ wire.TxType) *wire.Result {
		return w.result(&wire.Transaction{TxKey: key, SessionID: session, Type: typ, UniqueQualifier: uq})
	}
	p := dialWire(t, s.site("bj").Broker.Addr().String())
	if r := tx(p, xid, wire.TxBegin); r.Code != wire.StatusOK {
		t.Fatalf("BEGIN at bj: %d %s", r.Code, r.Body)
	}
	// A loaded machine's bj may miss confirming its generation in
	// ZooKeeper for a moment and refuse writes (503, retry): the put and
	// the PREPARE are retried then, as a producer would.
	retry := func(what string, send func() *wire.Result, refused func(*wire.Result) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := send()
			if !refused(r) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s at bj: %d %s", what, r.Code, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	body := "xa-prepared-at-a-lost-master"
	retry("put", func() *wire.Result {
		return p.result(&wire.Put{Topic: "orders", Partition: 1, Checksum: wire.Checksum([]byte(body)), TxKey: xid, Body: []byte(body)})
	}, func(r *wire.Result) bool {
		if r.Code != wire.StatusOK && r.Code != wire.StatusServiceUnavailable {
			t.Fatalf("put at bj: %d %s", r.Code, r.Body)
		}
		return r.Code != wire.StatusOK
	})
	p.send(&wire.Transaction{TxKey: xid, SessionID: session, Type: wire.TxEnd, UniqueQualifier: uq}) // no answer
	retry("PREPARE", func() *wire.Result { return tx(p, xid, wire.TxPrepare) }, func(r *wire.Result) bool {
		if r.Code == wire.StatusOK && string(r.Body) == "0" {
			return false
		}
		if !strings.Contains(string(r.Body), "code=-7") {
			t.Fatalf("PREPARE at bj: %d %s, want XA_OK", r.Code, r.Body)
		}
		return true // XAER_RMFAIL: writes refused for now, not journaled
	})

	s.kill("bj")
	s.promote("hf", true)
	hf := s.site("hf")
	tm := dialWire(t, hf.Broker.Addr().String())
	if r := tx(tm, "null", wire.TxRecover); r.Code != wire.StatusOK || strings.Contains(string(r.Body), xid) {
		t.Fatalf("RECOVER at hf, the new master: %d %q, want OK without %s (the journal is bj's alone)", r.Code, r.Body, xid)
	}
	for _, b := range bodiesByID(t, hf, "orders") {
		if b == body {
			t.Fatalf("hf holds %q, a message of a transaction prepared at bj and never committed", body)
		}
	}

	s.restart("bj")
	bj := s.site("bj")
	waitCaughtUp(t, hf, bj, "orders", 60*time.Second)
	tb := dialWire(t, bj.Broker.Addr().String())
	if r := tx(tb, "null", wire.TxRecover); r.Code != wire.StatusOK || string(r.Body) != xid {
		t.Fatalf("RECOVER at bj, back as hf's slave: %d %q, want %s (still prepared in its journal)", r.Code, r.Body, xid)
	}
	if r := tx(tb, xid, wire.TxCommitTwoPhase); r.Code == wire.StatusOK || !strings.Contains(string(r.Body), "code=-7") {
		t.Fatalf("COMMIT_TWO_PHASE at bj, a slave: %d %s, want refused with XAER_RMFAIL (code=-7)", r.Code, r.Body)
	}
	if r := tx(tb, xid, wire.TxRollback); r.Code != wire.StatusOK {
		t.Fatalf("ROLLBACK at bj: %d %s", r.Code, r.Body)
	}
	if r := tx(tb, "null", wire.TxRecover); r.Code != wire.StatusOK || strings.Contains(string(r.Body), xid) {
		t.Fatalf("RECOVER at bj after the rollback: %d %q, want without %s", r.Code, r.Body, xid)
	}
}
