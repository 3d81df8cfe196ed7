// Package outbox is a slave site's durable queue of puts accepted locally
// for store and forward (see broker/gateway.go and broker/storeforward.go): a put
// is answered once its entry is written and fsynced here, and the write
// gateway forwards the entries to the master later, in order per partition.
//
// # Files
//
// The outbox lives in one directory (<dataPath>/outbox/): segment files
// named by the sequence number of their first entry, %020d.log, and one
// cursor file. A segment is a run of records:
//
//	+------------+-------------+--------------------------------------+
//	| len uint32 | crc32c u32  | payload (len bytes)                  |
//	+------------+-------------+--------------------------------------+
//	payload: seq u64 | accepted (Unix ms) i64 | id i64 | partition i32 |
//	         flag i32 | topic length u16 | topic | body
//
// all big endian, the CRC (Castagnoli) over the payload. Append writes the
// records of one call at the end of the newest segment and returns once
// an fsync of that segment that began after its write returned (a new
// segment's directory entry is fsynced too): an entry whose Append
// returned survives kill -9 and a power cut. Concurrent Appends share
// fsyncs (group commit): while one runs, the next ones write and then
// wait for one fsync covering them all. An entry is pending for the
// gateway (Keys, Pending) only once fsynced. A segment rolls at
// Options.SegmentBytes.
//
// The cursor file (cursor, replaced by write-temp, fsync, rename, fsync
// the directory) holds, for each topic and partition, the last entry the
// master confirmed (its sequence number) and the master's offset just past
// it, where the next entry is to be stored. Confirm writes it; a segment is
// removed once every entry in it is confirmed. The cursor file is written
// and fsynced without the lock Append takes: a drain confirming entries
// does not hold up the puts being accepted (it shares only the disk).
//
// # Recovery
//
// Open reads every segment in order. A record that is cut short or fails
// its CRC ends what is read of the newest segment, which is truncated
// there (a torn write: its Append never returned, so it was never
// acknowledged); in an older segment such a record is damage, and the
// segment is renamed .bad and what follows it is read. Entries the cursor
// says are confirmed are dropped; the others are pending again, in
// sequence order.
//
// # Bounds
//
// Append refuses with a *BoundError when the pending entries would exceed
// Options.MaxBytes, or when the oldest pending entry is older than
// Options.MaxAge: the producer is told which bound, and the put is not
// accepted.
//
// The pending entries are also held in memory (so at most MaxBytes of
// bodies), for the gateway to send.
package outbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	headerLen   = 8  // len, crc
	fixedLen    = 34 // seq, accepted, id, partition, flag, topic length
	cursorName  = "cursor"
	segmentExt  = ".log"
	maxTopicLen = 1<<16 - 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by the methods of a closed Outbox.
var ErrClosed = errors.New("outbox: closed")

// BoundError says an Append was refused because the outbox is full: Bound
// is "outboxMaxBytes" or "outboxMaxAge".
type BoundError struct {
	Bound string
	Limit string // the bound's value, as said to the producer
	Now   string // the outbox's state against it
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("outbox: full: %s=%s reached (%s)", e.Bound, e.Limit, e.Now)
}

// Key names a topic's partition.
type Key struct {
	Topic     string
	Partition int
}

func (k Key) String() string { return k.Topic + "-" + strconv.Itoa(k.Partition) }

// Entry is one put accepted into the outbox.
type Entry struct {
	Seq      uint64 // set by Append: the outbox's order
	Accepted time.Time
	Key      Key
	ID       int64 // the message id, fixed at acceptance
	Flag     int32
	Body     []byte
}

// Size is the entry's bytes in its segment.
func (e *Entry) Size() int64 { return int64(headerLen + fixedLen + len(e.Key.Topic) + len(e.Body)) }

// Cursor is where a partition's confirmed entries end.
type Cursor struct {
	Seq    uint64 // the last entry the master confirmed (0: none)
	Offset int64  // the master's offset past it: where the next is stored
}

// Stats is the outbox's state.
type Stats struct {
	Entries int64     // pending
	Bytes   int64     // pending, record bytes
	Oldest  time.Time // accepted time of the oldest pending entry; zero when none
	Files   int       // segment files
}

