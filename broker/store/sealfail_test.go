package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"metaq/internal/clock"
	"metaq/internal/testutil"
)

// idxFullFS refuses, while full is set, every write into the entries of
// a .idx file (at or past its header) with ENOSPC after writing half of
// it, as a full disk does; a new segment's .idx header still goes in, so
// the roll itself succeeds and only the sealing of the segment it left
// fails (seed 941009 of the soak).
type idxFullFS struct {
	OSFS
	full    atomic.Bool
	refused atomic.Int32
}

type idxFullFile struct {
	File
	fs *idxFullFS
}

func (f *idxFullFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, idxSuffix) {
		return file, err
	}
	return idxFullFile{file, f}, nil
}

func (f idxFullFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.full.Load() && off >= idxHeaderLen {
		f.fs.refused.Add(1)
		n, _ := f.File.WriteAt(b[:len(b)/2], off)
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(b, off)
}

// readAllBounded is readAll for a read that might not return: a read that
// spins (seed 941009: 25 gets spinning in chunks) fails the test binary
// with a panic, which also stops the spinning goroutine, rather than
// leaving it to grow its output until the machine runs out of memory.
func readAllBounded(t *testing.T, s *Store, topic string, part int) []byte {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var out []byte
		info, err := s.Partition(topic, part)
		for off := info.Min; err == nil && off < info.Max; {
			var b []byte
			b, err = s.Read(topic, part, off, 1<<20)
			if err == nil && len(b) == 0 {
				err = fmt.Errorf("read at %d returned nothing", off)
			}
			out = append(out, b...)
			off += int64(len(b))
		}
		ch <- result{out, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading %s-%d: %v", topic, part, r.err)
		}
		return r.b
	case <-time.After(30 * time.Second):
		panic(fmt.Sprintf("reading %s-%d did not return in 30 s: the read spins", topic, part))
	}
}

