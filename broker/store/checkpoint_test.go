package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// encodeCheckpointV3 encodes c as the store wrote format 3 before format
// 4 (spans of 20 bytes: segment index, offset, time), to make format-3
// directories for the upgrade tests.
func encodeCheckpointV3(c *checkpoint) []byte {
	return encodeCheckpointAs(c, formatV3, func(b []byte, l *ckptSpans) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(l.n))
		l.each(func(_ int, k segSpan) error {
			b = binary.BigEndian.AppendUint32(b, k.seg)
			b = binary.BigEndian.AppendUint64(b, uint64(k.off))
			b = binary.BigEndian.AppendUint64(b, uint64(k.ms))
			return nil
		})
		return b
	})
}

// ckptSpansOf lists the spans of every partition of c, by pid.
func ckptSpansOf(t *testing.T, c *checkpoint) map[uint32][]segSpan {
	t.Helper()
	out := map[uint32][]segSpan{}
	for _, p := range c.parts {
		if err := p.spans.each(func(_ int, k segSpan) error {
			out[p.pid] = append(out[p.pid], k)
			return nil
		}); err != nil {
			t.Fatalf("spans of pid %d: %v", p.pid, err)
		}
	}
	return out
}

// format3Dir fills a store in dir with several sealed segments (and a
// partition cut back into one of them), closes it and rewrites its
// checkpoint in format 3. It returns the data, the answers of
// OffsetForTime at a series of times, and the format-3 checkpoint.
func format3Dir(t *testing.T, opts Options) (map[int][]byte, map[string]int64, []byte) {
	t.Helper()
	s := openT(t, opts)
	start := time.Now()
	want := fill(t, s, "f", 4, 150)
	// A fence into a sealed segment, so a span ends where a later one
	// does not begin.
	w := want[1]
	cut := 0
	for cut < len(w)/3 {
		cut += RecordHeaderLen + int(binary.BigEndian.Uint32(w[cut:]))
	}
	if err := s.TruncatePartition("f", 1, int64(cut)); err != nil {
		t.Fatal(err)
	}
	want[1] = append([]byte(nil), w[:cut]...)
	for i := 0; i < 40; i++ {
		a := mustAppend(t, s, "f", 1, fmt.Sprintf("after-cut-%d", i))
		want[1] = AppendRecord(want[1], a[0].ID, 0, []byte(fmt.Sprintf("after-cut-%d", i)))
	}
	if n := countSegs(s); n < 6 {
		t.Fatalf("want several sealed segments, have %d", n)
	}
	times := offsetsForTimes(t, s, start)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(opts.Dir, ckptName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil || c.version != ckptFormat {
		t.Fatalf("checkpoint of format %d: %v", c.version, err)
	}
	v3 := encodeCheckpointV3(c)
	c3, err := decodeCheckpoint(v3)
	if err != nil || c3.version != formatV3 {
		t.Fatalf("format-3 checkpoint: %v", err)
	}
	spans := ckptSpansOf(t, c)
	if got := ckptSpansOf(t, c3); fmt.Sprint(got) != fmt.Sprint(spans) {
		t.Fatalf("format-3 spans %v, format-4 %v", got, spans)
	}
	if n := len(spans[0]); n < 4 {
		t.Fatalf("partition 0 has %d spans, want several", n)
	}
	if len(v3) <= len(b) {
		t.Fatalf("format-3 checkpoint %d bytes, format 4 %d", len(v3), len(b))
	}
	if err := os.WriteFile(path, v3, 0o644); err != nil {
		t.Fatal(err)
	}
	return want, times, v3
}

// offsetsForTimes answers OffsetForTime for every partition of "f" at
// times from start on.
func offsetsForTimes(t *testing.T, s *Store, start time.Time) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for p := 0; p < 4; p++ {
		for d := -time.Millisecond; d < time.Since(start)+2*time.Millisecond; d += time.Since(start)/40 + time.Microsecond {
			off, err := s.OffsetForTime("f", p, start.Add(d))
			if err != nil {
				t.Fatalf("OffsetForTime f-%d: %v", p, err)
			}
			out[fmt.Sprintf("%d@%d", p, start.Add(d).UnixMilli())] = off
		}
	}
	return out
}