type segment struct {
	first  uint64   // seq of its first entry (its name)
	last   uint64   // seq of its last entry (0: empty)
	size   int64    // bytes written
	f      *os.File // open for appends and fsyncs; nil for a recovered segment
	synced uint64   // its entries up to this seq are fsynced
}

// Outbox is a durable queue of entries (see the package comment). Its
// methods are safe for concurrent use; Append calls are serialised.
type Outbox struct {
	opts Options
	log  *slog.Logger

	// syncMu serialises fsyncs (taken before mu, never under it).
	syncMu sync.Mutex
	// cursorMu serialises writes of the cursor file (taken before mu,
	// never under it, never with syncMu): the file is written and
	// fsynced with mu released, so Appends do not wait for it.
	cursorMu sync.Mutex

	mu      sync.Mutex
	closed  bool
	failed  error    // an fsync failed: nothing is acknowledged any more
	f       *os.File // the newest segment, open for appends
	synced  uint64   // entries up to this seq are fsynced (every segment's: syncedPrefixLocked)
	segs    []segment
	nextSeq uint64
	pending map[Key][]Entry // in seq order
	cursors map[Key]Cursor
	bytes   int64
	count   int64

	cursorHook func()            // tests: called before the cursor file's fsync
	writeHook  func()            // tests: called by Append between its write and its fsync
	syncHook   func(name string) // tests: called before a segment's fsync
}

// Open opens (or creates) the outbox in opts.Dir and recovers it (see
// Recovery in the package comment).
func Open(opts Options) (*Outbox, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", opts.Dir, err)
	}
	o := &Outbox{opts: opts, log: opts.Logger, pending: map[Key][]Entry{}, cursors: map[Key]Cursor{}, nextSeq: 1}
	if err := o.loadCursor(); err != nil {
		return nil, err
	}
	if err := o.recover(); err != nil {
		return nil, err
	}
	return o, nil
}

// Dir is the outbox's directory.
func (o *Outbox) Dir() string { return o.opts.Dir }

// Bounds returns MaxBytes and MaxAge in effect.
func (o *Outbox) Bounds() (int64, time.Duration) { return o.opts.MaxBytes, o.opts.MaxAge }

func segName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentExt) }

func (o *Outbox) recover() error {
	names, err := filepath.Glob(filepath.Join(o.opts.Dir, "*"+segmentExt))
	if err != nil {
		return fmt.Errorf("outbox: list %s: %w", o.opts.Dir, err)
	}
	sort.Strings(names)
	for i, name := range names {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(name), segmentExt), 10, 64)
		if err != nil {
			continue // not one of ours
		}
		newest := i == len(names)-1
		seg, err := o.readSegment(name, first, newest)
		if err != nil {
			return err
		}
		if seg != nil {
			seg.synced = seg.last // read back from the disk
			o.segs = append(o.segs, *seg)
			o.nextSeq = max(o.nextSeq, seg.first, seg.last+1)
		}
	}
	for _, c := range o.cursors {
		o.nextSeq = max(o.nextSeq, c.Seq+1)
	}
	o.synced = o.nextSeq - 1
	o.dropConfirmedLocked()
	if o.count > 0 {
		o.log.Info("OUTBOX: recovered pending entries", "dir", o.opts.Dir, "entries", o.count, "bytes", o.bytes, "partitions", len(o.pending))
	}
	return nil
}

// readSegment reads one segment's entries into o.pending. A torn or bad
// record ends the newest segment (it is truncated there) and quarantines
// an older one. It returns nil for a quarantined segment.
func (o *Outbox) readSegment(name string, first uint64, newest bool) (*segment, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("outbox: open segment %s: %w", name, err)
	}
	defer f.Close()
	seg := &segment{first: first}
	r := bufio.NewReaderSize(f, 1<<16)
	var good int64
	var bad error
	for {
		e, n, err := readRecord(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			bad = err
			break
		}
		good += n
		seg.last = e.Seq
		k := e.Key
		if c := o.cursors[k]; e.Seq > c.Seq {
			o.pending[k] = append(o.pending[k], e)
			o.bytes += e.Size()
			o.count++
		}
	}
	seg.size = good
	if bad == nil {
		return seg, nil
	}
	if newest {
		o.log.Warn("OUTBOX: truncated a torn tail", "segment", name, "at", good, "err", bad)
		if err := os.Truncate(name, good); err != nil {
			return nil, fmt.Errorf("outbox: truncate segment %s at %d: %w", name, good, err)
		}
		return seg, nil
	}
	o.log.Error("OUTBOX: damaged segment quarantined; entries after the damage in it are lost", "segment", name, "at", good, "err", bad)
	if err := os.Rename(name, name+".bad"); err != nil {
		return nil, fmt.Errorf("outbox: quarantine segment %s: %w", name, err)
	}
	return nil, nil
}

