package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// faultFS injects errors into log segment writes and syncs.
type faultFS struct {
	OSFS
	mu       sync.Mutex
	writeErr error // returned after writing half the buffer
	syncErr  error
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFS) set(w, s error) {
	f.mu.Lock()
	f.writeErr, f.syncErr = w, s
	f.mu.Unlock()
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) {
		return file, err
	}
	return faultFile{file, f}, nil
}

func (f faultFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	werr := f.fs.writeErr
	f.fs.mu.Unlock()
	if werr != nil {
		n, _ := f.File.WriteAt(b[:len(b)/2], off) // a short write, as a full disk gives
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: werr}
	}
	return f.File.WriteAt(b, off)
}

func (f faultFile) Datasync() error {
	f.fs.mu.Lock()
	serr := f.fs.syncErr
	f.fs.mu.Unlock()
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return f.File.Datasync()
}

func TestDiskErrors(t *testing.T) {
	cases := []struct {
		name       string
		write, syn error
		cause      error
	}{
		{"ENOSPC on write", syscall.ENOSPC, nil, syscall.ENOSPC},
		{"EIO on write", syscall.EIO, nil, syscall.EIO},
		{"EIO on fdatasync", nil, syscall.EIO, syscall.EIO},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := &faultFS{}
			s := openT(t, Options{Dir: dir, FS: ffs})
			want := fill(t, s, "e", 2, 20)
			seg := logFiles(t, dir, segSuffix)[0]
			before, _ := os.Stat(seg)
			ffs.set(c.write, c.syn)
			_, err := s.Append(context.Background(), "e", 0, []Message{{Body: []byte("doomed")}})
			if !errors.Is(err, ErrUnhealthy) || !errors.Is(err, c.cause) {
				t.Fatalf("append error %v, want ErrUnhealthy and %v", err, c.cause)
			}
			if h := s.Health(); !errors.Is(h, ErrUnhealthy) || !errors.Is(h, c.cause) {
				t.Fatalf("Health = %v", h)
			}
			ffs.set(nil, nil) // even once the disk is fine, the store stays stopped
			if _, err := s.Append(context.Background(), "e", 1, []Message{{Body: []byte("x")}}); !errors.Is(err, ErrUnhealthy) {
				t.Fatalf("append on an unhealthy store: %v", err)
			}
			if _, err := s.AppendRaw(context.Background(), "e", 1, 0, AppendRecord(nil, 1, 0, []byte("x"))); !errors.Is(err, ErrUnhealthy) {
				t.Fatalf("AppendRaw on an unhealthy store: %v", err)
			}
			checkParts(t, s, "e", want) // stored data is still served
			if c.write != nil {
				after, _ := os.Stat(seg)
				if after.Size() != before.Size() {
					t.Fatalf("failed write left %d bytes behind", after.Size()-before.Size())
				}
			}
			s.Close()
			s2 := openT(t, Options{Dir: dir})
			for p, w := range want {
				got := readAll(t, s2, "e", p)
				if len(got) < len(w) || string(got[:len(w)]) != string(w) {
					t.Fatalf("partition %d damaged after the disk error", p)
				}
			}
			if len(logFiles(t, dir, ".bad")) != 0 {
				t.Fatal("disk error led to quarantine")
			}
			mustAppend(t, s2, "e", 0, "healthy again")
			_ = filepath.Join
		})
	}
}
