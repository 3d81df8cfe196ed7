package atomicfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// faultFS fails the step named by failAt, once, and otherwise is the OS.
type faultFS struct {
	failAt string
}

var errInjected = errors.New("injected failure")

func (f *faultFS) fail(step string) error {
	if f.failAt == step {
		return fmt.Errorf("%s: %w", step, errInjected)
	}
	return nil
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.fail("open"); err != nil {
		return nil, err
	}
	file, err := OS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return faultFile{file, f}, nil
}

func (f *faultFS) Rename(o, n string) error {
	if err := f.fail("rename"); err != nil {
		return err
	}
	return OS.Rename(o, n)
}

func (f *faultFS) Remove(name string) error { return OS.Remove(name) }

func (f *faultFS) SyncDir(dir string) error {
	if err := f.fail("syncdir"); err != nil {
		return err
	}
	return OS.SyncDir(dir)
}

type faultFile struct {
	File
	fs *faultFS
}

func (f faultFile) Write(b []byte) (int, error) {
	if err := f.fs.fail("write"); err != nil {
		n, _ := f.File.Write(b[:len(b)/2]) // a short write, as a full disk gives
		return n, err
	}
	return f.File.Write(b)
}

func (f faultFile) Sync() error {
	if err := f.fs.fail("sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f faultFile) Close() error {
	if err := f.fs.fail("close"); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

// TestFailureAtEachStep: whichever step fails, the error says so, the
// target holds its old content whole (or, once the rename happened, the new
// one) and no temporary file is left behind.
func TestFailureAtEachStep(t *testing.T) {
	old, next := []byte("old content\n"), []byte("new content, longer than the old\n")
	for _, tc := range []struct {
		step string
		want []byte
	}{
		{"open", old},
		{"write", old},
		{"sync", old},
		{"close", old},
		{"rename", old},
		{"syncdir", next}, // renamed already; only durability is in doubt
		{"", next},
	} {
		t.Run("fail "+tc.step, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			if err := os.WriteFile(path, old, 0o600); err != nil {
				t.Fatal(err)
			}
			err := WriteFileFS(&faultFS{failAt: tc.step}, path, next, 0o644)
			if tc.step == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v: want the injected failure, naming %s", err, path)
			}
			got, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("content %q, want %q", got, tc.want)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Fatalf("directory holds %d entries, want only the target: %v", len(ents), ents)
			}
		})
	}
}

func TestPermAndNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new")
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644 whatever the umask", st.Mode().Perm())
	}
}

func TestMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "f")
	err := WriteFile(path, []byte("x"), 0o644)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v: want ErrNotExist naming %s", err, path)
	}
}

// The crash test runs this test binary again as a writer that replaces
// the file over and over, alternating two contents of many pages each, and
// kills it with SIGKILL while it writes.
const crashEnv = "ATOMICFILE_CRASH_WRITER"

func content(gen int) []byte {
	return bytes.Repeat([]byte{byte('a' + gen%26)}, 1<<20)
}

func TestCrashWriter(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("the writer half of TestCrashLeavesWholeContent")
	}
	for gen := 1; ; gen++ {
		if err := WriteFile(path, content(gen), 0o644); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(gen)
	}
}

// TestCrashLeavesWholeContent kills a writer at varying points of its
// write and checks, after each kill, that the file holds one generation's
// content whole. Without the temporary file and rename (an in-place
// os.WriteFile) this fails: the kill lands between truncate and the last
// page most of the time.
func TestCrashLeavesWholeContent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts writer processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := WriteFile(path, content(0), 0o644); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 10; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a number of completed writes that varies by round,
		// so the kill lands at different steps of the next one.
		lines := bufio.NewScanner(out)
		for n := 0; n < 1+round%4 && lines.Scan(); n++ {
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1<<20 || !bytes.Equal(got, bytes.Repeat(got[:1], len(got))) {
			t.Fatalf("round %d: file holds %d bytes, not one whole generation", round, len(got))
		}
	}
}
