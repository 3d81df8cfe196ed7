package store

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// reserveFDs is how many file descriptors the store keeps in reserve.
// Rolling the log needs two that stay open (the new segment and its .idx)
// and one for a moment (the directory to fsync); a checkpoint one more
// (its temp file).
const reserveFDs = 4

// reserveFS keeps file descriptors in reserve for the store: when the
// process runs out (EMFILE, ENFILE: say, thousands of idle client
// connections under a low `ulimit -n`), an open gives one back and tries
// again, so the store can still roll its log and write its checkpoint. The
// reserve is refilled by later opens once descriptors are free again.
type reserveFS struct {
	FS
	mu    sync.Mutex
	spare []*os.File
}

func newReserveFS(fs FS) *reserveFS {
	r := &reserveFS{FS: fs}
	r.refillLocked()
	return r
}

func (r *reserveFS) refillLocked() {
	for len(r.spare) < reserveFDs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return
		}
		r.spare = append(r.spare, f)
	}
}

func outOfFDs(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// retry runs op; while it fails for lack of descriptors it frees a spare
// one and runs it again.
func (r *reserveFS) retry(op func() error) error {
	err := op()
	r.mu.Lock()
	defer r.mu.Unlock()
	for err != nil && outOfFDs(err) && len(r.spare) > 0 {
		last := len(r.spare) - 1
		r.spare[last].Close()
		r.spare = r.spare[:last]
		err = op()
	}
	if err == nil && len(r.spare) < reserveFDs {
		r.refillLocked()
	}
	return err
}

// OpenFile implements FS.
func (r *reserveFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	var f File
	err := r.retry(func() error {
		var err error
		f, err = r.FS.OpenFile(name, flag, perm)
		return err
	})
	return f, err
}

// SyncDir implements FS (it opens the directory).
func (r *reserveFS) SyncDir(name string) error {
	return r.retry(func() error { return r.FS.SyncDir(name) })
}

// ReadDir implements FS.
func (r *reserveFS) ReadDir(name string) ([]os.DirEntry, error) {
	var ents []os.DirEntry
	err := r.retry(func() error {
		var err error
		ents, err = r.FS.ReadDir(name)
		return err
	})
	return ents, err
}

func (r *reserveFS) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.spare {
		f.Close()
	}
	r.spare = nil
}