// A roll whose sealing cannot write the sealed segment's .idx (the disk
// full: seed 941009) leaves that segment's blocks in memory. The next roll
// seals it first; until that succeeds the active segment grows. Before,
// the next roll went ahead: the later segment became a span while the
// unsealed segment's blocks stayed ahead of everything in the partition's
// list of blocks, and every read from before them on spun in chunks for
// ever. Here partitions are also cut back before the failed sealing (in
// the segment whose sealing fails, as a former master rejoining does) and
// after it (into its blocks still in memory); every record not cut back is
// read back, and again after reopening.
func TestFailedSealIsRetriedAtTheNextRoll(t *testing.T) {
	dir := t.TempDir()
	ffs := &idxFullFS{}
	const segBytes = 8 << 10
	var logb testutil.SyncBuffer
	s := openT(t, Options{Dir: dir, FS: ffs, SegmentBytes: segBytes, Logger: slog.New(slog.NewTextHandler(&logb, nil))})
	const parts = 3
	want := map[int][]byte{}
	offs := map[int][]int64{} // each partition's append offsets
	round := 0
	appendRound := func() {
		t.Helper()
		for p := 0; p < parts; p++ {
			body := fmt.Sprintf("r%d-p%d-%s", round, p, strings.Repeat("x", 40+(round*7+p)%60))
			a := mustAppend(t, s, "sf", p, body)
			if a[0].Offset != int64(len(want[p])) {
				t.Fatalf("partition %d: append at %d, want %d", p, a[0].Offset, len(want[p]))
			}
			offs[p] = append(offs[p], a[0].Offset)
			want[p] = AppendRecord(want[p], a[0].ID, 0, []byte(body))
		}
		round++
	}
	segments := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segs)
	}
	cut := func(p int, k int) {
		t.Helper()
		off := offs[p][len(offs[p])-k]
		if err := s.TruncatePartition("sf", p, off); err != nil {
			t.Fatalf("cut %d back to %d: %v", p, off, err)
		}
		want[p] = want[p][:off]
		for len(offs[p]) > 0 && offs[p][len(offs[p])-1] >= off {
			offs[p] = offs[p][:len(offs[p])-1]
		}
	}
	check := func(when string) {
		t.Helper()
		for p := 0; p < parts; p++ {
			if got := readAllBounded(t, s, "sf", p); !bytes.Equal(got, want[p]) {
				t.Fatalf("%s: partition %d reads %d bytes, want %d", when, p, len(got), len(want[p]))
			}
		}
	}

	// The first segment rolls and is sealed as usual; in the second,
	// partition 1 is cut back (its last records dropped).
	for segments() < 2 {
		appendRound()
	}
	for i := 0; i < 5; i++ {
		appendRound()
	}
	cut(1, 3)
	appendRound()

	// The second segment's sealing cannot write its .idx.
	ffs.full.Store(true)
	for segments() < 3 {
		appendRound()
	}
	deadline := time.Now().Add(20 * time.Second)
	for ffs.refused.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sealing never wrote the sealed segment's .idx")
		}
		time.Sleep(time.Millisecond)
	}
	// The .idx stays refused while partition 2 is cut back into the
	// unsealed segment's blocks: with room, the first append after the
	// refusal would start the sealing again (retrySeal) and the blocks
	// might be written out before the test looks at them.
	s.segMu.RLock()
	failed := s.segs[1]
	s.segMu.RUnlock()
	appendRound()
	check("after the failed sealing")

	// Partition 2 is cut back into the unsealed segment's blocks, which are
	// still in memory (a fence waits for the sealing, which failed).
	s.mu.RLock()
	p2 := s.parts[pkey{"sf", 2}]
	s.mu.RUnlock()
	p2.mu.Lock()
	var inFailed int64 = -1
	for _, b := range p2.blocks {
		if b.g == failed && b.n > 1 {
			inFailed = b.mem.ents[1].off
		}
	}
	p2.mu.Unlock()
	if inFailed < 0 {
		t.Fatal("partition 2 has no block of two chunks or more in memory in the unsealed segment")
	}
	k := 0
	for k < len(offs[2]) && offs[2][len(offs[2])-1-k] >= inFailed {
		k++
	}
	cut(2, k)
	appendRound()
	check("after cutting back into the unsealed segment")

	ffs.full.Store(false) // room again
	// Two more rolls: the first one seals the failed segment first, if
	// the retry on room again has not already.
	for segments() < 5 {
		appendRound()
	}
	check("after two more rolls")
	if !failed.isSealed() {
		t.Fatal("the segment whose sealing failed is not sealed after the next rolls")
	}
	// Read from what the sealing wrote, not rebuilt from the log after a
	// block failed its checks (the shortened block's crc).
	if l := logb.String(); strings.Contains(l, "index block damaged") || !strings.Contains(l, "sealed the log segment's index after its sealing had failed") {
		t.Fatalf("want the segment sealed on the second try and no damaged index block; the log:\n%s", l)
	}
	for p := 0; p < parts; p++ {
		if off, err := s.OffsetForTime("sf", p, time.Unix(0, 0)); err != nil || off != 0 {
			t.Fatalf("partition %d: OffsetForTime(0) = %d, %v", p, off, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ckptName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a checkpoint was written after the failed sealing (%v): the next start-up would not re-index the log", err)
	}
	s = openT(t, Options{Dir: dir, SegmentBytes: segBytes})
	check("after reopening")
	appendRound()
	check("after appending to the reopened store")
}

// A read that finds no chunk at its offset in the block the index points
// it to (the index is not contiguous: here the first chunks of the active
// segment are taken out of the partition's tail, so the span of the sealed
// segment before them is the last unit starting below them) ends: with
// the chunks before the gap, or with an error saying the index is damaged
// when there are none (the sealed segment's index rebuilt from the log
// cannot cover the gap either). Before, chunks took the span's last chunk
// again and again without moving on, and the read never returned (seed
// 941009, where a failed sealing left such an index).
func TestReadEndsWhereTheIndexHasNoChunk(t *testing.T) {
	s := openT(t, Options{SegmentBytes: 4096})
	var want []byte
	var offs []int64
	add := func() {
		body := fmt.Sprintf("gap-%d-%s", len(offs), strings.Repeat("g", 50))
		a := mustAppend(t, s, "gap", 0, body)
		offs = append(offs, a[0].Offset)
		want = AppendRecord(want, a[0].ID, 0, []byte(body))
	}
	segments := func() []*segment {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return slices.Clone(s.segs)
	}
	for len(segments()) < 2 {
		add()
	}
	for i := 0; i < 5; i++ {
		add()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !segments()[0].isSealed() {
		if time.Now().After(deadline) {
			t.Fatal("the first segment was never sealed")
		}
		time.Sleep(time.Millisecond)
	}
	s.mu.RLock()
	p := s.parts[pkey{"gap", 0}]
	s.mu.RUnlock()
	p.mu.Lock()
	if p.spans.Len() != 1 || len(p.blocks) != 0 || len(p.tail) < 3 {
		p.mu.Unlock()
		t.Fatalf("want one span, no block and a tail of 3 chunks or more; have %d, %d, %d", p.spans.Len(), len(p.blocks), len(p.tail))
	}
	gap := p.tail[0].off
	p.tail = slices.Clone(p.tail[2:])
	p.mu.Unlock()

	type result struct {
		b   []byte
		err error
	}
	read := func(off int64) result {
		t.Helper()
		ch := make(chan result, 1)
		go func() {
			b, err := s.Read("gap", 0, off, 1<<20)
			ch <- result{b, err}
		}()
		select {
		case r := <-ch:
			return r
		case <-time.After(30 * time.Second):
			panic(fmt.Sprintf("Read at %d did not return in 30 s: the read spins", off))
		}
	}
	if r := read(0); r.err != nil || !bytes.Equal(r.b, want[:gap]) {
		t.Fatalf("Read at 0 = %d bytes, %v; want the %d bytes before the gap", len(r.b), r.err, gap)
	}
	if r := read(gap); !errors.Is(r.err, errIndexDamaged) {
		t.Fatalf("Read at the gap (%d) = %d bytes, %v; want an error saying the index is damaged", gap, len(r.b), r.err)
	}
}

// Retention may take away a segment whose sealing failed (every chunk in
// it expired) before the next roll seals it again: that sealing then has
// nothing left to do, and the store goes on taking appends and rolling
// (its writes into the removed segment's closed .idx fail, which is no
// disk error).
func TestFailedSealOfARemovedSegment(t *testing.T) {
	ffs := &idxFullFS{}
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openT(t, Options{FS: ffs, SegmentBytes: 4096, Clock: fc})
	s.SetPolicy("old", Policy{MaxAge: time.Minute})
	segments := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segs)
	}
	body := strings.Repeat("o", 100)
	for segments() < 2 {
		mustAppend(t, s, "old", 0, body)
		mustAppend(t, s, "old", 1, body)
	}
	ffs.full.Store(true)
	for segments() < 3 {
		mustAppend(t, s, "old", 0, body)
		mustAppend(t, s, "old", 1, body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ffs.refused.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sealing never wrote the sealed segment's .idx")
		}
		time.Sleep(time.Millisecond)
	}
	ffs.full.Store(false)
	fc.Advance(time.Hour)
	mustAppend(t, s, "old", 0, "kept-0")
	mustAppend(t, s, "old", 1, "kept-1")
	if _, err := s.Retain("old", fc.Now()); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	if n := segments(); n != 1 {
		t.Fatalf("%d segments after retention, want the active one alone", n)
	}
	for segments() < 3 {
		mustAppend(t, s, "old", 0, body)
		mustAppend(t, s, "old", 1, body)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health after the rolls: %v", err)
	}
	for p := 0; p < 2; p++ {
		b := readAllBounded(t, s, "old", p)
		if !bytes.HasPrefix(decodeAll(t, b)[0].Body, []byte("kept-")) {
			t.Fatalf("partition %d does not start with its record kept by retention", p)
		}
	}
}
