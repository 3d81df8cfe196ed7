package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/internal/clock"
)

// memStore is an in-memory partition store with MetaQ's record layout, so
// the manager's recovery scan reads real records.
type memStore struct {
	mu        sync.Mutex
	parts     map[string][]byte
	failNext  error // returned by the next Append before storing
	failAfter error // returned by the next Append after storing
}

func newMemStore() *memStore { return &memStore{parts: map[string][]byte{}} }

func pk(topic string, p int) string { return topic + "-" + string(rune('0'+p)) }

func (s *memStore) Append(_ context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failNext; err != nil {
		s.failNext = nil
		return nil, err
	}
	var out []store.Appended
	for _, m := range msgs {
		rec := make([]byte, 20+len(m.Body))
		binary.BigEndian.PutUint32(rec, uint32(len(m.Body)))
		binary.BigEndian.PutUint32(rec[4:], crc32.ChecksumIEEE(m.Body)&0x7fffffff)
		binary.BigEndian.PutUint64(rec[8:], uint64(m.ID))
		binary.BigEndian.PutUint32(rec[16:], uint32(m.Flag))
		copy(rec[20:], m.Body)
		out = append(out, store.Appended{ID: m.ID, Offset: int64(len(s.parts[pk(topic, partition)]))})
		s.parts[pk(topic, partition)] = append(s.parts[pk(topic, partition)], rec...)
	}
	if err := s.failAfter; err != nil {
		s.failAfter = nil
		return nil, err
	}
	return out, nil
}

func (s *memStore) Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.parts[pk(topic, partition)]
	if !ok {
		return nil, store.ErrNoPartition
	}
	if offset >= int64(len(b)) || offset < 0 {
		return nil, &store.RangeError{Offset: offset, Max: int64(len(b))}
	}
	end := offset + int64(maxBytes)
	if end > int64(len(b)) {
		end = int64(len(b))
	}
	return append([]byte(nil), b[offset:end]...), nil
}

func (s *memStore) Partition(topic string, partition int) (store.PartitionInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.parts[pk(topic, partition)]
	if !ok {
		return store.PartitionInfo{}, store.ErrNoPartition
	}
	return store.PartitionInfo{Topic: topic, Partition: partition, Max: int64(len(b))}, nil
}

// bodies returns the bodies stored in a partition, in order.
func (s *memStore) bodies(topic string, p int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	b := s.parts[pk(topic, p)]
	for len(b) >= 20 {
		n := int(binary.BigEndian.Uint32(b))
		out = append(out, string(b[20:20+n]))
		b = b[20+n:]
	}
	return out
}

