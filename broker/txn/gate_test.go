package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/store"
)

// gatedStore is how a bundle gives the manager its broker
// (internal/bundle's txnStore): a commit's batches go through the broker's
// write gate as one group.
type gatedStore struct {
	*store.Store
	b *broker.Broker
}

func (g gatedStore) AppendGroup(ctx context.Context, appends []store.PartitionAppend) ([]store.AppendOutcome, error) {
	return g.b.StoreValidatedGroup(ctx, appends)
}

// perPartitionStore commits one partition after the other through the
// broker's gate, as commits did before GroupStore; after runs after each
// partition's batch.
type perPartitionStore struct {
	*store.Store
	b     *broker.Broker
	after func()
}

func (p perPartitionStore) Append(ctx context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error) {
	as, err := p.b.StoreValidated(ctx, topic, partition, msgs)
	if p.after != nil {
		p.after()
	}
	return as, err
}

// gatedSite is a store and a started broker; the manager is the test's.
func gatedSite(t *testing.T) (*store.Store, *broker.Broker) {
	t.Helper()
	cfg, _, err := config.Parse("server.ini", []byte(e2eINI))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		st.Close()
	})
	return st, b
}

// storedBodies reads every record of topic-p from the store.
func storedBodies(t *testing.T, st *store.Store, topic string, p int) []string {
	t.Helper()
	data, err := st.Read(topic, p, 0, 1<<20)
	if errors.Is(err, store.ErrNoPartition) || errors.Is(err, store.ErrOffsetOutOfRange) {
		return nil
	}
	if err != nil {
		t.Fatalf("read %s-%d: %v", topic, p, err)
	}
	var out []string
	for len(data) >= 20 {
		n := int(binary.BigEndian.Uint32(data))
		out = append(out, string(data[20:20+n]))
		data = data[20+n:]
	}
	return out
}

func xaCode(t *testing.T, err error) int {
	t.Helper()
	var xe *XAError
	if !errors.As(err, &xe) {
		t.Fatalf("want an XAException, got %v", err)
	}
	return xe.Code
}

// TestCommitRefusedByTheGateStoresNothing: a commit the broker's write
// gate refuses (a switchover, a demotion) stores none of its partitions. A
// local transaction is then rolled back (XA_RBOTHER), a prepared XA one
// stays prepared, listed by RECOVER, and commits in full once writes are
// accepted again, across a restart of its journal in between.
func TestCommitRefusedByTheGateStoresNothing(t *testing.T) {
	st, b := gatedSite(t)
	dir := t.TempDir()
	m := newTestManager(t, dir, gatedStore{st, b}, nil)
	_ = m.Begin(1, lk, 0)
	mustPut(t, m, 1, lk, "test", 0, "local-0")
	mustPut(t, m, 1, lk, "test", 1, "local-1")
	_ = m.Begin(1, xk, 0)
	mustPut(t, m, 1, xk, "test", 0, "xa-0")
	mustPut(t, m, 1, xk, "test", 1, "xa-1")
	if vote, err := m.Prepare(1, xk); err != nil || vote != VoteOK {
		t.Fatalf("prepare: %d %v", vote, err)
	}

	b.RefuseWrites("failover", broker.Refusal{Reason: "handing over", Retry: true})
	if err := m.Commit(context.Background(), 1, lk, true); xaCode(t, err) != XARBOther {
		t.Fatalf("local commit while writes are refused: %v, want XA_RBOTHER", err)
	}
	if err := m.Check(1, lk); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("local transaction after its refused commit: %v, want rolled back", err)
	}
	if err := m.Commit(context.Background(), 1, xk, false); xaCode(t, err) != XAErrRMFail {
		t.Fatalf("XA commit while writes are refused: %v, want XAER_RMFAIL", err)
	}
	for p := range 2 {
		if got := storedBodies(t, st, "test", p); len(got) != 0 {
			t.Fatalf("test-%d holds %v after refused commits", p, got)
		}
	}
	if got := m.Recover(""); len(got) != 1 || got[0] != xk {
		t.Fatalf("RECOVER after a refused XA commit: %v, want [%s]", got, xk)
	}
	m.Close()
	m = newTestManager(t, dir, gatedStore{st, b}, nil)
	if got := m.Recover(""); len(got) != 1 || got[0] != xk {
		t.Fatalf("RECOVER after a restart: %v, want [%s]", got, xk)
	}
	b.AllowWrites("failover")
	if err := m.Commit(context.Background(), 2, xk, false); err != nil {
		t.Fatalf("XA commit once writes are accepted: %v", err)
	}
	for p, want := range []string{"xa-0", "xa-1"} {
		if got := storedBodies(t, st, "test", p); len(got) != 1 || got[0] != want {
			t.Fatalf("test-%d holds %v, want [%s]", p, got, want)
		}
	}
}

// TestCommitOfUnknownOutcomeFinishesOnce: a commit through a store that
// goes partition by partition, refused by the gate after its first
// partition's batch, is answered as of unknown outcome (not as rolled
// back: one partition holds its batch); a rollback is then refused, and a
// COMMIT sent again once writes are accepted stores the missing batch
// only.
func TestCommitOfUnknownOutcomeFinishesOnce(t *testing.T) {
	st, b := gatedSite(t)
	first := true
	ps := perPartitionStore{Store: st, b: b, after: func() {
		if first {
			first = false
			b.RefuseWrites("failover", broker.Refusal{Reason: "handing over", Retry: true})
		}
	}}
	m := newTestManager(t, t.TempDir(), ps, nil)
	_ = m.Begin(1, lk, 0)
	mustPut(t, m, 1, lk, "test", 0, "part-0")
	mustPut(t, m, 1, lk, "test", 1, "part-1")
	if err := m.Commit(context.Background(), 1, lk, true); xaCode(t, err) != XAErrRMFail {
		t.Fatalf("commit refused half way: %v, want XAER_RMFAIL (outcome unknown)", err)
	}
	if got := storedBodies(t, st, "test", 0); len(got) != 1 {
		t.Fatalf("test-0 holds %v, want the first batch", got)
	}
	if err := m.Rollback(1, lk); xaCode(t, err) != XAErrProto {
		t.Fatalf("rollback of a commit of unknown outcome: %v, want refused", err)
	}
	b.AllowWrites("failover")
	if err := m.Commit(context.Background(), 1, lk, true); err != nil {
		t.Fatalf("commit sent again: %v", err)
	}
	for p, want := range []string{"part-0", "part-1"} {
		if got := storedBodies(t, st, "test", p); len(got) != 1 || got[0] != want {
			t.Fatalf("test-%d holds %v, want [%s] once", p, got, want)
		}
	}
}