// readRecord reads one record; io.EOF at a clean end, another error for a
// torn or damaged record.
func readRecord(r *bufio.Reader) (Entry, int64, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF {
			return Entry{}, 0, io.EOF
		}
		return Entry{}, 0, fmt.Errorf("record header cut short: %w", err)
	}
	n := binary.BigEndian.Uint32(h[0:])
	if n < fixedLen || n > 64<<20 {
		return Entry{}, 0, fmt.Errorf("record length %d out of range", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return Entry{}, 0, fmt.Errorf("record of %d bytes cut short: %w", n, err)
	}
	if sum := crc32.Checksum(p, crcTable); sum != binary.BigEndian.Uint32(h[4:]) {
		return Entry{}, 0, fmt.Errorf("record checksum %08x, payload has %08x", binary.BigEndian.Uint32(h[4:]), sum)
	}
	tl := int(binary.BigEndian.Uint16(p[32:]))
	if fixedLen+tl > len(p) {
		return Entry{}, 0, fmt.Errorf("record topic length %d past its payload", tl)
	}
	e := Entry{
		Seq:      binary.BigEndian.Uint64(p[0:]),
		Accepted: time.UnixMilli(int64(binary.BigEndian.Uint64(p[8:]))),
		ID:       int64(binary.BigEndian.Uint64(p[16:])),
		Key:      Key{Partition: int(int32(binary.BigEndian.Uint32(p[24:]))), Topic: string(p[fixedLen : fixedLen+tl])},
		Flag:     int32(binary.BigEndian.Uint32(p[28:])),
		Body:     p[fixedLen+tl:],
	}
	return e, int64(headerLen + n), nil
}

func appendRecord(dst []byte, e *Entry) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, headerLen)...)
	dst = binary.BigEndian.AppendUint64(dst, e.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Accepted.UnixMilli()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ID))
	dst = binary.BigEndian.AppendUint32(dst, uint32(int32(e.Key.Partition)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(e.Flag))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(e.Key.Topic)))
	dst = append(dst, e.Key.Topic...)
	dst = append(dst, e.Body...)
	p := dst[start+headerLen:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(p)))
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(p, crcTable))
	return dst
}

// Append accepts entries (their Seq and Accepted are set here; the bodies
// are copied), in order, once written and fsynced; or refuses them all
// with a *BoundError, or fails with the write's or the fsync's error.
func (o *Outbox) Append(entries []Entry) error {
	f, last, err := o.write(entries)
	if err != nil {
		return err
	}
	if o.writeHook != nil {
		o.writeHook()
	}
	return o.sync(f, last)
}

// write writes entries at the end of the newest segment and makes them
// pending (visible once synced); it returns the file and the last seq.
func (o *Outbox) write(entries []Entry) (*os.File, uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, 0, ErrClosed
	}
	now := o.opts.Now()
	var size int64
	for i := range entries {
		if len(entries[i].Key.Topic) > maxTopicLen {
			return nil, 0, fmt.Errorf("outbox: topic name of %d bytes", len(entries[i].Key.Topic))
		}
		size += entries[i].Size()
	}
	if err := o.checkBoundsLocked(now, size); err != nil {
		return nil, 0, err
	}
	if o.f == nil || (len(o.segs) > 0 && o.segs[len(o.segs)-1].size >= o.opts.SegmentBytes) {
		if err := o.rollLocked(); err != nil {
			return nil, 0, err
		}
	}
	seg := &o.segs[len(o.segs)-1]
	buf := make([]byte, 0, size)
	for i := range entries {
		e := entries[i]
		e.Seq = o.nextSeq
		o.nextSeq++
		e.Accepted = now
		e.Body = slices.Clone(e.Body)
		buf = appendRecord(buf, &e)
		o.pending[e.Key] = append(o.pending[e.Key], e)
	}
	last := o.nextSeq - 1
	if _, err := o.f.Write(buf); err != nil {
		// Part of it may be in the file: cut it off, so that what
		// follows is not read after a torn record.
		o.f.Truncate(seg.size)
		o.f.Seek(seg.size, io.SeekStart)
		o.nextSeq -= uint64(len(entries))
		for i := range entries {
			k := entries[i].Key
			o.pending[k] = o.pending[k][:len(o.pending[k])-1]
			if len(o.pending[k]) == 0 {
				delete(o.pending, k)
			}
		}
		return nil, 0, fmt.Errorf("outbox: write %d entries to %s: %w", len(entries), o.f.Name(), err)
	}
	seg.size += int64(len(buf))
	seg.last = last
	o.bytes += size
	o.count += int64(len(entries))
	return o.f, last, nil
}