func newTestManager(t *testing.T, dir string, st Store, clk clock.Clock) *Manager {
	t.Helper()
	var id atomic.Int64
	id.Store(1000)
	m, err := Open(Options{Dir: dir, Store: st, NextID: func() int64 { return id.Add(1) }, FlushAtCommit: 1, Clock: clk, MaxTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

const (
	lk  = "TX:127.0.0.1-1370000000000-1:1"
	xk  = "XID:1:676c6f62616c31:6272616e636831:XAMessageProducer-myhost"
	xk2 = "XID:1:676c6f62616c32:6272616e636832:XAMessageProducer-myhost"
)

func mustPut(t *testing.T, m *Manager, conn ConnID, key, topic string, p int, body string) {
	t.Helper()
	if _, err := m.Put(conn, key, topic, p, 0, []byte(body)); err != nil {
		t.Fatalf("put %s: %v", body, err)
	}
}

func TestLocalCommitAppendsInOrderOnlyAtCommit(t *testing.T) {
	st := newMemStore()
	m := newTestManager(t, t.TempDir(), st, nil)
	ctx := context.Background()
	if err := m.Begin(1, lk, 0); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, 1, lk, "test", 0, "a")
	mustPut(t, m, 1, lk, "test", 1, "b")
	mustPut(t, m, 1, lk, "test", 0, "c")
	if got := st.bodies("test", 0); len(got) != 0 {
		t.Fatalf("messages visible before commit: %v", got)
	}
	if err := m.Commit(ctx, 1, lk, true); err != nil {
		t.Fatal(err)
	}
	if got := st.bodies("test", 0); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("partition 0 = %v, want [a c]", got)
	}
	if got := st.bodies("test", 1); len(got) != 1 || got[0] != "b" {
		t.Fatalf("partition 1 = %v, want [b]", got)
	}
	// Finished: a second commit is "not started".
	if err := m.Commit(ctx, 1, lk, true); err == nil || err.Error() != "Local transaction '"+lk+"' has not been started." {
		t.Fatalf("second commit: %v", err)
	}
}

func TestLocalRollbackAndErrors(t *testing.T) {
	st := newMemStore()
	m := newTestManager(t, t.TempDir(), st, nil)
	_ = m.Begin(1, lk, 0)
	mustPut(t, m, 1, lk, "test", 0, "a")
	if err := m.Rollback(1, lk); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(context.Background(), 1, lk, true); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("commit after rollback: %v", err)
	}
	if got := st.bodies("test", 0); len(got) != 0 {
		t.Fatalf("rolled back messages stored: %v", got)
	}
	// Local transactions belong to their connection.
	_ = m.Begin(1, lk, 0)
	if _, err := m.Put(2, lk, "test", 0, 0, []byte("x")); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("put from another connection: %v", err)
	}
	if _, err := m.Prepare(1, lk); err == nil || err.Error() != "XAException:code=-3,msg=Prepare not implemented on Local Transactions." {
		t.Fatalf("prepare local: %v", err)
	}
	if _, err := m.Put(1, xk, "test", 0, 0, []byte("x")); err == nil || err.Error() != "XA transaction '"+xk+"' has not been started." {
		t.Fatalf("put unknown xa: %v", err)
	}
	if _, err := m.Prepare(1, xk); err == nil || err.Error() != "XAException:code=-4,msg=XA transaction '"+xk+"' has not been started." {
		t.Fatalf("prepare unknown xa: %v", err)
	}
}

func TestXAPreparedSurvivesRestartAndCommits(t *testing.T) {
	dir := t.TempDir()
	st := newMemStore()
	m := newTestManager(t, dir, st, nil)
	ctx := context.Background()
	_ = m.Begin(7, xk, 0)
	mustPut(t, m, 7, xk, "test", 0, "x1")
	mustPut(t, m, 7, xk, "test", 0, "x2")
	// Two-phase commit before prepare is a protocol error.
	if err := m.Commit(ctx, 7, xk, false); err == nil || err.Error() != "XAException:code=-6,msg=Cannot do 2 phase commit if the transaction has not been prepared." {
		t.Fatalf("2pc unprepared: %v", err)
	}
	if vote, err := m.Prepare(7, xk); err != nil || vote != VoteOK {
		t.Fatalf("prepare = %d, %v", vote, err)
	}
	// A local transaction left open is rolled back by the restart.
	_ = m.Begin(7, lk, 0)
	mustPut(t, m, 7, lk, "test", 0, "local")
	m.Close() // crash-equivalent for the journal: nothing settled

	m2 := newTestManager(t, dir, st, nil)
	if got := m2.Recover("XAMessageProducer-myhost"); len(got) != 1 || got[0] != xk {
		t.Fatalf("recover after restart = %v", got)
	}
	if got := m2.Recover("other"); len(got) != 0 {
		t.Fatalf("recover other qualifier = %v", got)
	}
	if l, x := m2.Count(); l != 0 || x != 1 {
		t.Fatalf("open after restart: local %d xa %d", l, x)
	}
	// Another connection finishes the XA transaction.
	if err := m2.Commit(ctx, 99, xk, false); err != nil {
		t.Fatal(err)
	}
	if got := st.bodies("test", 0); len(got) != 2 || got[0] != "x1" || got[1] != "x2" {
		t.Fatalf("after commit = %v", got)
	}
	if got := m2.Recover(""); len(got) != 0 {
		t.Fatalf("recover after commit = %v", got)
	}
}

