package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/clock"
)

// indexSize counts what a store keeps in memory for its index: tails,
// blocks of the active segment, spans of sealed segments.
func indexSize(s *Store) (tails, blocks, spans int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.parts {
		p.mu.Lock()
		tails += len(p.tail)
		blocks += len(p.blocks)
		spans += p.spans.Len()
		p.mu.Unlock()
	}
	return tails, blocks, spans
}

// The memory rule: a partition keeps at most one block of entries in
// memory, one reference per block of the active segment and one span per
// sealed segment it has chunks in; sealed segments' blocks are read from
// their footers into a cache of bounded size. The same holds after a
// restart, and the checkpoint carries no sealed block.
func TestIndexMemoryIsBounded(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 64 << 10, blockEntries: 32, summaryBudget: 40}
	s := openT(t, opts)
	want := fill(t, s, "m", 3, 2000)
	check := func(s *Store) {
		t.Helper()
		tails, blocks, spans := indexSize(s)
		sealed := countSegs(s) - 1
		if sealed < 4 {
			t.Fatalf("want several sealed segments, have %d", sealed)
		}
		if tails > 3*32 || spans > 3*sealed {
			t.Fatalf("%d tail entries and %d spans for 3 partitions and %d sealed segments", tails, spans, sealed)
		}
		active := s.segs[len(s.segs)-1]
		for _, p := range s.parts {
			for _, b := range p.blocks {
				if b.g != active {
					t.Fatalf("a block of sealed segment %s kept in memory", b.g.path)
				}
			}
		}
		if blocks > 3*int(active.idxN)/32+3 {
			t.Fatalf("%d blocks in memory for %d entries in the active segment", blocks, active.idxN)
		}
		checkParts(t, s, "m", want)
		if _, n := s.sums.size(); n > opts.summaryBudget {
			t.Fatalf("summary cache holds %d blocks, budget %d", n, opts.summaryBudget)
		}
	}
	check(s)
	s.Close()
	b, _ := os.ReadFile(filepath.Join(dir, ckptName))
	c, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.parts {
		for _, k := range p.blocks {
			if c.segs[k.seg].sealed {
				t.Fatalf("checkpoint holds a block of a sealed segment")
			}
		}
	}
	check(openT(t, opts))
}

func countSegs(s *Store) int {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	return len(s.segs)
}

// A torn or missing .idx of a sealed segment is rebuilt from that
// segment's log alone at start-up; nothing else is scanned.
func TestTornIndexRebuiltFromItsSegment(t *testing.T) {
	for _, damage := range []string{"missing", "torn", "bad header"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytes: 32 << 10, blockEntries: 8}
			s := openT(t, opts)
			want := fill(t, s, "x", 4, 300)
			s.Close()
			idx := logFiles(t, dir, idxSuffix)
			if len(idx) < 4 {
				t.Fatalf("want several segments, have %d", len(idx))
			}
			victim := idx[1]
			switch damage {
			case "missing":
				os.Remove(victim)
			case "torn":
				st, _ := os.Stat(victim)
				os.Truncate(victim, st.Size()/2+3)
			case "bad header":
				b, _ := os.ReadFile(victim)
				b[5] ^= 0xff
				os.WriteFile(victim, b, 0o644)
			}
			cfs := &countFS{}
			opts.FS = cfs
			s2 := openT(t, opts)
			seg, _ := os.Stat(strings.TrimSuffix(victim, idxSuffix) + segSuffix)
			if n := cfs.logRead.Load(); n != seg.Size() {
				t.Fatalf("start-up read %d log bytes, want only the damaged index's segment (%d)", n, seg.Size())
			}
			checkParts(t, s2, "x", want)
			s2.Close()
			cfs2 := &countFS{}
			opts.FS = cfs2
			s3 := openT(t, opts)
			if n := cfs2.logRead.Load(); n != 0 {
				t.Fatalf("clean start-up after the rebuild read %d log bytes", n)
			}
			checkParts(t, s3, "x", want)
		})
	}
}