// A directory whose checkpoint has format 3 (spans of 20 bytes) opens
// from that checkpoint without reading any log, serves the same records
// and the same OffsetForTime answers, and its next checkpoint is format 4
// (smaller), from which it opens again without reading any log.
func TestOpenFormat3Checkpoint(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 8 << 10, blockEntries: 4}
	want, times, v3 := format3Dir(t, opts)
	cfs := &countFS{}
	opts.FS = cfs
	check := func(s *Store) {
		t.Helper()
		checkEachRecord(t, s, "f", want)
		checkParts(t, s, "f", want)
		for k, off := range times {
			var p int
			var ms int64
			fmt.Sscanf(k, "%d@%d", &p, &ms)
			got, err := s.OffsetForTime("f", p, time.UnixMilli(ms))
			if err != nil || got != off {
				t.Fatalf("OffsetForTime f-%d at %d = %d, %v; want %d", p, ms, got, err, off)
			}
		}
	}
	s := openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("opening the format-3 directory read %d log bytes", n)
	}
	if rebuilds(s) != 0 {
		t.Fatalf("%d .idx rebuilt", rebuilds(s))
	}
	check(s)
	s.Close()
	b, _ := os.ReadFile(filepath.Join(dir, ckptName))
	if v := binary.BigEndian.Uint32(b[4:]); v != ckptFormat {
		t.Fatalf("checkpoint has format %d after a stop, want %d", v, ckptFormat)
	}
	if len(b) >= len(v3) {
		t.Fatalf("format-4 checkpoint %d bytes, format 3 %d", len(b), len(v3))
	}
	cfs.logRead.Store(0)
	s = openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("opening the upgraded directory read %d log bytes", n)
	}
	check(s)
	mustAppend(t, s, "f", 0, "new")
}

// crashCkptFS copies the whole data directory, as a crash would leave it,
// at one moment of the first checkpoint write: before anything is
// written to the temporary file, with half of it written, with all of
// it written but not renamed, or once renamed.
type crashCkptFS struct {
	OSFS
	dir, copyTo string
	at          string
	done        atomic.Bool
	err         error
}

var errCrashed = errors.New("crashed here")

func (c *crashCkptFS) snapshot() {
	c.err = os.CopyFS(c.copyTo, os.DirFS(c.dir))
}

func (c *crashCkptFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasPrefix(filepath.Base(name), "."+ckptName+".tmp") || c.done.Load() {
		return f, err
	}
	return &crashCkptFile{File: f, fs: c}, nil
}

func (c *crashCkptFS) Rename(o, n string) error {
	if c.at == "written, not renamed" && strings.HasPrefix(filepath.Base(o), "."+ckptName+".tmp") && c.done.CompareAndSwap(false, true) {
		c.snapshot()
		return errCrashed
	}
	err := c.OSFS.Rename(o, n)
	if c.at == "renamed" && filepath.Base(n) == ckptName && c.done.CompareAndSwap(false, true) {
		c.snapshot()
	}
	return err
}

type crashCkptFile struct {
	File
	fs *crashCkptFS
}

func (f *crashCkptFile) Write(b []byte) (int, error) {
	switch f.fs.at {
	case "nothing written":
		if f.fs.done.CompareAndSwap(false, true) {
			f.fs.snapshot()
			return 0, errCrashed
		}
	case "half written":
		if f.fs.done.CompareAndSwap(false, true) {
			n, _ := f.File.Write(b[:len(b)/2])
			f.fs.snapshot()
			return n, errCrashed
		}
	}
	return f.File.Write(b)
}

