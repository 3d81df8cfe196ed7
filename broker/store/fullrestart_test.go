package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"metaq/internal/diskfill"
	"metaq/internal/testutil"
)

// Seed 941024 of the soak: a site restarted while its disk was full
// exited ("open store: write index ...: no space left on device"), because
// recovery had to rebuild a segment's index (a failed sealing had dropped
// the checkpoint) and could not write it. These tests build that state on
// a small tmpfs of their own: a store's log, no checkpoint, its .idx files
// cut to their header (so the rebuild needs pages the disk no longer
// has), and the rest of the filesystem taken by a ballast file.

const fullDiskChildEnv = "METAQ_STORE_FULLDISK_CHILD"

const fullDiskParts = 3

// fullDiskOptions are the store's options in these tests (the child
// process of TestKilledBeforeHeldIndexIsWrittenRecovers uses them too):
// segments of about 280 chunks, blocks of 8, so a segment's index needs
// more than the one page its .idx keeps.
func fullDiskOptions(dir string) Options {
	return Options{Dir: dir, SegmentBytes: 64 << 10, blockEntries: 8, ScrubDelay: time.Hour}
}

// fullDiskRestart makes the state described above and returns the
// store's options, the bytes of each partition, and a function that frees
// the disk. It skips without root (mount).
func fullDiskRestart(t *testing.T) (Options, map[int][]byte, func()) {
	t.Helper()
	mnt := t.TempDir()
	diskfill.MountTmpfs(t, mnt, 4<<20)
	opts := fullDiskOptions(filepath.Join(mnt, "store"))
	s := openT(t, opts)
	want := fill(t, s, "fd", fullDiskParts, 400)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	idx := logFiles(t, opts.Dir, idxSuffix)
	if len(idx) < 3 {
		t.Fatalf("%d segments, want at least 3", len(idx))
	}
	// What a sealing that failed at a disk-full roll leaves for the next
	// start-up (finding 17): no checkpoint, so the whole log is re-indexed.
	if err := os.Remove(filepath.Join(opts.Dir, ckptName)); err != nil {
		t.Fatal(err)
	}
	for _, f := range idx {
		if err := os.Truncate(f, idxHeaderLen); err != nil {
			t.Fatal(err)
		}
	}
	ballast := filepath.Join(mnt, "ballast")
	testutil.FillDisk(t, ballast)
	return opts, want, func() {
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
	}
}

// waitIndexWritten waits until s holds no index in memory, and checks
// that every segment but the active one is sealed and no roll happened
// meanwhile (the index was written because the disk had room, not at a
// roll).
func waitIndexWritten(t *testing.T, s *Store, segs int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.IndexPending() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("index still held in memory 30 s after the disk had room: %+v", s.IndexPending())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tab := *s.segTab.Load()
	if len(tab) != segs {
		t.Fatalf("%d segments, want %d: the log rolled", len(tab), segs)
	}
	for _, g := range tab[:len(tab)-1] {
		if !g.isSealed() {
			t.Fatalf("segment %s not sealed", g.path)
		}
	}
}

// checkIndexOnDisk reads every partition through the .idx files alone:
// the summaries in memory are dropped, so each lookup in a sealed segment
// reads its footer and blocks from the file and checks them (header too).
func checkIndexOnDisk(t *testing.T, s *Store, want map[int][]byte) {
	t.Helper()
	tab := *s.segTab.Load()
	for _, g := range tab[:len(tab)-1] {
		h := make([]byte, idxHeaderLen)
		if _, err := g.idx.ReadAt(h, 0); err != nil || !bytes.Equal(h, idxHeader(g.start)) {
			t.Fatalf("%s: header %x (%v)", idxPathOf(g.path), h, err)
		}
		s.sums.drop(g)
	}
	for p := 0; p < fullDiskParts; p++ {
		if got := readAllBounded(t, s, "fd", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("fd-%d: %d bytes read through the written index, want %d", p, len(got), len(want[p]))
		}
	}
	if segs, _ := s.sums.size(); segs == 0 {
		t.Fatal("no footer was read from disk")
	}
}