// A block whose bytes were damaged after start-up fails its crc when read:
// it is never trusted, its segment's index is rebuilt from the log on the
// spot and the read is answered correctly.
func TestDamagedIndexBlockWhileServing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 32 << 10, blockEntries: 8}
	s := openT(t, opts)
	want := fill(t, s, "d", 3, 300)
	t0 := time.Now()
	s.Close()
	s = openT(t, opts)
	idx := logFiles(t, dir, idxSuffix)
	b, _ := os.ReadFile(idx[0])
	for i := idxHeaderLen + 5; i < len(b); i += 97 {
		b[i] ^= 0x40 // offsets, positions, times, lengths: all over the file
	}
	if err := os.WriteFile(idx[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	checkParts(t, s, "d", want)
	if got, err := s.OffsetForTime("d", 1, t0.Add(-time.Hour)); err != nil || got != 0 {
		t.Fatalf("OffsetForTime after repair = %d, %v", got, err)
	}
	s.Close()
	checkParts(t, openT(t, opts), "d", want)
}

// A directory written by the format-1 store (whole-segment .idx summaries,
// a checkpoint without block directory; testdata/v1store, written by that
// code) is upgraded in place: its data is served unchanged, its files are
// rewritten in format 2, and the next start-up scans nothing.
func TestOpenFormat1Directory(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v1store")); err != nil {
		t.Fatal(err)
	}
	ck, _ := os.ReadFile(filepath.Join(dir, ckptName))
	if v := binary.BigEndian.Uint32(ck[4:]); v != formatV1 {
		t.Fatalf("testdata checkpoint has format %d", v)
	}
	opts := Options{Dir: dir, SegmentBytes: 8192}
	check := func(s *Store) {
		t.Helper()
		for p := 0; p < 3; p++ {
			recs := decodeAll(t, readAll(t, s, "old", p))
			if len(recs) != 60 {
				t.Fatalf("old-%d: %d records, want 60", p, len(recs))
			}
			for i, r := range recs {
				body := fmt.Sprintf("v1-%d-%d-%s", p, i, strings.Repeat("x", 69))
				if r.ID != int64(1000+i*10+p) || string(r.Body) != body {
					t.Fatalf("old-%d record %d: id %d body %q", p, i, r.ID, r.Body)
				}
			}
		}
	}
	s := openT(t, opts)
	check(s)
	s.Close()
	ck, _ = os.ReadFile(filepath.Join(dir, ckptName))
	if v := binary.BigEndian.Uint32(ck[4:]); v != ckptFormat {
		t.Fatalf("checkpoint still has format %d after the upgrade", v)
	}
	for _, f := range logFiles(t, dir, idxSuffix) {
		b, _ := os.ReadFile(f)
		if len(b) < idxHeaderLen || binary.BigEndian.Uint32(b[4:]) != formatV3 {
			t.Fatalf("%s not upgraded", f)
		}
	}
	cfs := &countFS{}
	opts.FS = cfs
	s = openT(t, opts)
	if n := cfs.logRead.Load(); n != 0 {
		t.Fatalf("start-up after the upgrade read %d log bytes", n)
	}
	check(s)
	mustAppend(t, s, "old", 0, "new")
}

// A checkpoint of a later format is refused with a message saying so, and
// nothing in the directory is changed.
func TestRefuseNewerFormat(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	mustAppend(t, s, "n", 0, "a")
	s.Close()
	p := filepath.Join(dir, ckptName)
	b, _ := os.ReadFile(p)
	binary.BigEndian.PutUint32(b[4:], ckptFormat+1)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	os.WriteFile(p, b, 0o644)
	before := snapshot(t, dir)
	_, err := Open(Options{Dir: dir})
	if !errors.Is(err, errNewerFormat) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", ckptFormat+1)) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Open of a format-%d directory: %v", ckptFormat+1, err)
	}
	if after := snapshot(t, dir); after != before {
		t.Fatalf("refused open changed the directory:\n%s\n%s", before, after)
	}
}

func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var out strings.Builder
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(path)
			fmt.Fprintf(&out, "%s %d %x\n", path, len(b), crc32.ChecksumIEEE(b))
		}
		return nil
	})
	return out.String()
}

