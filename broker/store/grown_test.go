package store

import (
	"errors"
	"testing"
	"time"
)

// closed reports whether ch is closed (without waiting).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestGrownWakesOnItsPartitionsCommit: a wait for a partition to grow
// (Grown) ends with the group commit that makes records of that partition
// readable, not with one of another partition's; waiters on one partition
// share one channel; a partition already past the end asked for answers
// closed at once; a missing one ErrNoPartition. With a lazy flush policy
// the flush that makes the records readable ends it.
func TestGrownWakesOnItsPartitionsCommit(t *testing.T) {
	s := openT(t, Options{})
	mustAppend(t, s, "t", 0, "a")
	mustAppend(t, s, "t", 1, "b")
	info, err := s.Partition("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Grown("t", 0, info.Max)
	if err != nil {
		t.Fatal(err)
	}
	if closed(ch) {
		t.Fatal("closed before the partition grew")
	}
	// Append returns after its commit, and a commit wakes before it answers.
	mustAppend(t, s, "t", 1, "c")
	if closed(ch) {
		t.Fatal("closed by a commit of another partition's append")
	}
	if ch2, _ := s.Grown("t", 0, info.Max); ch2 != ch {
		t.Fatal("two waits on one partition got different channels")
	}
	mustAppend(t, s, "t", 0, "d")
	if !closed(ch) {
		t.Fatal("not closed by the commit of an append to its partition")
	}
	if ch3, _ := s.Grown("t", 0, info.Max); !closed(ch3) {
		t.Fatal("a partition already past the end asked for: channel not closed")
	}
	if _, err := s.Grown("t", 9, 0); !errors.Is(err, ErrNoPartition) {
		t.Fatalf("missing partition: %v, want ErrNoPartition", err)
	}

	s.SetPolicy("lazy", Policy{UnflushThreshold: 1000, UnflushInterval: time.Hour})
	mustAppend(t, s, "lazy", 0, "e")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	info, _ = s.Partition("lazy", 0)
	lazy, _ := s.Grown("lazy", 0, info.Max)
	mustAppend(t, s, "lazy", 0, "f")
	if closed(lazy) {
		t.Fatal("closed before the flush made the records readable")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if !closed(lazy) {
		t.Fatal("not closed by the flush that made the records readable")
	}
	if n := s.grow.n.Load(); n != 0 {
		t.Fatalf("%d partitions still listed as waited on", n)
	}
}