// TestRestartOnFullDiskOpensAndServesReads: the store opens on the full
// disk with the rebuilt index in memory, serves every record, says why it
// refuses appends (Health) and what index it holds (IndexPending), and
// refuses appends. Before, Open failed.
func TestRestartOnFullDiskOpensAndServesReads(t *testing.T) {
	opts, want, _ := fullDiskRestart(t)
	var logb testutil.SyncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logb, nil))
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	defer s.Close()
	if h := s.Health(); !errors.Is(h, ErrNoSpace) {
		t.Fatalf("Health on a full disk = %v, want ErrNoSpace", h)
	}
	ip := s.IndexPending()
	if ip == nil || ip.Segments == 0 || ip.Entries == 0 || !strings.Contains(ip.Err, "no space left on device") {
		t.Fatalf("IndexPending = %+v, want segments held in memory for lack of space", ip)
	}
	if !strings.Contains(logb.String(), "no room to write the rebuilt index") {
		t.Fatalf("no log line about the index held in memory:\n%s", logb.String())
	}
	tab := *s.segTab.Load()
	if tab[0].isSealed() {
		t.Fatal("the first segment is sealed although its index could not be written")
	}
	for p := 0; p < fullDiskParts; p++ {
		if got := readAllBounded(t, s, "fd", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("fd-%d: %d bytes read, want %d", p, len(got), len(want[p]))
		}
		info, err := s.Partition("fd", p)
		if err != nil || info.Max != int64(len(want[p])) {
			t.Fatalf("fd-%d: %+v, %v", p, info, err)
		}
		// A lookup by time goes through the blocks held in memory.
		if off, err := s.OffsetForTime("fd", p, time.UnixMilli(0)); err != nil || off != 0 {
			t.Fatalf("fd-%d: OffsetForTime(0) = %d, %v", p, off, err)
		}
	}
	_, err = s.Append(context.Background(), "fd", 0, []Message{{Body: make([]byte, 16<<10)}})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append on the full disk: %v, want ErrNoSpace", err)
	}
	if s.IndexPending() == nil {
		t.Fatal("the index held in memory counts as written while the disk is still full")
	}
}

// TestIndexHeldInMemoryIsWrittenWhenRoomReturns: once the disk has room
// (the broker's write gate probes it), the index recovery held in memory is
// written, headers and footers included, without waiting for a roll; the
// files read back on their own; appends go on, and a restart finds
// everything.
func TestIndexHeldInMemoryIsWrittenWhenRoomReturns(t *testing.T) {
	opts, want, free := fullDiskRestart(t)
	s := openT(t, opts)
	if s.IndexPending() == nil {
		t.Fatal("no index held in memory after a start-up on a full disk")
	}
	segs := len(*s.segTab.Load())
	if err := s.ProbeSpace(t.Context()); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ProbeSpace on the full disk: %v", err)
	}
	free()
	if err := s.ProbeSpace(t.Context()); err != nil {
		t.Fatalf("ProbeSpace once the disk has room: %v", err)
	}
	waitIndexWritten(t, s, segs)
	checkIndexOnDisk(t, s, want)
	for p := 0; p < fullDiskParts; p++ {
		body := fmt.Sprintf("after-%d", p)
		a := mustAppend(t, s, "fd", p, body)
		if a[0].Offset != int64(len(want[p])) {
			t.Fatalf("fd-%d: append at %d, want %d", p, a[0].Offset, len(want[p]))
		}
		want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health once the disk has room: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := openT(t, opts)
	checkParts(t, s2, "fd", want)
	if err := s2.Health(); err != nil || s2.IndexPending() != nil {
		t.Fatalf("after a restart with room: Health %v, IndexPending %+v", err, s2.IndexPending())
	}
}

