package store

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"metaq/internal/atomicfile"
)

// FS is the file-system seam of the store: every file the store touches is
// opened, renamed and removed through it, so tests can inject ENOSPC, EIO
// and short writes. Implementations must be safe for concurrent use.
type FS interface {
	// OpenFile opens a file like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Rename(oldpath, newpath string) error
	MkdirAll(path string, perm os.FileMode) error
	ReadDir(name string) ([]os.DirEntry, error)
	// SyncDir fsyncs a directory so created, renamed and removed names persist.
	SyncDir(name string) error
}

// File is the part of *os.File the store uses. ReadAt and WriteAt may be
// called concurrently (pread/pwrite).
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	// Datasync makes written data durable (fdatasync on Linux).
	Datasync() error
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
	Name() string
}

// OSFS is the operating system's file system.
type OSFS struct{}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OSFS) Rename(o, n string) error { return os.Rename(o, n) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(p string, perm os.FileMode) error { return os.MkdirAll(p, perm) }

// ReadDir implements FS.
func (OSFS) ReadDir(name string) ([]os.DirEntry, error) { return os.ReadDir(name) }

// SyncDir implements FS.
func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type osFile struct{ *os.File }

func (f osFile) Datasync() error {
	// fdatasync also persists the file size when an append grew it, which is
	// all the log needs; it skips the mtime update fsync would force.
	sc, err := f.File.SyscallConn()
	if err != nil {
		return f.File.Sync()
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.File.Name(), Err: serr}
	}
	return nil
}

func (f osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// prefetcher is a File that can start reading a range into the page
// cache without waiting for it (posix_fadvise WILLNEED): a reader of old
// data asks for what it will read next, so the disk works while it
// processes what it has (see Read). Files that cannot are simply not
// asked.
type prefetcher interface {
	Prefetch(off, n int64)
}

// prefetch asks f to read [off, off+n) ahead, if it can.
func prefetch(f File, off, n int64) {
	if pf, ok := f.(prefetcher); ok && n > 0 {
		pf.Prefetch(off, n)
	}
}

// Prefetch starts reading [off, off+n) into the page cache.
func (f osFile) Prefetch(off, n int64) { f.fadvise(off, n, unix.FADV_WILLNEED) }

// fadvise gives the kernel advice on [off, off+n) of f. Advice is best
// effort, so its error is ignored; Control keeps the descriptor open while
// it is used.
func (f osFile) fadvise(off, n int64, advice int) {
	sc, err := f.File.SyscallConn()
	if err != nil {
		return
	}
	sc.Control(func(fd uintptr) { unix.Fadvise(int(fd), off, n, advice) })
}

// randomAccess is a File that can tell the kernel not to extend its
// reads with read-ahead (posix_fadvise RANDOM).
type randomAccess interface {
	AdviseRandom()
}

// adviseRandom tells the kernel that f is read where the store says, if
// f can take the advice.
func adviseRandom(f File) {
	if ra, ok := f.(randomAccess); ok {
		ra.AdviseRandom()
	}
}

// AdviseRandom turns the kernel's read-ahead off for f.
func (f osFile) AdviseRandom() { f.fadvise(0, 0, unix.FADV_RANDOM) }

// pageCacher is a File that can tell how much of a range is in the page
// cache (cachestat, Linux 6.5 and later) and drop a range from it
// (posix_fadvise DONTNEED). The scrub uses it to leave the page cache as
// it found it (scrub.go). Files that cannot are read without the advice.
type pageCacher interface {
	// CachedBytes returns how many bytes of the pages of [off, off+n) are
	// in the page cache; ok is false if the kernel cannot tell.
	CachedBytes(off, n int64) (cached int64, ok bool)
	// DropCache asks the kernel to drop the clean pages wholly inside
	// [off, off+n) from the page cache.
	DropCache(off, n int64)
}

// CachedBytes implements pageCacher with cachestat(2).
func (f osFile) CachedBytes(off, n int64) (int64, bool) {
	sc, err := f.File.SyscallConn()
	if err != nil {
		return 0, false
	}
	var st unix.Cachestat_t
	var cerr error
	if err := sc.Control(func(fd uintptr) {
		cerr = unix.Cachestat(uint(fd), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0)
	}); err != nil || cerr != nil {
		return 0, false
	}
	return int64(st.Cache) * int64(os.Getpagesize()), true
}

// DropCache implements pageCacher.
func (f osFile) DropCache(off, n int64) { f.fadvise(off, n, unix.FADV_DONTNEED) }

// writeFileAtomic replaces path with data through fs (see internal/atomicfile).
func writeFileAtomic(fs FS, path string, data []byte) error {
	return atomicfile.WriteFileFS(atomicFS{fs}, path, data, 0o644)
}

// atomicFS lets internal/atomicfile write through the store's FS, so the
// tests' fault injection reaches those writes too.
type atomicFS struct{ FS }

func (a atomicFS) OpenFile(name string, flag int, perm os.FileMode) (atomicfile.File, error) {
	f, err := a.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return datasyncFile{f}, nil
}

// datasyncFile syncs with fdatasync: the size, all a reader needs, is
// persisted with the data.
type datasyncFile struct{ File }

func (f datasyncFile) Sync() error { return f.Datasync() }

// readFile reads a whole (small) file through fs.
func readFile(fs FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
