package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"metaq/internal/diskfill"
)

// TestDiskFullRecoversByItself: a write that fails with ENOSPC refuses that
// append with a clear reason, leaves nothing partial behind and loses
// nothing acknowledged; the next append after room is freed succeeds
// without a restart.
func TestDiskFullRecoversByItself(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{}
	s := openT(t, Options{Dir: dir, FS: ffs})
	want := fill(t, s, "e", 2, 20)
	seg := logFiles(t, dir, segSuffix)[0]
	before, _ := os.Stat(seg)
	ffs.set(syscall.ENOSPC, nil)
	_, err := s.Append(context.Background(), "e", 0, []Message{{Body: []byte("refused")}})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("append on a full disk: %v", err)
	}
	if h := s.Health(); !errors.Is(h, ErrNoSpace) {
		t.Fatalf("Health on a full disk = %v", h)
	}
	if after, _ := os.Stat(seg); after.Size() != before.Size() {
		t.Fatalf("failed write left %d bytes behind", after.Size()-before.Size())
	}
	checkParts(t, s, "e", want)
	if err := s.ProbeSpace(t.Context()); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ProbeSpace on a full disk: %v", err)
	}
	if after, _ := os.Stat(seg); after.Size() != before.Size() {
		t.Fatalf("the probe left %d bytes behind", after.Size()-before.Size())
	}
	ffs.set(nil, nil) // room again
	if err := s.ProbeSpace(t.Context()); err != nil {
		t.Fatalf("ProbeSpace once there is room: %v", err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after a successful probe: %v", err)
	}
	if after, _ := os.Stat(seg); after.Size() != before.Size() {
		t.Fatalf("the probe left %d bytes behind", after.Size()-before.Size())
	}
	a := mustAppend(t, s, "e", 0, "accepted again")
	if a[0].Offset != int64(len(want[0])) {
		t.Fatalf("append after the disk had room at %d, want %d", a[0].Offset, len(want[0]))
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after recovery: %v", err)
	}
	want[0] = AppendRecord(want[0], a[0].ID, 0, []byte("accepted again"))
	s.Close()
	checkParts(t, openT(t, Options{Dir: dir}), "e", want)
}

// TestDiskFullRealFilesystem fills a small tmpfs (mounted here, as root)
// with a store under load, counts every acknowledged record, frees room and
// checks that appends are accepted again by the same store, then that every
// acknowledged record survives a restart.
func TestDiskFullRealFilesystem(t *testing.T) {
	mnt := t.TempDir()
	diskfill.MountTmpfs(t, mnt, 2<<20)
	ballast := filepath.Join(mnt, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "store")
	opts := Options{Dir: dir, SegmentBytes: 256 << 10}
	s := openT(t, opts)
	var acked []ackedRecord
	refused := 0
	var refusal error
	body := bytes.Repeat([]byte("f"), 900)
	for i := 0; refused < 50 && i < 100000; i++ {
		p := i % 3
		b := fmt.Appendf(nil, "%d-%s", i, body)
		a, err := s.Append(context.Background(), "full", p, []Message{{Body: b}})
		if err != nil {
			refused++
			refusal = err
			continue
		}
		acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, b)})
	}
	if refused == 0 {
		t.Fatal("the disk never filled")
	}
	if !errors.Is(refusal, ErrNoSpace) || !strings.Contains(refusal.Error(), "no space left on device") {
		t.Fatalf("refusal: %v", refusal)
	}
	t.Logf("disk full after %d acknowledged records; %d refused", len(acked), refused)
	if countSurvivors(t, s, "full", 3, acked) != 0 {
		t.Fatal("acknowledged records lost on a full disk")
	}
	if err := s.ProbeSpace(t.Context()); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ProbeSpace on the full tmpfs: %v", err)
	}
	os.Remove(ballast) // the operator frees room
	if err := s.ProbeSpace(t.Context()); err != nil {
		t.Fatalf("ProbeSpace after room was freed: %v", err)
	}
	for p := 0; p < 3; p++ {
		b := []byte(fmt.Sprintf("after-%d", p))
		a, err := s.Append(context.Background(), "full", p, []Message{{Body: b}})
		if err != nil {
			t.Fatalf("append after room was freed: %v", err)
		}
		acked = append(acked, ackedRecord{p, a[0].Offset, AppendRecord(nil, a[0].ID, 0, b)})
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after room was freed: %v", err)
	}
	s.Close()
	s2 := openT(t, opts)
	if countSurvivors(t, s2, "full", 3, acked) != 0 {
		t.Fatal("acknowledged records lost across the restart")
	}
}
