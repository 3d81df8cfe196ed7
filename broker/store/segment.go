package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// segment is one file of the shared log. size is the number of bytes
// written to it; only the writer goroutine (or recovery) changes it.
type segment struct {
	start int64
	seq   uint32 // the store's number for it, in log order (spans name segments by it)
	path  string
	f     File
	size  atomic.Int64
	// logMu (a leaf lock) guards reading f against its closing, so a read
	// holds it, not the segment list's lock, through a pread of cold data
	// (a roll or retention does not wait behind readers); logClosed is
	// set under it when retention takes the segment away.
	logMu     sync.RWMutex
	logClosed bool
	// pins counts answers being sent from f without a copy (see Answer):
	// close leaves f open until the last is released, so a sendfile never
	// reads a closed (or reused) descriptor; fClosed says it was closed.
	pins    int
	fClosed bool
	// checked says every entry of the segment passed a crc check since
	// start-up (by the scrub; see scrub.go), so it may be served unread.
	checked atomic.Bool

	// idx is the segment's .idx file (see index.go). idxN (entries) and
	// idxSize are written by the writer goroutine (and recovery) while the
	// segment is active, and once sealed only by rebuildIdx, under idxMu;
	// removed is set under idxMu when retention takes the segment away.
	idx     File
	idxN    uint32
	idxSize int64
	idxOK   bool // the file had a valid header of the current format at open
	// sealed: the .idx ends with a footer of footN blocks whose crc32c is
	// footCRC (see index.go); set when the segment is sealed, by a
	// rebuild, or from the checkpoint; under idxMu once the segment is
	// sealed.
	sealed  bool
	footN   uint32
	footCRC uint32
	// idxMu (a leaf lock) guards reading idx against its closing.
	idxMu   sync.RWMutex
	removed bool
	idxGen  atomic.Uint64 // bumped when rebuildIdx replaces the file
}

func (g *segment) end() int64 { return g.start + g.size.Load() }

func (g *segment) isSealed() bool {
	g.idxMu.RLock()
	defer g.idxMu.RUnlock()
	return g.sealed
}

// isRemoved reports whether retention took the segment away.
func (g *segment) isRemoved() bool {
	g.idxMu.RLock()
	defer g.idxMu.RUnlock()
	return g.removed
}

// close closes the segment's files.
func (g *segment) close() {
	g.logMu.Lock()
	g.logClosed = true
	if g.pins == 0 && !g.fClosed {
		g.fClosed = true
		g.f.Close()
	}
	g.logMu.Unlock()
	g.idxMu.Lock()
	g.removed = true
	if g.idx != nil {
		g.idx.Close()
	}
	g.idxMu.Unlock()
}

// readAt fills b from the segment's log at rel; ErrLogTruncated when
// retention removed the segment.
func (g *segment) readAt(b []byte, rel int64) error {
	g.logMu.RLock()
	defer g.logMu.RUnlock()
	if g.logClosed {
		return ErrLogTruncated
	}
	if n, err := g.f.ReadAt(b, rel); n < len(b) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %s at %d: %w", g.path, rel, err)
	}
	return nil
}

// isClosed reports whether retention took the segment away.
func (g *segment) isClosed() bool {
	g.logMu.RLock()
	defer g.logMu.RUnlock()
	return g.logClosed
}

// pin keeps f open for an answer sent from it until unpin; false when
// retention took the segment away.
func (g *segment) pin() bool {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if g.logClosed {
		return false
	}
	g.pins++
	return true
}

// unpin releases a pin; the last one of a closed segment closes f.
func (g *segment) unpin() {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	g.pins--
	if g.pins == 0 && g.logClosed && !g.fClosed {
		g.fClosed = true
		g.f.Close()
	}
}

// prefetchAt asks for [rel, rel+n) of the segment's log ahead (see
// prefetch), unless the segment is gone.
func (g *segment) prefetchAt(rel, n int64) {
	g.logMu.RLock()
	defer g.logMu.RUnlock()
	if !g.logClosed {
		prefetch(g.f, rel, n)
	}
}

const segSuffix = ".log"

func segName(start int64) string { return fmt.Sprintf("%020d%s", start, segSuffix) }

// listSegments returns the log segment starts found in dir, ascending.
func listSegments(fs FS, dir string) ([]int64, error) {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var starts []int64
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || len(name) != 20+len(segSuffix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil || n < 0 {
			continue
		}
		starts = append(starts, n)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	return starts, nil
}

func openSegment(fs FS, dir string, start int64, create bool) (*segment, error) {
	path := filepath.Join(dir, segName(start))
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := fs.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: open segment %s: %w", path, err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: stat segment %s: %w", path, err)
	}
	g := &segment{start: start, path: path, f: f}
	g.size.Store(size)
	return g, nil
}

// segReader reads a segment through a window buffer so that scanning does
// not cost a system call per entry.
type segReader struct {
	f      File
	size   int64
	window int // bytes read ahead per call; 0 = 1 MiB
	// prefetch: after each read of a window, ask for the next one ahead
	// (see prefetch), for a reader going through old data in order.
	prefetch bool
	buf      []byte
	bstart   int64
	data     []byte
}

func newSegReader(f File, size int64) *segReader { return &segReader{f: f, size: size} }

// bytes returns n bytes at x; valid until the next call.
func (r *segReader) bytes(x int64, n int) ([]byte, error) {
	if x < 0 || n < 0 || x+int64(n) > r.size {
		return nil, io.ErrUnexpectedEOF
	}
	if x >= r.bstart && x+int64(n) <= r.bstart+int64(len(r.data)) {
		o := x - r.bstart
		return r.data[o : o+int64(n)], nil
	}
	win := r.window
	if win <= 0 {
		win = 1 << 20
	}
	want := int64(max(n, win))
	if x+want > r.size {
		want = r.size - x
	}
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	b := r.buf[:want]
	if _, err := r.f.ReadAt(b, x); err != nil && err != io.EOF {
		r.data = nil
		return nil, err
	}
	r.bstart, r.data = x, b
	if r.prefetch && x+want < r.size {
		prefetch(r.f, x+want, min(want, r.size-x-want))
	}
	return b[:n], nil
}

// entryAt decodes and verifies the entry at x. The payload is valid until
// the next call.
func (r *segReader) entryAt(x int64) (entryHeader, []byte, int, error) {
	hb, err := r.bytes(x, entryHeaderLen)
	if err != nil {
		return entryHeader{}, nil, 0, fmt.Errorf("%w: truncated entry header", ErrCorrupt)
	}
	h, err := parseEntryHeader(hb)
	if err != nil {
		return h, nil, 0, err
	}
	b, err := r.bytes(x, entryHeaderLen+int(h.length))
	if err != nil {
		return h, nil, 0, fmt.Errorf("%w: truncated entry", ErrCorrupt)
	}
	return decodeEntry(b)
}

// resync finds the first valid entry at or after from, or -1.
func (r *segReader) resync(from int64) int64 {
	var magic [4]byte
	binary.BigEndian.PutUint32(magic[:], entryMagic)
	const window = 1 << 20
	for x := from; x+entryHeaderLen <= r.size; {
		n := int64(window)
		if x+n > r.size {
			n = r.size - x
		}
		b, err := r.bytes(x, int(n))
		if err != nil {
			return -1
		}
		i := bytes.Index(b, magic[:])
		if i < 0 {
			if n < 4 {
				return -1
			}
			x += n - 3 // the magic may straddle windows
			continue
		}
		c := x + int64(i)
		if _, _, _, err := r.entryAt(c); err == nil {
			return c
		}
		x = c + 1
	}
	return -1
}