// sync returns once entries up to last, written to f, are fsynced: by an
// fsync of its own, which covers every entry written to f before it
// began, or by one of f that began after them. Each segment keeps what
// was fsynced of it: an fsync of a newer segment (after a roll) covers
// nothing of an older one, whose writers may not have synced yet. So an
// fsync of f first fsyncs the older segments not wholly synced: once
// sync returns, every entry up to last is fsynced, and pending.
func (o *Outbox) sync(f *os.File, last uint64) error {
	o.syncMu.Lock()
	defer o.syncMu.Unlock()
	o.mu.Lock()
	if o.failed != nil {
		err := o.failed
		o.mu.Unlock()
		return err
	}
	seg := o.segmentLocked(f)
	if seg == nil || seg.synced >= last {
		// Synced already (a segment is removed only once its entries
		// are confirmed, so synced long before).
		o.mu.Unlock()
		return nil
	}
	// Everything written to f so far, and to the segments before it; a
	// later segment's entries are synced by their own writers.
	type todo struct {
		f      *os.File
		target uint64
	}
	var files []todo
	for i := range o.segs {
		s := &o.segs[i]
		if s.f != nil && s.last != 0 && s.synced < s.last {
			files = append(files, todo{s.f, s.last})
		}
		if s.f == f {
			break
		}
	}
	o.mu.Unlock()
	for _, t := range files {
		if o.syncHook != nil {
			o.syncHook(t.f.Name())
		}
		err := t.f.Sync()
		o.mu.Lock()
		if err != nil {
			// The page cache's state is unknown after a failed fsync:
			// stop taking entries rather than acknowledge what may be
			// lost.
			o.failed = fmt.Errorf("outbox: fsync %s: %w (outbox stopped)", t.f.Name(), err)
			o.closed = true
			o.mu.Unlock()
			return o.failed
		}
		if s := o.segmentLocked(t.f); s != nil && t.target > s.synced {
			s.synced = t.target
		}
		o.synced = max(o.synced, o.syncedPrefixLocked())
		o.mu.Unlock()
	}
	return nil
}

// segmentLocked returns the segment written to f, or nil.
func (o *Outbox) segmentLocked(f *os.File) *segment {
	for i := range o.segs {
		if o.segs[i].f == f {
			return &o.segs[i]
		}
	}
	return nil
}

// syncedPrefixLocked returns the seq up to which every entry is fsynced:
// the segments in order, up to the first one not wholly synced.
func (o *Outbox) syncedPrefixLocked() uint64 {
	w := o.synced
	for i := range o.segs {
		seg := &o.segs[i]
		if seg.last == 0 {
			continue // empty
		}
		if seg.synced < seg.last {
			return max(w, seg.synced)
		}
		w = max(w, seg.last)
	}
	return w
}

// checkBoundsLocked refuses size more bytes at now.
func (o *Outbox) checkBoundsLocked(now time.Time, size int64) error {
	if o.bytes+size > o.opts.MaxBytes {
		return &BoundError{Bound: "outboxMaxBytes", Limit: strconv.FormatInt(o.opts.MaxBytes, 10),
			Now: fmt.Sprintf("%d bytes pending in %d entries, %d more asked", o.bytes, o.count, size)}
	}
	if oldest := o.oldestLocked(); !oldest.IsZero() && now.Sub(oldest) > o.opts.MaxAge {
		return &BoundError{Bound: "outboxMaxAge", Limit: o.opts.MaxAge.String(),
			Now: fmt.Sprintf("the oldest pending entry was accepted %v ago", now.Sub(oldest).Round(time.Millisecond))}
	}
	return nil
}