// TestKilledBeforeHeldIndexIsWrittenRecovers: a store that opened on the
// full disk is killed (SIGKILL, a process of its own) while its index is
// still held in memory; the next start-up, on the still full disk, serves
// everything again, and once there is room writes the index.
func TestKilledBeforeHeldIndexIsWrittenRecovers(t *testing.T) {
	opts, want, free := fullDiskRestart(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fullDiskChildEnv+"="+opts.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	var got string
	select {
	case got = <-line:
	case <-time.After(60 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	var pending int
	var lens [fullDiskParts]int
	if _, err := fmt.Sscanf(got, "ready %d %d %d %d", &pending, &lens[0], &lens[1], &lens[2]); err != nil {
		t.Fatalf("child said %q (%v); stderr:\n%s", got, err, stderr.String())
	}
	for p := range lens {
		if lens[p] != len(want[p]) {
			t.Fatalf("child read %d bytes of fd-%d, want %d", lens[p], p, len(want[p]))
		}
	}
	if pending == 0 {
		t.Fatal("the child held no index in memory: nothing was tested")
	}
	s := openT(t, opts)
	checkParts(t, s, "fd", want)
	if s.IndexPending() == nil || !errors.Is(s.Health(), ErrNoSpace) {
		t.Fatalf("after the kill, on the full disk: IndexPending %+v, Health %v", s.IndexPending(), s.Health())
	}
	free()
	if err := s.ProbeSpace(t.Context()); err != nil {
		t.Fatalf("ProbeSpace once the disk has room: %v", err)
	}
	waitIndexWritten(t, s, len(*s.segTab.Load()))
	checkIndexOnDisk(t, s, want)
}

// fullDiskChild opens the store at dir (on the full disk), reads every
// partition, says so on stdout, and waits to be killed.
func fullDiskChild(dir string) {
	s, err := Open(fullDiskOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	pending := 0
	if ip := s.IndexPending(); ip != nil {
		pending = ip.Segments
	}
	fmt.Print("ready ", pending)
	for p := 0; p < fullDiskParts; p++ {
		n := 0
		info, err := s.Partition("fd", p)
		for off := info.Min; err == nil && off < info.Max; {
			var b []byte
			if b, err = s.Read("fd", p, off, 1<<20); err == nil && len(b) == 0 {
				err = fmt.Errorf("read at %d returned nothing", off)
			}
			n += len(b)
			off += int64(len(b))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child read:", err)
			os.Exit(4)
		}
		fmt.Print(" ", n)
	}
	fmt.Println()
	time.Sleep(time.Hour) // killed by the parent
}

// fullFS fails, while full is set, every write into a .log or .idx file
// with ENOSPC after writing half of it, as a full disk does.
type fullFS struct {
	OSFS
	full atomic.Bool
}

type fullFile struct {
	File
	fs *fullFS
}

func (f *fullFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil || !(strings.HasSuffix(name, segSuffix) || strings.HasSuffix(name, idxSuffix)) {
		return file, err
	}
	return fullFile{file, f}, nil
}

func (f fullFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.full.Load() {
		n, _ := f.File.WriteAt(b[:len(b)/2], off)
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(b, off)
}

// TestRestartOnFullDiskRestatesPartitionsLater: on a disk too full for
// recovery's last write, the defines that restate every partition in the
// active segment, the store opens all the same (before, Open failed at the
// index first); the defines are written before the first append once
// there is room, and a restart knows every partition.
func TestRestartOnFullDiskRestatesPartitionsLater(t *testing.T) {
	dir := t.TempDir()
	opts := fullDiskOptions(dir)
	s := openT(t, opts)
	want := fill(t, s, "fd", fullDiskParts, 400)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, ckptName)); err != nil {
		t.Fatal(err)
	}
	logs := logFiles(t, dir, segSuffix)
	last := logs[len(logs)-1]
	before, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	ffs := &fullFS{}
	ffs.full.Store(true)
	opts.FS = ffs
	s = openT(t, opts)
	if after, _ := os.Stat(last); after.Size() != before.Size() {
		t.Fatalf("the active segment grew by %d bytes on a full disk", after.Size()-before.Size())
	}
	if !s.w.needDefines {
		t.Fatal("the defines recovery could not write are not pending")
	}
	if !errors.Is(s.Health(), ErrNoSpace) || s.IndexPending() == nil {
		t.Fatalf("on a full disk: Health %v, IndexPending %+v", s.Health(), s.IndexPending())
	}
	checkParts(t, s, "fd", want)
	segs := len(*s.segTab.Load())
	ffs.full.Store(false)
	if err := s.ProbeSpace(t.Context()); err != nil {
		t.Fatalf("ProbeSpace once the disk has room: %v", err)
	}
	waitIndexWritten(t, s, segs)
	body := "after-0"
	a := mustAppend(t, s, "fd", 0, body)
	want[0] = AppendRecord(want[0], a[0].ID, 0, []byte(body))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The active segment restates every partition after what it held.
	f, err := OSFS{}.OpenFile(last, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	r := newSegReader(f, st.Size())
	defined := map[int]bool{}
	for x := before.Size(); x < st.Size(); {
		h, payload, n, err := r.entryAt(x)
		if err != nil {
			t.Fatalf("%s at %d: %v", last, x, err)
		}
		if h.typ == entryDefine {
			if topic, num, err := decodeDefine(payload); err == nil && topic == "fd" {
				defined[num] = true
			}
		}
		x += int64(n)
	}
	if len(defined) != fullDiskParts {
		t.Fatalf("partitions restated after recovery: %v, want all %d", defined, fullDiskParts)
	}
	opts.FS = nil
	checkParts(t, openT(t, opts), "fd", want)
}
