package store

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Read assembles a get from chunks read with as few preads as it can
// (merged across small gaps, cut at gaps over readGap, at 4 MiB and at
// segment ends). Whatever the layout, a get at any offset and size must be
// exactly the partition's bytes there.
func TestReadAssemblesExactBytes(t *testing.T) {
	for _, c := range []struct {
		name     string
		segBytes int64
		rounds   int
		big      int // body size of the filler partition's records: gaps over readGap
	}{
		{"small segments", 96 << 10, 400, 6 << 10},
		{"past the 4 MiB pread", 64 << 20, 700, 2 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openT(t, Options{SegmentBytes: c.segBytes, blockEntries: 16})
			rnd := rand.New(rand.NewSource(7))
			want := map[int][]byte{}
			add := func(p int, bodies ...[]byte) {
				msgs := make([]Message, len(bodies))
				for i, b := range bodies {
					msgs[i] = Message{Body: b}
				}
				a, err := s.Append(context.Background(), "r", p, msgs)
				if err != nil {
					t.Fatal(err)
				}
				for i, b := range bodies {
					want[p] = AppendRecord(want[p], a[i].ID, 0, b)
				}
			}
			body := func(n int) []byte {
				b := make([]byte, n)
				rnd.Read(b)
				return b
			}
			for i := 0; i < c.rounds; i++ {
				// partition 0: single small records, batches, and now and
				// then a filler entry wider than readGap between its chunks
				add(0, body(1+rnd.Intn(200)))
				if i%5 == 0 {
					add(0, body(30), body(1+rnd.Intn(3000)), body(7))
				}
				add(1, body(1+rnd.Intn(100)))
				if i%7 == 0 {
					add(2, body(c.big))
				}
				if i%20 == 0 {
					// a run of partition 0 with nothing between: back to back
					for k := 0; k < 20; k++ {
						add(0, body(5000+rnd.Intn(2000)))
					}
				}
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			for p, w := range want {
				if got := readAll(t, s, "r", p); !bytes.Equal(got, w) {
					t.Fatalf("partition %d: whole read differs (%d bytes, want %d)", p, len(got), len(w))
				}
				for k := 0; k < 100; k++ {
					off := rnd.Int63n(int64(len(w)))
					max := 1 + rnd.Intn(3<<20)
					if k%10 == 0 {
						max = 8 << 20
					}
					got, err := s.Read("r", p, off, max)
					if err != nil {
						t.Fatalf("partition %d: Read(%d, %d): %v", p, off, max, err)
					}
					if exp := w[off:min(off+int64(max), int64(len(w)))]; !bytes.Equal(got, exp) {
						t.Fatalf("partition %d: Read(%d, %d): %d bytes differ from the %d written there", p, off, max, len(got), len(exp))
					}
				}
			}
		})
	}
}

// prefetchFS records the preads and the read-ahead requests (Prefetch)
// made on log segments and .idx files.
type prefetchFS struct {
	OSFS
	mu    sync.Mutex
	reads []fileRange // preads
	ahead []fileRange // Prefetch
}

type fileRange struct {
	name    string
	off, to int64
}

type prefetchFile struct {
	File
	fs *prefetchFS
}

func (p *prefetchFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := p.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) && !strings.HasSuffix(name, idxSuffix) {
		return f, err
	}
	return prefetchFile{f, p}, nil
}

func (p *prefetchFS) record(into *[]fileRange, name string, off, n int64) {
	p.mu.Lock()
	*into = append(*into, fileRange{filepath.Base(name), off, off + n})
	p.mu.Unlock()
}

// take returns and forgets what was recorded.
func (p *prefetchFS) take() (reads, ahead []fileRange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	reads, ahead = p.reads, p.ahead
	p.reads, p.ahead = nil, nil
	return reads, ahead
}

func (f prefetchFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.record(&f.fs.reads, f.Name(), off, int64(len(b)))
	return f.File.ReadAt(b, off)
}

func (f prefetchFile) Prefetch(off, n int64) {
	f.fs.record(&f.fs.ahead, f.Name(), off, n)
	prefetch(f.File, off, n)
}

// covered returns how many bytes of r lie in the union of rs.
func covered(r fileRange, rs []fileRange) int64 {
	var pts []fileRange
	for _, x := range rs {
		if x.name == r.name && x.to > r.off && x.off < r.to {
			pts = append(pts, fileRange{x.name, max(x.off, r.off), min(x.to, r.to)})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].off < pts[j].off })
	n, at := int64(0), r.off
	for _, x := range pts {
		if x.to > at {
			n += x.to - max(x.off, at)
			at = x.to
		}
	}
	return n
}

