package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// txRequest sends one transaction command or transactional put (a raw
// frame, as MetaQ's Java producer writes it) and returns its answer.
func txRequest(t *testing.T, cl *client, frame string) *wire.Result {
	t.Helper()
	cl.send([]byte(frame))
	return cl.result()
}

func txFrame(key, session, typ string, opaque int) string {
	return fmt.Sprintf("transaction %s %s %s %d\r\n", key, session, typ, opaque)
}

func txPutFrame(topic string, p int, body, key string, opaque int) string {
	return fmt.Sprintf("put %s %d %d 0 %d %s %d\r\n%s", topic, p, len(body), wire.Checksum([]byte(body)), key, opaque, body)
}

// TestGatewayForwardsTransactions: at a slave whose site forwards puts, a
// client's local transaction (begin, puts, commit) and XA transaction
// (begin, put, end, prepare, recover, commit from another connection) are
// the master's: each answer is the master's, the committed messages are at
// the master under the ids the puts were answered with, a rolled-back
// transaction leaves nothing, and a connection's transactions travel on a
// gateway link of its own that closes with it (the master then rolls back
// what it left open). A transactional put to a topic the site does not
// forward is refused as a slave refuses it.
func TestGatewayForwardsTransactions(t *testing.T) {
	master, slave, g, _ := gatewayPair(t, "[site]\nforwardPuts=true\n[topic=notfwd]\nforwardPuts=false", GatewayOptions{})
	master.SetTxHandler(VectorTxHandler(t, master.store, master.Broker))
	slave.SetTxHandler(VectorTxHandler(t, slave.store, slave.Broker)) // what the slave would answer itself

	const sa = "10.0.0.7-1370000000000-1"
	a := dial(t, slave.Addr())
	key := "TX:" + sa + ":1"
	if r := txRequest(t, a, txFrame(key, sa, "BEGIN", 1)); r.Code != wire.StatusOK {
		t.Fatalf("BEGIN: %s", r)
	}
	ids := map[string]int64{}
	for i, p := range []int{0, 1, 0} {
		body := fmt.Sprintf("tx-a-%d", i)
		r := txRequest(t, a, txPutFrame("test", p, body, key, 10+i))
		if r.Code != wire.StatusOK || !strings.HasSuffix(string(r.Body), fmt.Sprintf(" %d -1", p)) {
			t.Fatalf("put %s in the transaction: %s", body, r)
		}
		an, err := parsePutAnswer(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		ids[body] = an.ID
	}
	if end := partitionEnd(t, master, "test", 0); end > 0 {
		t.Fatalf("the master shows %d bytes before the commit", end)
	}
	if r := txRequest(t, a, txFrame(key, sa, "COMMIT_ONE_PHASE", 20)); r.Code != wire.StatusOK {
		t.Fatalf("COMMIT: %s", r)
	}
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		b0, _ := masterBodies(t, master, "test", 0)
		b1, _ := masterBodies(t, master, "test", 1)
		if len(b0)+len(b1) < 3 {
			return fmt.Errorf("the master holds %v and %v after the commit", b0, b1)
		}
		return nil
	})
	for p, want := range map[int][]string{0: {"tx-a-0", "tx-a-2"}, 1: {"tx-a-1"}} {
		bodies, gotIDs := masterBodies(t, master, "test", p)
		if strings.Join(bodies, ",") != strings.Join(want, ",") {
			t.Fatalf("the master holds %v in test-%d, want %v", bodies, p, want)
		}
		for i, b := range bodies {
			if gotIDs[i] != ids[b] {
				t.Fatalf("%s answered id %d, stored as %d", b, ids[b], gotIDs[i])
			}
		}
	}

	// Rolled back: nothing stored. A put to a topic not forwarded here: the
	// slave's refusal.
	key2 := "TX:" + sa + ":2"
	txRequest(t, a, txFrame(key2, sa, "BEGIN", 30))
	if r := txRequest(t, a, txPutFrame("test", 1, "tx-a-rolled-back", key2, 31)); r.Code != wire.StatusOK {
		t.Fatalf("put: %s", r)
	}
	if r := txRequest(t, a, txPutFrame("notfwd", 0, "x", key2, 32)); r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "slave") {
		t.Fatalf("a transactional put to a topic not forwarded: %s, want the slave's 403", r)
	}
	if r := txRequest(t, a, txFrame(key2, sa, "ROLLBACK", 33)); r.Code != wire.StatusOK {
		t.Fatalf("ROLLBACK: %s", r)
	}

	// XA, broker-wide at the master: prepared on one connection, listed
	// and committed from another.
	const uq = "XAProducer-test"
	xid := "XID:1:6774:6271:" + uq
	b := dial(t, slave.Addr())
	for _, f := range []string{txFrame(xid, sa, "BEGIN", 40), txPutFrame("test", 1, "tx-xa", xid, 41)} {
		if r := txRequest(t, b, f); r.Code != wire.StatusOK {
			t.Fatalf("%q: %s", f, r)
		}
	}
	b.send([]byte(txFrame(xid, sa, "END", 42))) // no answer, from the master either
	if r := txRequest(t, b, txFrame(xid, sa, "PREPARE", 43)); r.Code != wire.StatusOK || string(r.Body) != "0" {
		t.Fatalf("PREPARE: %s, want XA_OK", r)
	}
	c := dial(t, slave.Addr())
	if r := txRequest(t, c, fmt.Sprintf("transaction null %s RECOVER %s 50\r\n", sa, uq)); r.Code != wire.StatusOK || string(r.Body) != xid {
		t.Fatalf("RECOVER: %s, want %s", r, xid)
	}
	if r := txRequest(t, c, txFrame(xid, sa, "COMMIT_TWO_PHASE", 51)); r.Code != wire.StatusOK {
		t.Fatalf("COMMIT_TWO_PHASE from another connection: %s", r)
	}
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if bodies, _ := masterBodies(t, master, "test", 1); strings.Join(bodies, ",") != "tx-a-1,tx-xa" {
			return fmt.Errorf("the master holds %v in test-1, want tx-a-1,tx-xa", bodies)
		}
		return nil
	})
	for p := range 2 {
		if partitionEnd(t, slave, "test", p) > 0 {
			t.Fatalf("the slave stored a transaction's message in test-%d", p)
		}
	}
	st := g.Stats()
	if st.TxLinks != 3 || st.TxForwarded < 12 || st.Unknown != 0 || st.NotSent != 0 {
		t.Fatalf("gateway stats %+v: want a link for each of the 3 connections and every answer the master's", st)
	}

	// A connection left with a transaction open: its link closes with it.
	before := master.stats.connections.Load()
	d := dial(t, slave.Addr())
	key3 := "TX:" + sa + ":3"
	txRequest(t, d, txFrame(key3, sa, "BEGIN", 60))
	txRequest(t, d, txPutFrame("test", 0, "tx-d-left-open", key3, 61))
	if n := master.stats.connections.Load(); n != before+1 {
		t.Fatalf("the master has %d connections, want %d (the new connection's link)", n, before+1)
	}
	d.nc.Close()
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := master.stats.connections.Load(); n != before {
			return fmt.Errorf("the master has %d connections, want %d: the closed connection's link is open", n, before)
		}
		return nil
	})
	if bodies, _ := masterBodies(t, master, "test", 0); strings.Join(bodies, ",") != "tx-a-0,tx-a-2" {
		t.Fatalf("the master holds %v in test-0", bodies)
	}
}

