package diskfill

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallFS mounts a tmpfs of 1 MiB of its own (root only) and returns its
// directory.
func smallFS(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	MountTmpfs(t, mnt, 1<<20)
	return mnt
}

func avail(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestFillTakesEverything: with leave 0 no page is left (a write fails
// with ENOSPC), and removing the file gives the space back.
func TestFillTakesEverything(t *testing.T) {
	mnt := smallFS(t)
	before := avail(t, mnt)
	file := filepath.Join(mnt, "ballast")
	if err := Fill(file, 0); err != nil {
		t.Fatal(err)
	}
	if a := avail(t, mnt); a != 0 {
		t.Fatalf("%d bytes free after Fill(0), want 0", a)
	}
	if err := os.WriteFile(filepath.Join(mnt, "probe"), make([]byte, 4096), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write on the filled filesystem: %v, want ENOSPC", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if a := avail(t, mnt); a != before {
		t.Fatalf("%d bytes free once the file is removed, want %d", a, before)
	}
}

// TestFillLeaves: a positive leave is left free; when no more than leave
// is free, no file is made.
func TestFillLeaves(t *testing.T) {
	mnt := smallFS(t)
	file := filepath.Join(mnt, "filler")
	if err := Fill(file, 64<<10); err != nil {
		t.Fatal(err)
	}
	if a := avail(t, mnt); a != 64<<10 {
		t.Fatalf("%d bytes free after Fill(64 KiB), want %d", a, 64<<10)
	}
	other := filepath.Join(mnt, "second")
	if err := Fill(other, 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Fill with no more than leave free made a file: %v", err)
	}
	if a := avail(t, mnt); a != 64<<10 {
		t.Fatalf("%d bytes free after a second Fill, want %d", a, 64<<10)
	}
}
