package diskfill

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ErrNotRoot is returned by Mount when the process is not root, which
// mount(8) requires.
var ErrNotRoot = errors.New("diskfill: mounting a tmpfs needs root")

// Mount mounts a tmpfs of size bytes at dir, which must exist: a
// filesystem of its own, so that filling it fills nothing else.
func Mount(dir string, size int64) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("diskfill: mount a tmpfs at %s: %w", dir, ErrNotRoot)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("diskfill: mount a tmpfs at %s: %w (%s)", dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// Unmount detaches the filesystem mounted at dir lazily (umount -l): a
// process may still be exiting with files open in it.
func Unmount(dir string) error {
	if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("diskfill: umount %s: %w (%s)", dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// TB is the part of testing.TB that MountTmpfs uses: an interface of its
// own keeps package testing out of the binaries that fill disks (the
// fault harness's).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
}

// MountTmpfs gives a test a tmpfs of size bytes at dir (created when
// missing), unmounted when the test and the cleanups registered after
// this call are done. It skips the test where no tmpfs can be mounted
// (not root, or mount refused).
func MountTmpfs(t TB, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to mount a tmpfs of its own at %s", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("diskfill: %v", err)
	}
	if err := Mount(dir, size); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = Unmount(dir) })
}
