package store

import (
	"fmt"
	"io"
	"os"
)

// LogRun is a Read answer left where it is: the partition's bytes as
// sections of log segment files, for a writer that can send a file's
// bytes without copying them through the process (sendfile to a TCP
// socket). The segments it names stay open (pinned) until Release, so a
// sendfile never reads a descriptor that retention closed; the bytes
// themselves never change (see the zero-copy rule in doc.go).
type LogRun struct {
	secs []section
	n    int64
	pins []*segment
	pin1 [1]*segment // pins' first array: most runs pin one segment
	// Progress, when set, is called after each piece WriteTo sent, so a
	// caller can tell a slow reader from one that reads nothing.
	Progress func()
	// Head, when set, is sent before the run's bytes (an answer's header):
	// to a socket in the same packet as the first of them (MSG_MORE), not
	// as a packet (and a wake-up of the reader) of its own.
	Head []byte
}

// section is n bytes of a segment file at off.
type section struct {
	f   *os.File
	off int64
	n   int64
}

// Len is the number of bytes the run holds.
func (r *LogRun) Len() int { return int(r.n) }

// Truncate keeps the first n bytes.
func (r *LogRun) Truncate(n int) {
	if int64(n) >= r.n {
		return
	}
	left := int64(n)
	for i := range r.secs {
		if r.secs[i].n >= left {
			r.secs[i].n = left
			r.secs = r.secs[:i+1]
			if left == 0 {
				r.secs = r.secs[:i]
			}
			break
		}
		left -= r.secs[i].n
	}
	r.n = int64(n)
}

// Release lets the segments the run names be closed. It is safe to call
// on a nil run and more than once.
func (r *LogRun) Release() {
	if r == nil {
		return
	}
	for _, g := range r.pins {
		g.unpin()
	}
	r.pins = nil
	r.secs = nil
}

// WriteTo sends the run to w: with sendfile when w is a socket that
// allows it (see sendfile_linux.go), else by reading the sections into a
// buffer. A section that comes back short (the file ended before it)
// is an error: the bytes sent so far are a correct prefix, never others.
func (r *LogRun) WriteTo(w io.Writer) (int64, error) {
	if sent, ok, err := sendSections(w, r.Head, r.secs, r.Progress); ok {
		return sent, err
	}
	var sent int64
	if len(r.Head) > 0 {
		n, err := w.Write(r.Head)
		sent += int64(n)
		if err != nil {
			return sent, err
		}
	}
	n, err := copySections(w, r.secs, r.Progress)
	return sent + n, err
}

// Piece is one part of a batch SendBatch sends: Bytes, then Run's
// sections (Run's Head and Progress are not used: a header goes in Bytes).
type Piece struct {
	Bytes []byte
	Run   *LogRun
}

// SendBatch sends pieces to w in order, as one stream: on Linux to a
// plain TCP socket, through one pipe (Bytes copied into it, each run's
// sections spliced into it from the page cache) and from the pipe to the
// socket once per pipeful, so several answers ready at once leave in one
// send instead of two or more each. It reports ok false, having sent
// nothing, where it cannot (another writer, another system, or no pipe
// free, see splicePipes): the caller sends the pieces one by one. progress,
// when set, is called after each piece of bytes that reached w. A section
// the file cannot fill stops the batch with io.ErrUnexpectedEOF after a
// correct prefix. It releases no run.
func SendBatch(w io.Writer, pieces []Piece, progress func()) (sent int64, ok bool, err error) {
	return sendBatch(w, pieces, progress)
}

// copySections writes the sections through a buffer.
func copySections(w io.Writer, secs []section, progress func()) (int64, error) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	if cap(*bp) < 256<<10 {
		*bp = make([]byte, 256<<10)
	}
	buf := (*bp)[:cap(*bp)]
	var sent int64
	for _, s := range secs {
		for done := int64(0); done < s.n; {
			b := buf[:min(int64(len(buf)), s.n-done)]
			if k, err := s.f.ReadAt(b, s.off+done); k < len(b) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return sent, fmt.Errorf("store: send %s at %d: %w", s.f.Name(), s.off+done, err)
			}
			k, err := w.Write(b)
			sent += int64(k)
			if err != nil {
				return sent, err
			}
			done += int64(k)
			if progress != nil {
				progress()
			}
		}
	}
	return sent, nil
}

