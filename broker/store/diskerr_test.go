package store

import (
	"bytes"
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
	// With gate set, Datasync announces itself on entered and returns
	// what it receives from gate (nil: the real fdatasync).
	gate    chan error
	entered chan struct{}
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
	serr, gate, entered := f.fs.syncErr, f.fs.gate, f.fs.entered
	f.fs.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		serr = <-gate
	}
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
		{"ENOSPC on fdatasync", nil, syscall.ENOSPC, syscall.ENOSPC},
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

// TestPipelinedCommit holds one group commit's fdatasync and checks that the
// next batch is written meanwhile but neither is served or acknowledged
// before its own sync; then that a failed sync fails both batches (the
// second was written after the last good sync), leaves them out of the log,
// and loses nothing acknowledged before.
func TestPipelinedCommit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := "sync ok"
		if fail {
			name = "sync fails"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := &faultFS{}
			s := openT(t, Options{Dir: dir, FS: ffs})
			want := fill(t, s, "e", 2, 5)
			gate := make(chan error)
			ffs.mu.Lock()
			ffs.gate, ffs.entered = gate, make(chan struct{}, 4)
			ffs.mu.Unlock()
			// Should the test stop early, release held syncs so Close returns.
			t.Cleanup(func() { close(gate) })
			before := map[int]PartitionInfo{}
			for p := range want {
				before[p], _ = s.Partition("e", p)
			}
			_, durBefore := s.LogBounds()

			errA := make(chan error, 1)
			go func() {
				_, err := s.Append(context.Background(), "e", 0, []Message{{Body: []byte("batch A")}})
				errA <- err
			}()
			<-ffs.entered // A is written and its sync is running
			errB := make(chan error, 2)
			for p := 0; p < 2; p++ {
				go func() {
					_, err := s.Append(context.Background(), "e", p, []Message{{Body: []byte("batch B")}})
					errB <- err
				}()
			}
			// B is written while A's sync is still held.
			waitFor(t, func() bool {
				i0, _ := s.Partition("e", 0)
				i1, _ := s.Partition("e", 1)
				return i0.Written > before[0].Written+RecordHeaderLen+7 && i1.Written > before[1].Written
			})
			for p := range want {
				if i, _ := s.Partition("e", p); i.Durable != before[p].Durable || i.Max != before[p].Max {
					t.Fatalf("partition %d durable before its sync: %+v (was %+v)", p, i, before[p])
				}
			}
			if _, d := s.LogBounds(); d != durBefore {
				t.Fatalf("durable log end moved from %d to %d before the sync", durBefore, d)
			}
			select {
			case err := <-errA:
				t.Fatalf("A answered before its sync returned: %v", err)
			default:
			}

			if !fail {
				ffs.gate <- nil // A's sync
				if err := <-errA; err != nil {
					t.Fatalf("A: %v", err)
				}
				<-ffs.entered
				select {
				case err := <-errB:
					t.Fatalf("B answered before its sync returned: %v", err)
				default:
				}
				ffs.gate <- nil // B's sync (partitions 0 and 1 together)
				for i := 0; i < 2; i++ {
					if err := <-errB; err != nil {
						t.Fatalf("B: %v", err)
					}
				}
			} else {
				ffs.gate <- syscall.EIO
				if err := <-errA; !errors.Is(err, ErrUnhealthy) || !errors.Is(err, syscall.EIO) {
					t.Fatalf("A: %v, want the fdatasync error", err)
				}
				// B's commit was queued behind A's: after A's fdatasync
				// failed it must not run (it could succeed without the
				// pages the kernel dropped), and B fails.
				for i := 0; i < 2; i++ {
					select {
					case err := <-errB:
						if !errors.Is(err, ErrUnhealthy) {
							t.Fatalf("B: %v, want ErrUnhealthy: its data was cut with A's", err)
						}
					case <-ffs.entered:
						t.Fatal("an fdatasync ran after a failed one")
					}
				}
				for p := range want {
					if i, _ := s.Partition("e", p); i.Written != before[p].Written || i.Durable != before[p].Durable {
						t.Fatalf("partition %d not rolled back: %+v (was %+v)", p, i, before[p])
					}
				}
				checkParts(t, s, "e", want)
			}
			ffs.mu.Lock()
			ffs.gate = nil
			ffs.mu.Unlock()
			s.Close()

			s2 := openT(t, Options{Dir: dir})
			for p, w := range want {
				got := readAll(t, s2, "e", p)
				if fail {
					if !bytes.Equal(got, w) {
						t.Fatalf("partition %d after reopen: %d bytes, want exactly the %d acknowledged", p, len(got), len(w))
					}
					continue
				}
				if !bytes.HasPrefix(got, w) || !bytes.HasSuffix(got, []byte("batch B")) ||
					(p == 0) != bytes.Contains(got[len(w):], []byte("batch A")) {
					t.Fatalf("partition %d after reopen lacks its acknowledged batches: %q", p, got[len(w):])
				}
			}
		})
	}
}