func TestXAReadOnlyPrepare(t *testing.T) {
	m := newTestManager(t, t.TempDir(), newMemStore(), nil)
	_ = m.Begin(1, xk2, 0)
	if vote, err := m.Prepare(1, xk2); err != nil || vote != VoteRDOnly {
		t.Fatalf("prepare empty = %d, %v", vote, err)
	}
	if _, err := m.Prepare(1, xk2); err == nil {
		t.Fatal("transaction should have ended after a read-only vote")
	}
}

func TestCommitInterruptedAfterAppendIsNotDuplicated(t *testing.T) {
	dir := t.TempDir()
	st := newMemStore()
	m := newTestManager(t, dir, st, nil)
	_ = m.Begin(1, xk, 0)
	mustPut(t, m, 1, xk, "test", 0, "once")
	_, _ = m.Prepare(1, xk)
	st.failAfter = errors.New("injected: crash after the append")
	if err := m.Commit(context.Background(), 1, xk, false); err == nil {
		t.Fatal("commit should report the injected failure")
	}
	m.Close()
	m2 := newTestManager(t, dir, st, nil)
	if got := st.bodies("test", 0); len(got) != 1 || got[0] != "once" {
		t.Fatalf("after recovery = %v, want exactly [once]", got)
	}
	if got := m2.Recover(""); len(got) != 0 {
		t.Fatalf("committed transaction still listed: %v", got)
	}
}

func TestCommitInterruptedBeforeAppendIsFinished(t *testing.T) {
	dir := t.TempDir()
	st := newMemStore()
	_, _ = st.Append(context.Background(), "test", 0, []store.Message{{ID: 1, Body: []byte("before")}})
	m := newTestManager(t, dir, st, nil)
	_ = m.Begin(1, lk, 0)
	mustPut(t, m, 1, lk, "test", 0, "late")
	st.failNext = errors.New("injected: crash before the append")
	if err := m.Commit(context.Background(), 1, lk, true); err == nil {
		t.Fatal("commit should report the injected failure")
	}
	m.Close()
	newTestManager(t, dir, st, nil)
	if got := st.bodies("test", 0); len(got) != 2 || got[1] != "late" {
		t.Fatalf("after recovery = %v, want [before late]", got)
	}
}

func TestConnClosedRollsBackLocal(t *testing.T) {
	st := newMemStore()
	m := newTestManager(t, t.TempDir(), st, nil)
	_ = m.Begin(5, lk, 0)
	mustPut(t, m, 5, lk, "test", 0, "a")
	_ = m.Begin(5, xk, 0)
	mustPut(t, m, 5, xk, "test", 0, "b")
	m.ConnClosed(5)
	if l, x := m.Count(); l != 0 || x != 1 {
		t.Fatalf("after close: local %d xa %d (XA is broker-wide and stays)", l, x)
	}
}

func TestTimeoutRollsBack(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := newTestManager(t, t.TempDir(), newMemStore(), clk)
	_ = m.Begin(1, lk, 3*time.Second)
	mustPut(t, m, 1, lk, "test", 0, "a")
	deadline := time.Now().Add(5 * time.Second)
	for {
		clk.Advance(time.Second)
		if l, _ := m.Count(); l == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("transaction was not rolled back after its timeout")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := m.Commit(context.Background(), 1, lk, true); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("commit after timeout: %v", err)
	}
}