// Chunks a fence made dead stay in the log with offsets the partition
// reuses; ReadLog must skip them, also after a restart (fences are kept
// in the checkpoint).
func TestFencedChunksNotShipped(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, blockEntries: 4}
	s := openT(t, opts)
	fill(t, s, "f", 1, 10)
	p := s.lookup("f", 0)
	p.mu.Lock()
	end := p.end
	p.mu.Unlock()
	ents, err := s.chunks(p, 0, end)
	if err != nil || len(ents) != 10 {
		t.Fatalf("chunks: %d %v", len(ents), err)
	}
	cut := ents[6].off
	if err := s.submit(t.Context(), &request{kind: reqFence, p: p, at: cut}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("after-fence", 300) // grows the partition past the dead chunks
	a := mustAppend(t, s, "f", 0, big)
	if a[0].Offset != cut {
		t.Fatalf("append after fence at %d, want %d", a[0].Offset, cut)
	}
	shipped := func(s *Store) []int64 {
		first, _ := s.LogBounds()
		es, _, err := s.ReadLog(first, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for _, e := range es {
			offs = append(offs, e.Offset)
		}
		return offs
	}
	want := fmt.Sprint(append(offsetsOf(ents[:6]), cut))
	if got := fmt.Sprint(shipped(s)); got != want {
		t.Fatalf("ReadLog shipped %s, want %s", got, want)
	}
	s.Close()
	s = openT(t, opts)
	if got := fmt.Sprint(shipped(s)); got != want {
		t.Fatalf("after restart ReadLog shipped %s, want %s", got, want)
	}
	if got := decodeAll(t, readAll(t, s, "f", 0)); !bytes.Equal(got[6].Body, []byte(big)) || len(got) != 7 {
		t.Fatalf("partition after fence: %d records", len(got))
	}
}

func offsetsOf(ents []idxEntry) []int64 {
	var o []int64
	for _, e := range ents {
		o = append(o, e.off)
	}
	return o
}

// With many partitions the tails together stay within the budget.
func TestTailBudget(t *testing.T) {
	s := openT(t, Options{blockEntries: 64, tailBudget: 200})
	for i := 0; i < 40; i++ {
		for p := 0; p < 50; p++ {
			mustAppend(t, s, "b", p, "x")
		}
		if tails, _, _ := indexSize(s); tails > 200+200/4+50 {
			t.Fatalf("round %d: tails hold %d entries, budget 200", i, tails)
		}
	}
	for p := 0; p < 50; p++ {
		if got := decodeAll(t, readAll(t, s, "b", p)); len(got) != 40 {
			t.Fatalf("b-%d: %d records", p, len(got))
		}
	}
}

// A sweep writes the tails of many busy partitions out and leaves each its
// array, empty, for the next entries (no allocation and regrowth per
// partition per sweep); every record stays readable in order, from the
// swept blocks and from the refilled tails.
func TestSweptTailsKeepTheirArrays(t *testing.T) {
	s := openT(t, Options{blockEntries: 64, tailBudget: 200})
	const parts = 50
	swept := 0
	for i := 0; i < 40; i++ {
		for p := 0; p < parts; p++ {
			mustAppend(t, s, "b", p, fmt.Sprintf("r%d-p%d", i, p))
		}
		if tails, _, _ := indexSize(s); tails != 0 {
			continue
		}
		// A sweep wrote every tail out at the end of this round.
		swept++
		for p := 0; p < parts; p++ {
			pt := s.lookup("b", p)
			pt.mu.Lock()
			n, c := len(pt.tail), cap(pt.tail)
			pt.mu.Unlock()
			if n != 0 || c == 0 {
				t.Fatalf("round %d: b-%d tail after the sweep: %d entries, room for %d; want empty with its array kept", i, p, n, c)
			}
		}
	}
	if swept == 0 {
		t.Fatal("no round ended with a sweep")
	}
	for p := 0; p < parts; p++ {
		got := decodeAll(t, readAll(t, s, "b", p))
		if len(got) != 40 {
			t.Fatalf("b-%d: %d records, want 40", p, len(got))
		}
		for i, r := range got {
			if want := fmt.Sprintf("r%d-p%d", i, p); string(r.Body) != want {
				t.Fatalf("b-%d record %d = %q, want %q", p, i, r.Body, want)
			}
		}
	}
}

// Backlog gives the time of the chunk holding an offset from the index and
// counts records by the partition's mean size, also after a restart.
func TestBacklog(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	dir := t.TempDir()
	opts := Options{Dir: dir, Clock: fc, blockEntries: 4, SegmentBytes: 4096}
	s := openT(t, opts)
	var offs []int64
	for i := 0; i < 50; i++ {
		a := mustAppend(t, s, "g", 0, "0123456789", "abcdefghij")
		offs = append(offs, a[0].Offset)
		fc.Advance(time.Second)
	}
	check := func(s *Store) {
		t.Helper()
		for _, i := range []int{0, 7, 31, 49} {
			n, at, err := s.Backlog("g", 0, offs[i])
			if err != nil || n != int64(2*(50-i)) || !at.Equal(t0.Add(time.Duration(i)*time.Second)) {
				t.Fatalf("Backlog from chunk %d = %d %v %v, want %d at %v", i, n, at, err, 2*(50-i), t0.Add(time.Duration(i)*time.Second))
			}
		}
		info, _ := s.Partition("g", 0)
		if n, at, err := s.Backlog("g", 0, info.Max); n != 0 || !at.IsZero() || err != nil {
			t.Fatalf("Backlog at the end = %d %v %v", n, at, err)
		}
	}
	check(s)
	s.Close()
	check(openT(t, opts))
	os.Remove(filepath.Join(dir, ckptName))
	check(openT(t, opts))
}

// Rebuilding a damaged .idx while appends roll segments and write
// checkpoints, and readers read: every read stays correct (run with -race).
func TestRebuildUnderLoad(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 16 << 10, blockEntries: 4}
	s := openT(t, opts)
	want := fill(t, s, "u", 3, 120)
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // more data, more rolls and checkpoints
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			body := fmt.Sprintf("more-%d", i)
			a, err := s.Append(t.Context(), "u", i%3, []Message{{Body: []byte(body)}})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			want[i%3] = AppendRecord(want[i%3], a[0].ID, 0, []byte(body))
			mu.Unlock()
		}
	}()
	for round := 0; round < 5; round++ {
		idx := logFiles(t, dir, idxSuffix)
		b, _ := os.ReadFile(idx[round%2])
		for i := idxHeaderLen + 3; i < len(b); i += 61 {
			b[i] ^= 0x21
		}
		os.WriteFile(idx[round%2], b, 0o644)
		mu.Lock()
		snap := map[int][]byte{}
		for p, w := range want {
			snap[p] = append([]byte(nil), w...)
		}
		mu.Unlock()
		for p, w := range snap {
			got := readAll(t, s, "u", p)
			if len(got) < len(w) || !bytes.Equal(got[:len(w)], w) {
				t.Fatalf("round %d: u-%d differs from what was appended", round, p)
			}
		}
	}
	close(done)
	wg.Wait()
	s.segMu.RLock()
	rebuilt := s.segs[0].idxGen.Load() + s.segs[1].idxGen.Load()
	s.segMu.RUnlock()
	if rebuilt < 2 {
		t.Fatalf("damaged indexes rebuilt %d times, want at least 2", rebuilt)
	}
	s.Close()
	checkParts(t, openT(t, opts), "u", want)
}