// A crash during the first format-4 checkpoint of an upgraded format-3
// directory leaves a store that opens and serves every acknowledged
// record (from the format-3 checkpoint and the log after it, or from the
// new checkpoint), and that then writes format 4.
func TestCrashDuringFirstFormat4Checkpoint(t *testing.T) {
	for _, at := range []string{"nothing written", "half written", "written, not renamed", "renamed"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 8 << 10, blockEntries: 4}
			want, _, _ := format3Dir(t, opts)
			crashDir := filepath.Join(t.TempDir(), "crashed")
			cfs := &crashCkptFS{dir: dir, copyTo: crashDir, at: at}
			opts.FS = cfs
			s := openT(t, opts)
			// Appends until a roll has written (or tried) a checkpoint. An
			// append acknowledged before the copy is owed; the one during
			// which it was taken may or may not be in it.
			n := 0
			for i := 0; !cfs.done.Load(); i++ {
				n++
				if i > 5000 {
					t.Fatal("no checkpoint written")
				}
				body := fmt.Sprintf("upgraded-%d-%s", i, strings.Repeat("u", 90))
				a := mustAppend(t, s, "f", i%4, body)
				if !cfs.done.Load() {
					want[i%4] = AppendRecord(want[i%4], a[0].ID, 0, []byte(body))
				}
			}
			s.Close()
			if n == 0 {
				t.Fatal("the checkpoint was written at start-up, not at a roll")
			}
			if cfs.err != nil {
				t.Fatalf("copy at the crash: %v", cfs.err)
			}
			c := openT(t, Options{Dir: crashDir, SegmentBytes: 8 << 10, blockEntries: 4})
			for p := 0; p < 4; p++ {
				checkPrefix(t, c, "f", p, want[p])
			}
			c.Close()
			b, _ := os.ReadFile(filepath.Join(crashDir, ckptName))
			if v := binary.BigEndian.Uint32(b[4:]); v != ckptFormat {
				t.Fatalf("checkpoint has format %d after a stop, want %d", v, ckptFormat)
			}
			cf := &countFS{}
			c = openT(t, Options{Dir: crashDir, SegmentBytes: 8 << 10, blockEntries: 4, FS: cf})
			if n := cf.logRead.Load(); n != 0 {
				t.Fatalf("clean start-up after the crash read %d log bytes", n)
			}
			for p := 0; p < 4; p++ {
				checkPrefix(t, c, "f", p, want[p])
			}
		})
	}
}

// checkPrefix checks that partition p of s holds want and at most one
// record more.
func checkPrefix(t *testing.T, s *Store, topic string, p int, want []byte) {
	t.Helper()
	got := readAll(t, s, topic, p)
	if !bytes.HasPrefix(got, want) {
		t.Fatalf("%s-%d: %d bytes that do not start with the %d acknowledged", topic, p, len(got), len(want))
	}
	if extra := got[len(want):]; len(extra) > 0 && RecordHeaderLen+int(binary.BigEndian.Uint32(extra)) != len(extra) {
		t.Fatalf("%s-%d: %d bytes after the acknowledged records, not one record", topic, p, len(extra))
	}
}

// FuzzDecodeCheckpoint feeds the checkpoint decoder damaged checkpoints
// whose crc was made to match: it must refuse or decode them without
// panicking, and a format-4 checkpoint it accepts encodes back to the
// same bytes.
func FuzzDecodeCheckpoint(f *testing.F) {
	dir := f.TempDir()
	s, err := Open(Options{Dir: dir, SegmentBytes: 4096, blockEntries: 4})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := s.Append(context.Background(), "z", i%3, []Message{{Body: []byte(fmt.Sprintf("m%d-%s", i, strings.Repeat("x", 60)))}}); err != nil {
			f.Fatal(err)
		}
	}
	s.Close()
	b, err := os.ReadFile(filepath.Join(dir, ckptName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[:len(b)-4], uint16(0), []byte{})
	f.Add(b[:len(b)-4], uint16(100), []byte{0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, body []byte, at uint16, patch []byte) {
		body = bytes.Clone(body)
		if len(body) > 0 {
			copy(body[int(at)%len(body):], patch)
		}
		b := binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
		c, err := decodeCheckpoint(b)
		if err != nil || c.version != ckptFormat {
			return
		}
		if got := encodeCheckpoint(c); !bytes.Equal(got, b) {
			t.Fatalf("decoded and encoded again: %d bytes, %d before", len(got), len(b))
		}
	})
}

