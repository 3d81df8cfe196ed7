// Package atomicfile replaces a file's content so that a crash at any
// moment leaves either the old content or the new one, whole, never a mix
// or a truncated file.
//
// The steps are the usual ones, and each is needed: the data goes to a new
// temporary file in the same directory (a rename is only atomic within one
// file system), the file is fsynced (or the rename could reach the disk
// before the data), renamed over the target, and the directory is fsynced
// (the rename itself is only durable once the directory is). Every error is
// returned, wrapped with the step and the file it failed on. A crash before
// the rename can leave a temporary file named ".<name>.tmp-<n>" behind; it is
// never read.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// File is what WriteFileFS needs of an open temporary file.
type File interface {
	io.Writer
	// Sync makes the written data durable.
	Sync() error
	Close() error
}

// FS is the file system WriteFileFS goes through, so a caller with its own
// file-system seam (the store's, which tests use to inject faults) writes
// through it too.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir fsyncs a directory so a rename in it persists.
	SyncDir(dir string) error
}

// OS is the operating system's file system.
var OS FS = osFS{}

// WriteFile replaces path with data, created with perm when path does not
// exist yet (and set to perm when it does), through the operating system.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFileFS(OS, path, data, perm)
}

// WriteFileFS is WriteFile through fsys.
func WriteFileFS(fsys FS, path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, tmp, err := createTemp(fsys, dir, filepath.Base(path), perm)
	if err != nil {
		return fmt.Errorf("atomicfile: create temporary file for %s: %w", path, err)
	}
	if err := writeSyncClose(f, data, perm); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("atomicfile: write %s through %s: %w", path, tmp, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("atomicfile: rename %s to %s: %w", tmp, path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: fsync directory %s after writing %s: %w", dir, path, err)
	}
	return nil
}

// writeSyncClose writes data, sets perm exactly (the create mode is masked
// by the umask) where the file supports it, fsyncs and closes f; f is closed
// on every path.
func writeSyncClose(f File, data []byte, perm os.FileMode) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write: %w", err)
	}
	if c, ok := f.(interface{ Chmod(os.FileMode) error }); ok {
		if err := c.Chmod(perm); err != nil {
			f.Close()
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// createTemp creates a new file ".<base>.tmp-<n>" in dir, as os.CreateTemp
// does, but through fsys.
func createTemp(fsys FS, dir, base string, perm os.FileMode) (File, string, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64()%1e10, 10))
		f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) && try < 100 {
			continue
		}
		return f, name, err
	}
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