// After a crash, recovery reads the log only from the last checkpoint (the
// last segment roll) on: the sealed segments are neither read nor
// re-indexed, whatever their size.
func TestCrashRecoveryReadsSinceCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 32 << 10, blockEntries: 8}
	s := openT(t, opts)
	want := fill(t, s, "c", 3, 400)
	segs := logFiles(t, dir, segSuffix)
	if len(segs) < 5 {
		t.Fatalf("want several segments, have %d", len(segs))
	}
	// The process dies now: copy the files as they are (what it wrote is
	// in the page cache, as after kill -9), without Close.
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	active, err := os.Stat(filepath.Join(crashed, "log", filepath.Base(segs[len(segs)-1])))
	if err != nil {
		t.Fatal(err)
	}
	cfs := &countFS{}
	s2 := openT(t, Options{Dir: crashed, SegmentBytes: 32 << 10, blockEntries: 8, FS: cfs})
	if n := cfs.logRead.Load(); n == 0 || n > active.Size() {
		t.Fatalf("recovery read %d log bytes; the segment written since the last checkpoint has %d", n, active.Size())
	}
	checkParts(t, s2, "c", want)
}

// A tail that starts again after its block was written takes its share of
// the tail budget in one array (at 10,000 partitions every tail starts
// again after each roll: growing each from one entry cost seven arrays and
// their copies per partition), and a new partition's first tail starts
// small (the count of partitions is not known while a topic's are being
// created).
func TestEmptyTailTakesItsShareAtOnce(t *testing.T) {
	const block, budget, parts = 256, 2000, 20
	s := openT(t, Options{blockEntries: block, tailBudget: budget})
	for p := 0; p < parts; p++ {
		mustAppend(t, s, "e", p, "first")
	}
	tailCap := func(p int) (int, int) {
		pt := s.lookup("e", p)
		pt.mu.Lock()
		defer pt.mu.Unlock()
		return len(pt.tail), cap(pt.tail)
	}
	if n, c := tailCap(1); n != 1 || c != minTailCap {
		t.Fatalf("new partition's tail: %d entries, room for %d; want 1 in %d", n, c, minTailCap)
	}
	// Partition 0 fills a block (written out, its tail emptied), then
	// starts the next.
	for i := 1; i < block+1; i++ {
		mustAppend(t, s, "e", 0, fmt.Sprintf("r%d", i))
	}
	want := tailCapFor(parts, budget, block) // 100 each, and half again
	if want != 150 {
		t.Fatalf("tailCapFor(%d, %d, %d) = %d, want 150", parts, budget, block, want)
	}
	if n, c := tailCap(0); n != 1 || c != want {
		t.Fatalf("tail after its block: %d entries, room for %d; want 1 in %d", n, c, want)
	}
	for i := block + 1; i < block+100; i++ {
		mustAppend(t, s, "e", 0, fmt.Sprintf("r%d", i))
	}
	if n, c := tailCap(0); n != 100 || c != want {
		t.Fatalf("tail of 100 entries: %d entries, room for %d; want 100 in %d (no regrowth)", n, c, want)
	}
	if got := decodeAll(t, readAll(t, s, "e", 0)); len(got) != block+100 {
		t.Fatalf("e-0: %d records, want %d", len(got), block+100)
	}
}