// A checkpoint whose span bytes claim more than the file holds is refused
// without allocating what they claim.
func TestCheckpointHugeSpanLength(t *testing.T) {
	c := &checkpoint{nextPid: 1, segs: []ckptSeg{{start: 0, sealed: true}}, parts: []ckptPart{{key: pkey{"t", 0}, segs: []int64{0}, end: 10}}}
	c.parts[0].spans.add(segSpan{seg: 0, off: 5, ms: 7})
	b := encodeCheckpoint(c)
	if _, err := decodeCheckpoint(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	sp := c.parts[0].spans.b
	at := bytes.Index(b, append([]byte{0, 0, 0, 1, 0, 0, 0, byte(len(sp))}, sp...))
	if at < 0 {
		t.Fatal("span bytes not found")
	}
	binary.BigEndian.PutUint32(b[at+4:], 0xfffffff0)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodeCheckpoint(b)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errCkpt) {
		t.Fatalf("decode of a span length past the end: %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("decode allocated %d bytes", n)
	}
}

// readCkptPos returns the position of the checkpoint in dir, -1 when there
// is none.
func readCkptPos(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ckptName))
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return c.pos
}

// A roll's checkpoint is written off the writer goroutine: it appears
// without a Close, is never replaced by an older one written later, and
// once checkpoints are dropped (damage) none is written any more. The
// store reopens from it with every record.
func TestRollCheckpointWrittenInBackground(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentBytes: 16 << 10})
	want := fill(t, s, "bg", 3, 120)
	s.segMu.RLock()
	segs := len(s.segs)
	active := s.segs[len(s.segs)-1].start
	s.segMu.RUnlock()
	if segs < 3 {
		t.Fatalf("%d segments, want rolls", segs)
	}
	// The last roll's checkpoint is at the start of the active segment or
	// past it (its defines).
	deadline := time.Now().Add(10 * time.Second)
	for readCkptPos(t, dir) < active {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint at %d, want the last roll's (>= %d)", readCkptPos(t, dir), active)
		}
		time.Sleep(5 * time.Millisecond)
	}
	pos := readCkptPos(t, dir)
	// An older checkpoint, written late, does not replace it.
	if err := s.storeCheckpoint(&ckptJob{c: &checkpoint{pos: 0}, seq: 1}); err != nil {
		t.Fatal(err)
	}
	if got := readCkptPos(t, dir); got != pos {
		t.Fatalf("checkpoint at %d after an older one was stored, want %d", got, pos)
	}
	s.Close()
	s = openT(t, Options{Dir: dir, SegmentBytes: 16 << 10})
	for p, w := range want {
		if got := readAll(t, s, "bg", p); !bytes.Equal(got, w) {
			t.Fatalf("partition %d after reopening: %d bytes, want %d", p, len(got), len(w))
		}
	}
	// Checkpoints off: a job built before is not written.
	s.dropCheckpoint()
	if err := s.storeCheckpoint(&ckptJob{c: &checkpoint{pos: 0}, seq: s.ckpt.written + 100}); err != nil {
		t.Fatal(err)
	}
	if got := readCkptPos(t, dir); got != -1 {
		t.Fatalf("checkpoint at %d after checkpoints were dropped, want none", got)
	}
}

// holdIdxFS holds every write to one .idx file (by name) while held is
// set, and says so on in.
type holdIdxFS struct {
	OSFS
	name string
	held atomic.Bool
	in   chan struct{}
	open chan struct{}
}

type holdIdxFile struct {
	File
	fs *holdIdxFS
}

func (h *holdIdxFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := h.OSFS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != h.name {
		return f, err
	}
	return holdIdxFile{f, h}, nil
}

func (f holdIdxFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.held.Load() {
		select {
		case f.fs.in <- struct{}{}:
		default:
		}
		<-f.fs.open
	}
	return f.File.WriteAt(b, off)
}

