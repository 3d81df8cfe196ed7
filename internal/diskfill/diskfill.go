// Package diskfill makes a filesystem full on purpose, for tests and fault
// schedules: one file takes its free space, and removing the file gives
// the space back.
package diskfill

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pageSize is the step in which Fill takes what the filesystem still grants
// once its reported free space is allocated.
const pageSize = 4096

// Fill allocates into file (created when missing, never truncated) the
// free space of the filesystem that holds it, all but leave bytes. With
// leave 0 it then goes on a page at a time until the filesystem refuses
// one, so that no new page can be had. When leave is positive and no more
// than leave bytes are free, Fill does nothing and creates no file.
func Fill(file string, leave int64) error {
	dir := filepath.Dir(file)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("diskfill: statfs %s: %w", dir, err)
	}
	avail := int64(st.Bavail) * int64(st.Bsize)
	if leave > 0 && avail <= leave {
		return nil
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("diskfill: %w", err)
	}
	defer f.Close()
	n := avail - leave
	if n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			return fmt.Errorf("diskfill: fallocate %d bytes in %s: %w", n, file, err)
		}
	}
	if leave == 0 {
		for off := n; unix.Fallocate(int(f.Fd()), 0, off, pageSize) == nil; off += pageSize {
		}
	}
	return nil
}