func TestTornJournalTailAndCompaction(t *testing.T) {
	dir := t.TempDir()
	st := newMemStore()
	var id atomic.Int64
	m, err := Open(Options{Dir: dir, Store: st, NextID: func() int64 { return id.Add(1) }, FlushAtCommit: 1, JournalFileSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// Many finished transactions force compaction; one prepared survives it.
	_ = m.Begin(1, xk, 0)
	mustPut(t, m, 1, xk, "test", 0, "keep")
	_, _ = m.Prepare(1, xk)
	for i := 0; i < 50; i++ {
		_ = m.Begin(1, lk, 0)
		mustPut(t, m, 1, lk, "test", 1, "some body long enough to fill the journal quickly ......")
		if err := m.Commit(context.Background(), 1, lk, true); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	ns, _ := listJournals(dir)
	if len(ns) != 1 {
		t.Fatalf("journal files after compaction = %v, want one", ns)
	}
	// Tear the tail: append half an entry.
	f, _ := os.OpenFile(filepath.Join(dir, "redo."+itoa(ns[0])), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0, 0, 1, 0, 9, 9})
	f.Close()
	m2, err := Open(Options{Dir: dir, Store: st, NextID: func() int64 { return id.Add(1) }, FlushAtCommit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := m2.Recover(""); len(got) != 1 || got[0] != xk {
		t.Fatalf("prepared after compaction and torn tail = %v", got)
	}
	if got := st.bodies("test", 1); len(got) != 50 {
		t.Fatalf("committed = %d, want 50", len(got))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestParseKey(t *testing.T) {
	cases := []struct {
		key string
		ok  bool
		xa  bool
	}{
		{"TX:127.0.0.1-1370000000000-1:1", true, false},
		{"TX:a:b", false, false},
		{"TX:a", false, false},
		{xk, true, true},
		{"XID:1:zz:00:q", false, true},
		{"XID:1:00:00", false, true},
		{"null", false, false},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			k, err := ParseKey(c.key)
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if c.ok && k.XA != c.xa {
				t.Fatalf("XA = %v", k.XA)
			}
		})
	}
}

// TestFlushAtCommitModes: in every mode a prepare is handed to the OS before
// it is answered (a process crash loses nothing); mode 1 fsyncs at once and
// mode 2 within a second, mode 0 leaves it to the OS.
func TestFlushAtCommitModes(t *testing.T) {
	for _, mode := range []int{0, 1, 2} {
		t.Run(strconv.Itoa(mode), func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			var id atomic.Int64
			m, err := Open(Options{Dir: dir, Store: newMemStore(), NextID: func() int64 { return id.Add(1) }, FlushAtCommit: mode, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			_ = m.Begin(1, xk, 0)
			mustPut(t, m, 1, xk, "test", 0, "p")
			if _, err := m.Prepare(1, xk); err != nil {
				t.Fatal(err)
			}
			ns, _ := listJournals(dir)
			entries, _, err := readJournal(journalName(dir, ns[len(ns)-1]))
			if err != nil {
				t.Fatal(err)
			}
			prepared := 0
			for _, e := range entries {
				if e.kind == kindPrepare && e.rec.Key == xk {
					prepared++
				}
			}
			if prepared != 1 {
				t.Fatalf("prepare entries in the file = %d, want 1 (written before the answer)", prepared)
			}
			m.mu.Lock()
			dirty := m.dirty
			m.mu.Unlock()
			switch mode {
			case 1:
				if dirty {
					t.Fatal("mode 1 left the prepare unsynced")
				}
			case 2:
				if !dirty {
					t.Fatal("mode 2 synced at once; it should wait for the one-second flush")
				}
				testutilEventuallyClean(t, m, clk)
			}
		})
	}
}

// testutilEventuallyClean advances the fake clock until the once-a-second
// flush of mode 2 has run.
func testutilEventuallyClean(t *testing.T, m *Manager, clk *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		clk.Advance(600 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		m.mu.Lock()
		dirty := m.dirty
		m.mu.Unlock()
		if !dirty {
			return
		}
	}
	t.Fatal("mode 2 never fsynced the journal")
}