func TestTailCapFor(t *testing.T) {
	for _, c := range []struct{ parts, budget, block, want int }{
		{16, tailBudget, blockEntries, blockEntries},
		{10000, tailBudget, blockEntries, 78},
		{1000, tailBudget, blockEntries, 786},
		{100000, tailBudget, blockEntries, minTailCap},
		{0, tailBudget, blockEntries, blockEntries},
		{50, 200, 4, 4},
	} {
		if got := tailCapFor(c.parts, c.budget, c.block); got != c.want {
			t.Errorf("tailCapFor(%d, %d, %d) = %d, want %d", c.parts, c.budget, c.block, got, c.want)
		}
	}
}

// A new partition's small first tail, once full, grows to its share of the
// tail budget in one step, not by doubling (at 10,000 partitions 16, 32, 64
// and 128 entries per partition where the share is 78).
func TestFullFirstTailGrowsToItsShare(t *testing.T) {
	const block, budget, parts = 256, 2000, 20
	s := openT(t, Options{blockEntries: block, tailBudget: budget})
	for p := 0; p < parts; p++ {
		mustAppend(t, s, "g", p, "first")
	}
	tailCap := func(p int) (int, int) {
		pt := s.lookup("g", p)
		pt.mu.Lock()
		defer pt.mu.Unlock()
		return len(pt.tail), cap(pt.tail)
	}
	want := tailCapFor(parts, budget, block) // 150
	for i := 1; i <= minTailCap; i++ {
		mustAppend(t, s, "g", 1, fmt.Sprintf("r%d", i))
	}
	if n, c := tailCap(1); n != minTailCap+1 || c != want {
		t.Fatalf("first tail past %d entries: %d entries, room for %d; want %d in %d", minTailCap, n, c, minTailCap+1, want)
	}
	for i := minTailCap + 1; i < want; i++ {
		mustAppend(t, s, "g", 1, fmt.Sprintf("r%d", i))
	}
	if n, c := tailCap(1); n != want || c != want {
		t.Fatalf("tail at its share: %d entries, room for %d; want %d in %d (no regrowth)", n, c, want, want)
	}
	if got := decodeAll(t, readAll(t, s, "g", 1)); len(got) != want {
		t.Fatalf("g-1: %d records, want %d", len(got), want)
	}
}