// A consumer reading old data (sealed segments) in order has the disk
// fetch what its next reads need while it is served: exactly its own
// partition's index blocks (never the other partitions' blocks between
// them) and the log range after its read. Small reads and reads of the
// active segment ask for nothing ahead.
func TestSequentialReadOfOldDataPrefetches(t *testing.T) {
	pfs := &prefetchFS{}
	s := openT(t, Options{FS: pfs, SegmentBytes: 256 << 10, blockEntries: 16})
	body := bytes.Repeat([]byte("x"), 100)
	for i := 0; i < 12000; i++ {
		if _, err := s.Append(context.Background(), "pf", i%4, []Message{{Body: body}}); err != nil {
			t.Fatal(err)
		}
	}
	s.segMu.RLock()
	active := s.segs[len(s.segs)-1]
	sealedSegs := len(s.segs) - 1
	s.segMu.RUnlock()
	if sealedSegs < 4 {
		t.Fatalf("want at least 4 sealed segments, got %d", sealedSegs)
	}
	p := s.lookup("pf", 0)
	p.mu.Lock()
	pid, min, activeFrom := p.pid, p.min, p.blocks[0].off
	p.mu.Unlock()
	if len(p.tail) > 0 && p.tail[0].off < activeFrom {
		activeFrom = p.tail[0].off
	}

	// Small reads: nothing ahead.
	pfs.take()
	for off, i := min, 0; i < 20; i++ {
		b, err := s.Read("pf", 0, off, 4<<10)
		if err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
	}
	if _, ahead := pfs.take(); len(ahead) > 0 {
		t.Fatalf("4 KiB reads asked for %d ranges ahead: %v", len(ahead), ahead[0])
	}

	// Large reads in order through the sealed segments.
	const want = prefetchMin
	var allAhead []fileRange
	var idxRead, idxReadAhead, logRead, logReadAhead int64
	off := min
	for i := 0; off+2*want < activeFrom; i++ {
		b, err := s.Read("pf", 0, off, want)
		if err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
		reads, ahead := pfs.take()
		for _, r := range reads {
			if i == 0 {
				break // the first read has nothing before it
			}
			if strings.HasSuffix(r.name, idxSuffix) {
				idxRead += r.to - r.off
				idxReadAhead += covered(r, allAhead)
			} else {
				logRead += r.to - r.off
				logReadAhead += covered(r, allAhead)
			}
		}
		allAhead = append(allAhead, ahead...)
	}
	if idxRead == 0 || logRead == 0 {
		t.Fatalf("the reads read %d index and %d log bytes", idxRead, logRead)
	}
	// Every index block a read needed was asked for by an earlier read,
	// and (nearly) all of its log range: the next read starts a few
	// entries after where the previous one ended.
	if idxReadAhead != idxRead {
		t.Errorf("%d of %d index bytes read were asked for ahead", idxReadAhead, idxRead)
	}
	if logReadAhead < logRead*9/10 {
		t.Errorf("%d of %d log bytes read were asked for ahead", logReadAhead, logRead)
	}
	// What was asked for in the .idx files is partition 0's blocks only.
	var idxAhead int
	for _, r := range allAhead {
		if !strings.HasSuffix(r.name, idxSuffix) {
			if r.name == filepath.Base(active.path) {
				t.Errorf("asked for the active segment's log ahead: %v", r)
			}
			continue
		}
		idxAhead++
		if r.name == filepath.Base(idxPathOf(active.path)) {
			t.Errorf("asked for the active segment's index ahead: %v", r)
			continue
		}
		if (r.off-idxHeaderLen)%idxEntryLen != 0 || (r.to-r.off)%idxEntryLen != 0 {
			t.Fatalf("index range %v is not whole entries", r)
		}
		b := make([]byte, r.to-r.off)
		f, err := os.Open(filepath.Join(s.logDir, r.name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.ReadAt(b, r.off)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < len(b); k += idxEntryLen {
			if e := decodeEntry32(b[k:]); e.pid != pid {
				t.Fatalf("index range %v holds an entry of pid %d, the reader's is %d", r, e.pid, pid)
			}
		}
	}
	if idxAhead == 0 {
		t.Fatal("no index blocks were asked for ahead")
	}
}

// A replica catching up through old segments (ReadLog) has the disk fetch
// the next window of the log while it ships the current one.
func TestReadLogOfOldDataPrefetches(t *testing.T) {
	pfs := &prefetchFS{}
	s := openT(t, Options{FS: pfs, SegmentBytes: 256 << 10})
	body := bytes.Repeat([]byte("y"), 1000)
	for i := 0; i < 1500; i++ {
		if _, err := s.Append(context.Background(), "rl", i%3, []Message{{Body: body}}); err != nil {
			t.Fatal(err)
		}
	}
	pfs.take()
	first, durable := s.LogBounds()
	var allAhead []fileRange
	var read, readAhead int64
	for pos, i := first, 0; pos < durable; i++ {
		_, next, err := s.ReadLog(pos, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		pos = next
		reads, ahead := pfs.take()
		for _, r := range reads {
			if strings.HasSuffix(r.name, segSuffix) {
				read += r.to - r.off
				readAhead += covered(r, allAhead)
			}
		}
		allAhead = append(allAhead, ahead...)
	}
	// Each segment's first window has nothing before it; the rest of the
	// sealed segments' reads were asked for ahead.
	if read == 0 || readAhead < read/2 {
		t.Fatalf("%d of %d log bytes ReadLog read were asked for ahead", readAhead, read)
	}
}

// gateFS makes preads of log segments wait while it is closed.
type gateFS struct {
	OSFS
	closed atomic.Bool
	open   chan struct{}
	in     chan struct{}
}

type gateFile struct {
	File
	fs *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := g.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) {
		return f, err
	}
	return gateFile{f, g}, nil
}

func (f gateFile) ReadAt(b []byte, off int64) (int, error) {
	if f.fs.closed.Load() {
		f.fs.in <- struct{}{}
		<-f.fs.open
	}
	return f.File.ReadAt(b, off)
}

// A read waiting on the disk (cold data), a consumer's or a replica's,
// must not hold up the writer: a segment roll and the appends behind it
// go on meanwhile.
func TestRollDoesNotWaitForASlowRead(t *testing.T) {
	t.Run("Read", func(t *testing.T) {
		testRollDuringSlowRead(t, func(s *Store) error {
			_, err := s.Read("slow", 0, 0, 4<<10)
			return err
		})
	})
	t.Run("ReadLog", func(t *testing.T) {
		testRollDuringSlowRead(t, func(s *Store) error {
			first, _ := s.LogBounds()
			_, _, err := s.ReadLog(first, 4<<10)
			return err
		})
	})
}

func testRollDuringSlowRead(t *testing.T, read func(*Store) error) {
	gfs := &gateFS{open: make(chan struct{}), in: make(chan struct{})}
	s := openT(t, Options{FS: gfs, SegmentBytes: 64 << 10})
	body := bytes.Repeat([]byte("z"), 1000)
	appendN := func(n int) error {
		for i := 0; i < n; i++ {
			if _, err := s.Append(context.Background(), "slow", 0, []Message{{Body: body}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := appendN(10); err != nil {
		t.Fatal(err)
	}
	s.segMu.RLock()
	segs := len(s.segs)
	s.segMu.RUnlock()

	gfs.closed.Store(true)
	readDone := make(chan error, 1)
	go func() { readDone <- read(s) }()
	<-gfs.in // the read is inside its pread
	gfs.closed.Store(false)
	appended := make(chan error, 1)
	go func() { appended <- appendN(200) }() // about three segments
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(gfs.open)
		t.Fatal("appends that roll segments waited for a read stuck in its pread")
	}
	s.segMu.RLock()
	rolled := len(s.segs) - segs
	s.segMu.RUnlock()
	if rolled < 2 {
		t.Fatalf("expected the appends to roll segments, %d new", rolled)
	}
	close(gfs.open)
	if err := <-readDone; err != nil {
		t.Fatalf("the slow read: %v", err)
	}
}

func (f prefetchFile) AdviseRandom() { adviseRandom(f.File) }

// A partition thinly spread through the log (one of many busy ones) has
// most of the log range its reads pass over skipped by Read: asking for
// that range ahead would read it for nothing, so its reads ask only for
// their index blocks; and a read looks at most one summary it does not
// have yet.
func TestThinPartitionAsksNoLogAhead(t *testing.T) {
	pfs := &prefetchFS{}
	s := openT(t, Options{FS: pfs, SegmentBytes: 512 << 10, blockEntries: 16})
	body := bytes.Repeat([]byte("t"), 1000)
	const parts = 32
	for i := 0; i < 400*parts; i++ {
		if _, err := s.Append(context.Background(), "thin", i%parts, []Message{{Body: body}}); err != nil {
			t.Fatal(err)
		}
	}
	// As after a restart: no summary in the cache.
	s.segMu.RLock()
	sealed := len(s.segs) - 1
	for _, g := range s.segs {
		s.sums.drop(g)
	}
	s.segMu.RUnlock()
	if sealed < 20 {
		t.Fatalf("want at least 20 sealed segments, got %d", sealed)
	}
	pfs.take()
	reads := 0
	for off := int64(0); off < 200*1020; reads++ {
		b, err := s.Read("thin", 0, off, prefetchMin)
		if err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
		reads, ahead := pfs.take()
		summaries, logSegs := 0, map[string]bool{}
		for _, r := range reads {
			if strings.HasSuffix(r.name, idxSuffix) && r.to-r.off > 16*idxEntryLen {
				summaries++ // a footer read: larger than any block
			}
			if strings.HasSuffix(r.name, segSuffix) {
				logSegs[r.name] = true
			}
		}
		// Those of the segments the read itself is in, and one more.
		if summaries > len(logSegs)+1 {
			t.Errorf("one read at %d in %d segments read %d summaries", off, len(logSegs), summaries)
		}
		for _, r := range ahead {
			if strings.HasSuffix(r.name, segSuffix) {
				t.Fatalf("a read of the thin partition asked for %d bytes of log ahead (%v)", r.to-r.off, r)
			}
		}
	}
	if reads < 3 {
		t.Fatalf("only %d reads", reads)
	}
}