func (o *Outbox) oldestLocked() time.Time {
	var oldest time.Time
	for _, es := range o.pending {
		if len(es) > 0 && (oldest.IsZero() || es[0].Accepted.Before(oldest)) {
			oldest = es[0].Accepted
		}
	}
	return oldest
}

// rollLocked starts a new segment at nextSeq.
func (o *Outbox) rollLocked() error {
	name := filepath.Join(o.opts.Dir, segName(o.nextSeq))
	// The old segment stays open (its writers may still be syncing it)
	// until it is removed or the outbox closed.
	o.f = nil
	// The newest segment of a recovered outbox, when it starts at
	// nextSeq (empty), is reused.
	if n := len(o.segs); n > 0 && o.segs[n-1].first == o.nextSeq {
		o.segs = o.segs[:n-1]
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("outbox: create segment %s: %w", name, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("outbox: create segment %s: %w", name, err)
	}
	if err := syncDir(o.opts.Dir); err != nil {
		f.Close()
		return err
	}
	o.f = f
	o.segs = append(o.segs, segment{first: o.nextSeq, f: f})
	o.log.Info("OUTBOX: new segment", "segment", name)
	return nil
}

// Keys lists the partitions with pending entries.
func (o *Outbox) Keys() []Key {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys := make([]Key, 0, len(o.pending))
	for k, es := range o.pending {
		if len(es) > 0 && es[0].Seq <= o.synced {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return a.Partition - b.Partition
	})
	return keys
}

// Pending returns up to n of k's pending fsynced entries (at most
// maxBytes of bodies, at least one), oldest first. The entries' bodies
// must not be changed.
func (o *Outbox) Pending(k Key, n int, maxBytes int) []Entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	es := o.pending[k]
	size := 0
	for i := range es {
		size += len(es[i].Body)
		if i == n || (i > 0 && size > maxBytes) || es[i].Seq > o.synced {
			es = es[:i]
			break
		}
	}
	return slices.Clone(es)
}

// Cursor returns k's cursor and whether it has one.
func (o *Outbox) Cursor(k Key) (Cursor, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.cursors[k]
	return c, ok
}

// SetCursor records, durably, that k's next entry goes at the master's
// offset off (the gateway sets it before it sends k's first entry, so a
// later resend knows where to look for what it sent).
func (o *Outbox) SetCursor(k Key, off int64) error {
	o.cursorMu.Lock()
	defer o.cursorMu.Unlock()
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return ErrClosed
	}
	prev, had := o.cursors[k]
	c := prev
	c.Offset = off
	o.cursors[k] = c
	data := o.cursorDataLocked()
	o.mu.Unlock()
	if err := o.writeCursor(data); err != nil {
		o.restoreCursor(k, prev, had)
		return err
	}
	return nil
}

// restoreCursor puts k's cursor back as it was before a cursor write that
// failed.
func (o *Outbox) restoreCursor(k Key, prev Cursor, had bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if had {
		o.cursors[k] = prev
	} else {
		delete(o.cursors, k)
	}
}

// Confirm records, durably, that k's pending entries up to seq are stored
// at the master, the last ending at the master's offset off, and drops
// them; segments left with no pending entry are removed. The cursor file
// is written and fsynced with mu released: Appends go on meanwhile.
func (o *Outbox) Confirm(k Key, seq uint64, off int64) error {
	o.cursorMu.Lock()
	defer o.cursorMu.Unlock()
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return ErrClosed
	}
	prev, had := o.cursors[k]
	if seq < prev.Seq {
		o.mu.Unlock()
		return fmt.Errorf("outbox: confirm %s up to %d, already confirmed up to %d", k, seq, prev.Seq)
	}
	o.cursors[k] = Cursor{Seq: seq, Offset: off}
	data := o.cursorDataLocked()
	o.mu.Unlock()
	if err := o.writeCursor(data); err != nil {
		o.restoreCursor(k, prev, had)
		return err
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil // durable; the next Open drops them
	}
	o.dropConfirmedLocked()
	gone := o.takeConfirmedSegmentsLocked()
	o.mu.Unlock()
	return o.removeSegments(gone)
}

