// Package storetest holds test doubles for the store's file system, shared
// by the tests of the packages built on the store.
package storetest

import (
	"os"
	"sync/atomic"
	"syscall"

	"metaq/broker/store"
)

// FullFS is the real file system, except that every WriteAt fails with
// ENOSPC while Full is set: a disk that fills up and later has room again.
type FullFS struct {
	store.OSFS
	Full atomic.Bool
}

type fullFile struct {
	store.File
	fs *FullFS
}

// OpenFile opens the file with the real file system and wraps it.
func (f *FullFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return fullFile{file, f}, nil
}

func (f fullFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.Full.Load() {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(b, off)
}