// txThroughMovingGateway sets up a master that runs MetaQ's transactions, a
// slave site forwarding puts to it through a gateway whose master target the
// test moves (none at first), and a client of the slave; it returns the
// transaction key of the given producer session.
func txThroughMovingGateway(t *testing.T, maxWait time.Duration, session string) (master *testBroker, cl *client, target *movingMaster, _ string, key string) {
	t.Helper()
	master, slave, _, target := movingGateway(t, "[site]\nforwardPuts=true", GatewayOptions{MaxWait: maxWait})
	master.SetTxHandler(VectorTxHandler(t, master.store, master.Broker))
	return master, dial(t, slave.Addr()), target, session, "TX:" + session + ":1"
}

// TestGatewayTransactionUnknownOutcome: a transaction command the master
// received and whose answer never came back is answered 500, outcome
// unknown, never as done; with no master to send to, 503, not sent.
func TestGatewayTransactionUnknownOutcome(t *testing.T) {
	master, cl, target, s, key := txThroughMovingGateway(t, 300*time.Millisecond, "10.0.0.7-1370000000000-9")
	if r := txRequest(t, cl, txFrame(key, s, "BEGIN", 1)); r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not sent") {
		t.Fatalf("BEGIN with the master away: %s, want 503 not sent", r)
	}
	drop := newAnswerDropper(t, master.Addr().String())
	target.Store(drop.addr)
	if r := txRequest(t, cl, txFrame(key, s, "BEGIN", 2)); r.Code != wire.StatusOK {
		t.Fatalf("BEGIN: %s", r) // the first answer passes the dropper
	}
	if r := txRequest(t, cl, txFrame(key, s, "COMMIT_ONE_PHASE", 3)); r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "unknown") {
		t.Fatalf("COMMIT whose answer is lost: %s, want 500 outcome unknown", r)
	}
}

// TestGatewayTransactionWaitsForTheMaster: a transaction begun at a slave
// site before its ZooKeeper names the master waits for it, as a put does
// (within MaxWait), instead of being refused at once: a site's view is
// written before the master's node reaches it.
func TestGatewayTransactionWaitsForTheMaster(t *testing.T) {
	master, a, target, sa, key := txThroughMovingGateway(t, 5*time.Second, "10.0.0.8-1370000000000-1")
	time.AfterFunc(300*time.Millisecond, func() { target.Store(master.Addr().String()) })
	if r := txRequest(t, a, txFrame(key, sa, "BEGIN", 1)); r.Code != wire.StatusOK {
		t.Fatalf("BEGIN before the master was known: %s, want the master's OK once it is", r)
	}
	if r := txRequest(t, a, txPutFrame("test", 0, "tx-late", key, 2)); r.Code != wire.StatusOK {
		t.Fatalf("put in the transaction: %s", r)
	}
	if r := txRequest(t, a, txFrame(key, sa, "COMMIT_ONE_PHASE", 3)); r.Code != wire.StatusOK {
		t.Fatalf("COMMIT: %s", r)
	}
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if b, _ := masterBodies(t, master, "test", 0); len(b) != 1 || b[0] != "tx-late" {
			return fmt.Errorf("the master holds %v in test-0, want [tx-late]", b)
		}
		return nil
	})
}