// dropConfirmedLocked drops the pending entries the cursors confirm.
func (o *Outbox) dropConfirmedLocked() {
	for k, es := range o.pending {
		c := o.cursors[k]
		i := 0
		for i < len(es) && es[i].Seq <= c.Seq {
			o.bytes -= es[i].Size()
			o.count--
			i++
		}
		if i == len(es) {
			delete(o.pending, k)
		} else if i > 0 {
			// Resliced, not copied: a copy per confirmation made a long
			// drain quadratic, under the lock Appends wait for. The
			// confirmed entries' bodies are let go; their slots go once
			// an append outgrows the array.
			clear(es[:i])
			o.pending[k] = es[i:]
		}
	}
}

// takeConfirmedSegmentsLocked takes the segments, other than the newest,
// that hold no pending entry out of o.segs; the caller removes them
// (removeSegments) once mu is released.
func (o *Outbox) takeConfirmedSegmentsLocked() []segment {
	low := o.nextSeq
	for _, es := range o.pending {
		if len(es) > 0 {
			low = min(low, es[0].Seq)
		}
	}
	var gone []segment
	for len(o.segs) > 1 && o.segs[0].last < low {
		gone = append(gone, o.segs[0])
		o.segs = o.segs[1:]
	}
	return gone
}

// removeSegments closes and removes segments whose entries are all
// confirmed (a crash before it leaves them to the next Open, which drops
// their entries by the cursor).
func (o *Outbox) removeSegments(gone []segment) error {
	var errs []error
	for _, seg := range gone {
		name := filepath.Join(o.opts.Dir, segName(seg.first))
		if seg.f != nil {
			seg.f.Close() // its entries are confirmed: synced long before
		}
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("outbox: remove confirmed segment %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// cursor file: one line per partition, "seq offset partition topic", then
// "crc <crc32c of the lines before>". cursorDataLocked is its contents now.
func (o *Outbox) cursorDataLocked() string {
	keys := make([]Key, 0, len(o.cursors))
	for k := range o.cursors {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	var sb strings.Builder
	for _, k := range keys {
		c := o.cursors[k]
		fmt.Fprintf(&sb, "%d %d %d %s\n", c.Seq, c.Offset, k.Partition, k.Topic)
	}
	body := sb.String()
	return body + "crc " + strconv.FormatUint(uint64(crc32.Checksum([]byte(body), crcTable)), 10) + "\n"
}

// writeCursor replaces the cursor file with data, durably. The caller
// holds cursorMu, not mu.
func (o *Outbox) writeCursor(data string) error {
	name := filepath.Join(o.opts.Dir, cursorName)
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("outbox: write cursor %s: %w", tmp, err)
	}
	_, err = f.WriteString(data)
	if o.cursorHook != nil {
		o.cursorHook()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("outbox: write cursor %s: %w", name, err)
	}
	return syncDir(o.opts.Dir)
}

func (o *Outbox) loadCursor() error {
	name := filepath.Join(o.opts.Dir, cursorName)
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outbox: read cursor %s: %w", name, err)
	}
	text := string(data)
	i := strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n") + 1
	body, tail := text[:i], strings.TrimSpace(text[i:])
	if tail != "crc "+strconv.FormatUint(uint64(crc32.Checksum([]byte(body), crcTable)), 10) {
		// Written by rename only: a damaged cursor is not a torn write.
		return fmt.Errorf("outbox: cursor %s fails its checksum: fix or remove it by hand (a resend then finds what the master has)", name)
	}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			return fmt.Errorf("outbox: cursor %s: bad line %q", name, line)
		}
		seq, err1 := strconv.ParseUint(f[0], 10, 64)
		off, err2 := strconv.ParseInt(f[1], 10, 64)
		p, err3 := strconv.Atoi(f[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("outbox: cursor %s: bad line %q: %w", name, line, err)
		}
		o.cursors[Key{Topic: f[3], Partition: p}] = Cursor{Seq: seq, Offset: off}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("outbox: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("outbox: fsync directory %s: %w", dir, err)
	}
	return nil
}

// Stats reports the outbox's state.
func (o *Outbox) Stats() Stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Stats{Entries: o.count, Bytes: o.bytes, Oldest: o.oldestLocked(), Files: len(o.segs)}
}

// Close closes the outbox's files; pending entries stay on disk.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	o.f = nil
	var errs []error
	for i := range o.segs {
		if f := o.segs[i].f; f != nil {
			errs = append(errs, f.Close())
			o.segs[i].f = nil
		}
	}
	return errors.Join(errs...)
}