// A roll seals the segment it leaves (its tails into the .idx, the
// footer, the spans) off the writer goroutine: while the sealed
// segment's .idx cannot be written, appends after the roll are
// answered, and every record, those whose index entries are not yet in
// the .idx included, is read back. Once the sealing is done the roll's
// checkpoint records the segment sealed, and the store reopens from it
// with every record.
func TestRollSealsOffTheWriter(t *testing.T) {
	dir := t.TempDir()
	hfs := &holdIdxFS{name: strings.TrimSuffix(segName(0), segSuffix) + idxSuffix, in: make(chan struct{}, 1), open: make(chan struct{})}
	opts := Options{Dir: dir, FS: hfs, SegmentBytes: 16 << 10}
	s := openT(t, opts)
	hfs.held.Store(true)
	defer func() {
		if hfs.held.CompareAndSwap(true, false) {
			close(hfs.open)
		}
	}()
	const parts = 20
	want := map[int][]byte{}
	segments := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segs)
	}
	done := make(chan error, 1)
	go func() {
		// Until the first roll, then a few rounds more (well below a
		// second roll, which waits for the first sealing).
		more := -1
		for i := 0; more != 0; i++ {
			for p := 0; p < parts; p++ {
				body := fmt.Sprintf("seal-r%d-p%d-%s", i, p, strings.Repeat("s", (i*7+p)%200))
				a, err := s.Append(context.Background(), "seal", p, []Message{{Body: []byte(body)}})
				if err != nil {
					done <- err
					return
				}
				want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
			}
			if more > 0 {
				more--
			} else if more < 0 && segments() > 1 {
				more = 3
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("appends after a roll waited for the sealed segment's .idx to be written")
	}
	select {
	case <-hfs.in:
	case <-time.After(20 * time.Second):
		t.Fatal("nothing wrote the sealed segment's .idx")
	}
	if segments() != 2 {
		t.Fatalf("%d segments, want 2", segments())
	}
	s.segMu.RLock()
	first, active := s.segs[0], s.segs[1].start
	s.segMu.RUnlock()
	if first.isSealed() {
		t.Fatal("the first segment is sealed while its .idx writes are held")
	}
	for p := 0; p < parts; p++ {
		if got := readAll(t, s, "seal", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("partition %d while sealing: %d bytes, want %d", p, len(got), len(want[p]))
		}
		if off, err := s.OffsetForTime("seal", p, time.Unix(0, 0)); err != nil || off != 0 {
			t.Fatalf("partition %d: OffsetForTime(0) = %d, %v while sealing", p, off, err)
		}
	}
	hfs.held.Store(false)
	close(hfs.open)
	deadline := time.Now().Add(20 * time.Second)
	for readCkptPos(t, dir) < active {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint at %d, want the roll's (>= %d)", readCkptPos(t, dir), active)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !first.isSealed() {
		t.Fatal("the first segment is not sealed after its roll's checkpoint")
	}
	for p := 0; p < parts; p++ {
		if got := readAll(t, s, "seal", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("partition %d after sealing: %d bytes, want %d", p, len(got), len(want[p]))
		}
	}
	// The roll's checkpoint (not Close's) is what the next start-up uses.
	b, err := os.ReadFile(filepath.Join(dir, ckptName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.segs) != 2 || !c.segs[0].sealed || c.segs[1].sealed {
		t.Fatalf("the roll's checkpoint has segments %+v, want the first sealed, the second active", c.segs)
	}
	for _, cp := range c.parts {
		if cp.spans.n != 1 || len(cp.blocks) != 0 {
			t.Fatalf("partition %d in the roll's checkpoint: %d spans, %d blocks; want 1 span and no block", cp.pid, cp.spans.n, len(cp.blocks))
		}
	}
	s.Close()
	s = openT(t, Options{Dir: dir, SegmentBytes: 16 << 10})
	for p := 0; p < parts; p++ {
		if got := readAll(t, s, "seal", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("partition %d after reopening: %d bytes, want %d", p, len(got), len(want[p]))
		}
	}
}

// holdSyncFS holds every fdatasync of one file (by name) while held is
// set, and says so on in.
type holdSyncFS struct {
	OSFS
	name string
	held atomic.Bool
	in   chan struct{}
	open chan struct{}
}

type holdSyncFile struct {
	File
	fs *holdSyncFS
}

func (h *holdSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := h.OSFS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != h.name {
		return f, err
	}
	return holdSyncFile{f, h}, nil
}

func (f holdSyncFile) Datasync() error {
	if f.fs.held.Load() {
		select {
		case f.fs.in <- struct{}{}:
		default:
		}
		<-f.fs.open
	}
	return f.File.Datasync()
}

// The checkpoint retention asks for before it removes files is written off
// the writer goroutine: while it cannot be written (the active segment's
// .idx, which it makes durable first, holds its fdatasync), appends are
// answered; the request is answered only once the checkpoint is on disk,
// and the store reopens from it with every record.
func TestRetentionCheckpointOffTheWriter(t *testing.T) {
	dir := t.TempDir()
	hfs := &holdSyncFS{name: strings.TrimSuffix(segName(0), segSuffix) + idxSuffix, in: make(chan struct{}, 1), open: make(chan struct{})}
	s := openT(t, Options{Dir: dir, FS: hfs})
	defer func() {
		if hfs.held.CompareAndSwap(true, false) {
			close(hfs.open)
		}
	}()
	const parts = 8
	want := map[int][]byte{}
	appendRound := func(round int) error {
		for p := 0; p < parts; p++ {
			body := fmt.Sprintf("ckpt-r%d-p%d", round, p)
			a, err := s.Append(context.Background(), "ckpt", p, []Message{{Body: []byte(body)}})
			if err != nil {
				return err
			}
			want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
		}
		return nil
	}
	if err := appendRound(0); err != nil {
		t.Fatal(err)
	}
	hfs.held.Store(true)
	ck := &request{kind: reqCheckpoint}
	if err := s.enqueue(context.Background(), ck); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hfs.in:
	case <-time.After(20 * time.Second):
		t.Fatal("the checkpoint did not make the active segment's .idx durable")
	}
	appended := make(chan error, 1)
	go func() { appended <- appendRound(1) }()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("appends waited for retention's checkpoint to be written")
	}
	select {
	case <-ck.done:
		t.Fatal("the checkpoint request was answered before its checkpoint was written")
	default:
	}
	pos := readCkptPos(t, dir)
	hfs.held.Store(false)
	close(hfs.open)
	select {
	case <-ck.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the checkpoint request was not answered once the .idx could be synced")
	}
	if ck.err != nil {
		t.Fatal(ck.err)
	}
	if got := readCkptPos(t, dir); got <= pos {
		t.Fatalf("checkpoint at %d after the request, %d before", got, pos)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, Options{Dir: dir})
	for p := 0; p < parts; p++ {
		if got := readAll(t, s, "ckpt", p); !bytes.Equal(got, want[p]) {
			t.Fatalf("partition %d after reopening: %d bytes, want %d", p, len(got), len(want[p]))
		}
	}
}

// A checkpoint is encoded into one buffer of its exact size (ckptSize), not
// grown by doubling: at 10,000 partitions each checkpoint's encoding took a
// dozen arrays and their copies.
func TestCheckpointEncodedInOneBuffer(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, SegmentBytes: 4096, blockEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		if _, err := s.Append(context.Background(), fmt.Sprintf("t%d", i%2), i%7, []Message{{Body: []byte(fmt.Sprintf("m%d-%s", i, strings.Repeat("x", 60)))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ckptName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	got := encodeCheckpoint(c)
	if !bytes.Equal(got, b) {
		t.Fatalf("encoded again: %d bytes, %d in the file", len(got), len(b))
	}
	if cap(got) != len(got) {
		t.Fatalf("encoded %d bytes into a buffer of %d; want one buffer of the exact size", len(got), cap(got))
	}
}