// sendfileMinChunk is the smallest mean chunk (payload bytes per log
// entry) a run is built for. Each chunk is its own sendfile call, as the
// entry headers between chunks are not sent; below this a pread of the
// whole range, a crc check and one write cost less CPU (BENCH.md, zero
// copy).
const sendfileMinChunk = 4 << 10

// spliceMinChunk is the smallest mean chunk a run is built for when it
// will be spliced through a pipe (spliceLikely: enough sections and a
// pipe free): splice beats the copy path down to 1 KiB chunks, where
// sendfile costs twice as much (BENCH.md, zero copy). At a steady put rate
// a commit holds a partition's chunk of a few records, so consumers at the
// tail read 1-4 KiB chunks; copying them cost twice the CPU per delivery.
const spliceMinChunk = 1 << 10

// worthARun reports whether an answer of total payload bytes in chunks
// log entries costs less sent from the files than copied: chunks of
// sendfileMinChunk on average, or of spliceMinChunk when it will likely be
// spliced. (A pipe found free here may be taken by the time the answer is
// sent; it then goes by sendfile, correct but dearer.)
func (s *Store) worthARun(total int64, chunks int) bool {
	n := int64(chunks)
	return total >= n*int64(s.opts.sendfileMinChunk) || (total >= n*spliceMinChunk && spliceLikely(chunks))
}

// ReadRun is Read for a caller that can send file sections without
// copying them (see LogRun): the same bytes (a prefix of them: a run stops
// at the log's durable end, Read at the written end), the same errors. It
// returns a nil run and no error when the answer must be copied instead:
// a chunk that no crc check has covered since start-up (the scrub has not
// reached it: Read checks it on the way), chunks too small for sendfile
// to pay (worthARun), a first chunk not yet durable, or a file
// system whose files are not operating-system files.
func (s *Store) ReadRun(topic string, partition int, offset int64, maxBytes int) (*LogRun, error) {
	pl, err := s.plan(topic, partition, offset, maxBytes)
	if err != nil {
		return nil, err
	}
	// A run ends at the log's durable end (bytes above it could still be
	// cut off by a failed fdatasync's rollback); at the tail the chunks
	// written since the last fdatasync are left to the next get.
	durable := s.durable()
	total := int64(0)
	for i, c := range pl.ents {
		if c.pos+entryHeaderLen+int64(c.n) > durable {
			pl.ents = pl.ents[:i]
			break
		}
		total += min(int64(c.n)-max(pl.offset-c.off, 0), pl.total-total)
	}
	pl.total = total
	if len(pl.ents) == 0 || !s.worthARun(pl.total, len(pl.ents)) {
		return nil, nil
	}
	checkedFrom := s.checkedFrom.Load()
	tab := s.segTab.Load()
	if tab == nil {
		return nil, nil
	}
	r := &LogRun{secs: make([]section, 0, len(pl.ents))}
	r.pins = r.pin1[:0]
	var g *segment
	var f *os.File
	for _, c := range pl.ents {
		end := c.pos + entryHeaderLen + int64(c.n)
		if g == nil || c.pos < g.start || c.pos >= g.end() {
			g = segmentIn(*tab, c.pos)
			of, ok := osFile{}, false
			if g != nil {
				of, ok = g.f.(osFile)
			}
			if !ok || end > g.end() || !g.pin() {
				r.Release()
				return nil, nil
			}
			r.pins = append(r.pins, g)
			f = of.File
		}
		if c.pos < checkedFrom && !g.checked.Load() {
			r.Release()
			return nil, nil
		}
		skip := max(pl.offset-c.off, 0)
		take := min(int64(c.n)-skip, pl.total-r.n)
		off := c.pos - g.start + entryHeaderLen + skip
		if k := len(r.secs); k > 0 && r.secs[k-1].f == f && r.secs[k-1].off+r.secs[k-1].n == off {
			r.secs[k-1].n += take
		} else {
			r.secs = append(r.secs, section{f: f, off: off, n: take})
		}
		r.n += take
	}
	return r, nil
}

// segmentIn returns the segment of tab holding pos, or nil.
func segmentIn(tab []*segment, pos int64) *segment {
	lo, hi := 0, len(tab)
	for lo < hi {
		m := (lo + hi) / 2
		if tab[m].start > pos {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return nil
	}
	return tab[lo-1]
}
