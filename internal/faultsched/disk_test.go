package faultsched

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestFillDiskLeavesRoomAndFrees: a disk-full fault takes a site's data
// filesystem (a tmpfs of its own) down to 64 KiB free, and its heal gives
// the space back.
func TestFillDiskLeavesRoomAndFrees(t *testing.T) {
	c := &Cluster{L: &Layout{Dir: t.TempDir()}}
	if !c.mountDisks() {
		t.Skip("needs root to mount the sites' data filesystems")
	}
	t.Cleanup(func() {
		if err := c.unmountDisks(); err != nil {
			t.Error(err)
		}
	})
	free := func() int64 {
		t.Helper()
		var st unix.Statfs_t
		if err := unix.Statfs(c.L.DataDir("bj"), &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}
	before := free()
	if err := c.FillDisk("bj", true); err != nil {
		t.Fatal(err)
	}
	if !c.DiskFilled("bj") || free() != 64<<10 {
		t.Fatalf("after disk-full: filled %v, %d bytes free, want 64 KiB", c.DiskFilled("bj"), free())
	}
	if err := c.FillDisk("bj", false); err != nil {
		t.Fatal(err)
	}
	if c.DiskFilled("bj") || free() != before {
		t.Fatalf("after the heal: filled %v, %d bytes free, want %d", c.DiskFilled("bj"), free(), before)
	}
}
