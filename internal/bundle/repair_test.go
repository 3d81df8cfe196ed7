package bundle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/internal/testutil"
)

// damageCopy copies the store at from to a new dir, flips bytes inside one
// data entry of its first segment and opens it (a full scan finds it).
func damageCopy(t *testing.T, from string) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	testutil.CopyTree(t, from, dir)
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	b, _ := os.ReadFile(segs[0])
	at := bytes.Index(b, []byte("record-0050-"))
	b[at+15] ^= 0xFF
	os.WriteFile(segs[0], b, 0o644)
	os.Remove(filepath.Join(dir, "checkpoint"))
	s, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if len(s.Damaged()) != 1 {
		t.Fatalf("damage: %v", s.Damaged())
	}
	return s, dir
}

// serve starts a broker over st on loopback and returns its MetaQ address.
func serve(t *testing.T, st *store.Store) string {
	t.Helper()
	cfg, _, err := config.Load("../../broker/testdata/vectors/server.ini")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b.Addr().String()
}

func readPartition(t *testing.T, s *store.Store, topic string, p int) []byte {
	t.Helper()
	info, _ := s.Partition(topic, p)
	var out []byte
	for off := info.Min; off < info.Max; {
		b, err := s.Read(topic, p, off, 1<<20)
		if err != nil {
			t.Fatalf("read %s-%d at %d: %v", topic, p, off, err)
		}
		out = append(out, b...)
		off += int64(len(b))
	}
	return out
}

// TestRepairFromReplica: the damaged range of a master is fetched from a
// replica that holds it, verified and written back byte-identically; a
// replica that lacks it repairs nothing.
func TestRepairFromReplica(t *testing.T) {
	t.Parallel()
	replicaDir := t.TempDir()
	replica, err := store.Open(store.Options{Dir: replicaDir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		body := fmt.Appendf(nil, "record-%04d-%s", i, bytes.Repeat([]byte("r"), 100))
		if _, err := replica.Append(context.Background(), "test", 0, []store.Message{{Body: body}}); err != nil {
			t.Fatal(err)
		}
	}
	replica.Close()
	master, _ := damageCopy(t, replicaDir)
	lost := master.Damaged()[0]

	// a replica with the same damage cannot help
	bad, _ := damageCopy(t, replicaDir)
	if done, err := RepairFrom(t.Context(), master, serve(t, bad), "test", 0); err == nil || len(done) != 0 {
		t.Fatalf("repair from a replica without the records: %v %v", done, err)
	}
	if len(master.Damaged()) != 1 {
		t.Fatal("damage gone after a failed repair")
	}

	replica, err = store.Open(store.Options{Dir: replicaDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Close() })
	done, err := RepairFrom(t.Context(), master, serve(t, replica), "test", 0)
	if err != nil || len(done) != 1 || done[0] != lost {
		t.Fatalf("repair: %v %v", done, err)
	}
	if d := master.Damaged(); len(d) != 0 {
		t.Fatalf("still damaged: %v", d)
	}
	if !bytes.Equal(readPartition(t, master, "test", 0), readPartition(t, replica, "test", 0)) {
		t.Fatal("repaired partition differs from the replica's")
	}
}

// TestRepairFromShortReplica: a replica that holds only part of a damaged
// range repairs that part; the rest stays reported until a replica that
// has it is asked.
func TestRepairFromShortReplica(t *testing.T) {
	t.Parallel()
	origDir := t.TempDir()
	orig, err := store.Open(store.Options{Dir: origDir})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []int64 // offsets where each batch starts
	for i := 0; i < 10; i++ {
		msgs := make([]store.Message, 5)
		for j := range msgs {
			msgs[j] = store.Message{Body: fmt.Appendf(nil, "batch-%d-record-%d-%s", i, j, bytes.Repeat([]byte("s"), 40))}
		}
		as, err := orig.Append(context.Background(), "test", 0, msgs)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, as[0].Offset)
	}
	whole := readPartition(t, orig, "test", 0)
	orig.Close()

	// the master: batch 3's entry checksum is hit, which no record checksum
	// locates, so all five records are lost
	masterDir := t.TempDir()
	testutil.CopyTree(t, origDir, masterDir)
	segs, _ := filepath.Glob(filepath.Join(masterDir, "log", "*.log"))
	raw, _ := os.ReadFile(segs[0])
	at := bytes.Index(raw, []byte("batch-3-record-0-")) - store.RecordHeaderLen - 36 // entry header
	raw[at+9] ^= 0xFF
	os.WriteFile(segs[0], raw, 0o644)
	os.Remove(filepath.Join(masterDir, "checkpoint"))
	master, err := store.Open(store.Options{Dir: masterDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	lost := store.Damage{Topic: "test", Partition: 0, From: chunks[3], To: chunks[4]}
	if d := master.Damaged(); len(d) != 1 || d[0] != lost {
		t.Fatalf("damage %v, want %v", d, lost)
	}

	// a replica that stops two records into the range
	rec := (chunks[4] - chunks[3]) / 5
	short, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { short.Close() })
	if _, err := short.AppendRaw(t.Context(), "test", 0, 0, whole[:chunks[3]+2*rec]); err != nil {
		t.Fatal(err)
	}
	done, err := RepairFrom(t.Context(), master, serve(t, short), "test", 0)
	if err == nil || len(done) != 1 || done[0].From != chunks[3] || done[0].To != chunks[3]+2*rec {
		t.Fatalf("repair from a short replica: %v %v", done, err)
	}
	if d := master.Damaged(); len(d) != 1 || d[0].From != chunks[3]+2*rec || d[0].To != chunks[4] {
		t.Fatalf("damage left %v", master.Damaged())
	}

	full, err := store.Open(store.Options{Dir: origDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { full.Close() })
	if done, err := RepairFrom(t.Context(), master, serve(t, full), "test", 0); err != nil || len(done) != 1 {
		t.Fatalf("repair of the rest: %v %v", done, err)
	}
	if !bytes.Equal(readPartition(t, master, "test", 0), whole) {
		t.Fatal("repaired partition differs from what was written")
	}
}
