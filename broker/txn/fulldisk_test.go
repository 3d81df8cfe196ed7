package txn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"metaq/internal/diskfill"
)

// smallFS mounts a tmpfs of 1 MiB of its own (root only) and returns its
// directory.
func smallFS(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	diskfill.MountTmpfs(t, mnt, 1<<20)
	return mnt
}

// openManager opens a manager of dir over st, returning Open's error.
func openManager(dir string, st Store) (*Manager, error) {
	var id atomic.Int64
	id.Store(1000)
	return Open(Options{Dir: dir, Store: st, NextID: func() int64 { return id.Add(1) }, FlushAtCommit: 1, MaxTimeout: time.Minute})
}

// preparedJournal opens a manager of dir over st, leaves the transaction
// xk prepared with the messages x1 and x2 to test-0, and closes it. It
// returns the number of the one journal file that holds it, its path and
// its contents.
func preparedJournal(t *testing.T, dir string, st Store) (n int, path string, data []byte) {
	t.Helper()
	m, err := openManager(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Begin(7, xk, 0)
	mustPut(t, m, 7, xk, "test", 0, "x1")
	mustPut(t, m, 7, xk, "test", 0, "x2")
	if vote, err := m.Prepare(7, xk); err != nil || vote != VoteOK {
		t.Fatalf("prepare = %d, %v", vote, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	ns, err := listJournals(dir)
	if err != nil || len(ns) != 1 {
		t.Fatalf("journal files of the prepared transaction: %v %v", ns, err)
	}
	path = journalName(dir, ns[0])
	data, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ns[0], path, data
}

// commitPrepared commits the transaction preparedJournal left and checks
// that st then holds its two messages, once each.
func commitPrepared(t *testing.T, m *Manager, st *memStore) {
	t.Helper()
	if err := m.Commit(context.Background(), 9, xk, false); err != nil {
		t.Fatal(err)
	}
	if got := st.bodies("test", 0); len(got) != 2 || got[0] != "x1" || got[1] != "x2" {
		t.Fatalf("after commit = %v, want [x1 x2]", got)
	}
}

// TestStartUpSnapshotOnFullDisk: Open writes the live transactions to a
// fresh journal file before it removes the old ones. With the disk full
// that write fails: Open must refuse with an error naming the file and the
// cause, keep the old journal as it was, and once room is freed the next
// Open restores the prepared transaction with exactly its messages.
func TestStartUpSnapshotOnFullDisk(t *testing.T) {
	mnt := smallFS(t)
	dir := filepath.Join(mnt, "txlog")
	st := newMemStore()
	before, old, oldData := preparedJournal(t, dir, st)

	ballast := filepath.Join(mnt, "ballast")
	if err := diskfill.Fill(ballast, 0); err != nil {
		t.Fatal(err)
	}
	_, err := openManager(dir, st)
	snapshot := journalName(dir, before+1)
	if err == nil {
		t.Fatal("Open on a full disk succeeded")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), snapshot) {
		t.Fatalf("Open on a full disk: %v; want ENOSPC naming %s", err, snapshot)
	}
	t.Logf("Open on a full disk: %v", err)
	after, _ := listJournals(dir)
	if len(after) != 1 || after[0] != before {
		t.Fatalf("journal files after the refused Open: %v, want [%d]", after, before)
	}
	if data, err := os.ReadFile(old); err != nil || string(data) != string(oldData) {
		t.Fatalf("%s changed by the refused Open (%v)", old, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	if err := os.Remove(ballast); err != nil { // the operator frees room
		t.Fatal(err)
	}
	m2, err := openManager(dir, st)
	if err != nil {
		t.Fatalf("Open once room was freed: %v", err)
	}
	defer m2.Close()
	if got := m2.Recover("XAMessageProducer-myhost"); len(got) != 1 || got[0] != xk {
		t.Fatalf("prepared transactions after the full disk = %v, want %s", got, xk)
	}
	commitPrepared(t, m2, st)
}

// TestStartUpSnapshotBesideItsSources: a crash after Open wrote its
// snapshot (redo.<n+1>) but before it removed the files it was made from
// leaves both. The next Open must not read the prepared transaction's
// messages twice: the snapshot supersedes the files before it.
func TestStartUpSnapshotBesideItsSources(t *testing.T) {
	dir := t.TempDir()
	st := newMemStore()
	_, old, oldData := preparedJournal(t, dir, st)
	m, err := openManager(dir, st) // writes redo.<n+1>, removes redo.<n>
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	// The crash came between the two: the source is still there.
	if err := os.WriteFile(old, oldData, 0o644); err != nil {
		t.Fatal(err)
	}
	m2, err := openManager(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	commitPrepared(t, m2, st)
}
