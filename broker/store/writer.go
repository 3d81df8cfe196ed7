package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"metaq/internal/bufpool"
)

// payloads recycles the encoded records of appends: AppendAsync fills one,
// the writer copies it into its write buffer and gives it back.
var payloads = bufpool.New(4<<10, 8<<20)

type reqKind uint8

const (
	reqAppend reqKind = iota
	reqRaw
	reqCreate
	reqDelete
	reqFlush
	reqCheckpoint
	reqFence // TruncatePartition (and what older versions did at damage)
	reqHole
	reqSkip
	reqFill
	reqProbe
)

// request is one unit of work for the writer goroutine.
//
// The fields the writer reads and writes for a part of an AppendManyAsync
// call (and finishAll reads once its commit returned) come first: a part
// is filled in on the caller's core and taken on the writer's, so each
// cache line of it that the writer touches crosses between the cores, and
// at 10,000 partitions every put is a part of its own. The rest (other
// kinds' arguments, a group's own fields) follow.
type request struct {
	kind    reqKind
	synced  bool         // must wait for fsync before done
	unit    bool         // a group that is one unit (AppendUnitAsync, AppendRawUnit): the writer puts a unit entry before its parts
	pending atomic.Int32 // parts of a group not yet finished
	// hint is the partition of key when the request was made, looked up
	// by the caller to spare the writer a map lookup; it holds while
	// partsGen is still hintGen (no partition has left the table since).
	hint    *partition
	hintGen uint64
	key     pkey
	payload []byte
	recOffs []int32 // reqAppend: record starts in payload
	ids     []int64 // reqAppend: preset ids (0 = assign); the writer fills them in
	records int
	policy  Policy
	parent  *request // a part's group

	// answers, written by the writer before done is closed
	offset int64 // partition offset of payload[0]
	end    int64 // partition end after the request
	err    error
	done   chan struct{}
	notify func() // called just before done is closed (see AppendAsync)
	// parts is where a group's parts live (AppendManyAsync), given back
	// when the group finishes.
	parts *partsBuf

	p  *partition // reqHole
	at int64      // reqCreate: start; reqRaw: expected partition end; reqHole, reqFill: chunk offset; reqSkip: new end
	n  int64      // reqHole: chunk length

	// group is set on the request AppendManyAsync queues: the parts the
	// writer takes in its place, in order, all in the same batch. A part
	// has no done channel; the last to finish finishes the group.
	group []*request
	size  int // payload bytes (of all parts for a group); parts leave it 0
	// queuedAt is when the request was queued (only with cycle stats on).
	queuedAt time.Time
}

// finish publishes the request's outcome: notify runs, then done is
// closed, so whoever waits on done sees what notify did.
//
// A part is gone once it finished its group: the group gives its parts
// back (partsBuf), so after finish returns nobody may read the part, and
// finish itself reads nothing of r after finishing the group. The writer
// finishes a group's parts in batch order, where they are next to each
// other (addRequest), and reads no part of a group after its last.
func (r *request) finish() {
	if r.notify != nil {
		r.notify()
	}
	if r.done != nil {
		close(r.done)
	}
	if pb := r.parts; pb != nil {
		r.parts, r.group = nil, nil
		pb.release()
		return
	}
	if g := r.parent; g != nil && g.pending.Add(-1) == 0 {
		g.finish()
	}
}

// pendingChunk is a data entry of the current batch, applied to its
// partition's index once the write succeeded.
type pendingChunk struct {
	p       *partition
	pos     int64
	n       int64
	ms      int64
	records int64
	fill    bool // a repair (reqFill): the chunk goes into the hole at fillOff
	fillOff int64
}

// writerState is owned by the writer goroutine (and by recovery before it starts).
type writerState struct {
	// needDefines: the active segment still lacks its leading defines
	// (a roll's write failed); the next write puts them first.
	needDefines bool
	rollFailing bool       // logged once until a roll succeeds
	salvaged    []salvaged // recovery: intact records of damaged entries (see salvage)
	// recovery's scan: chunks of partitions whose definition was lost, the
	// pids deleted, the first pid not known before the scan
	orphans  map[uint32][]orphan
	deadPids map[uint32]bool
	scanPid0 uint32
	active   *segment
	pos      int64 // log end written
	buf      []byte
	ids      idGen
	lastMs   int64
	pend     []pendingChunk
	// marks are the batch's unit entries (AppendUnitAsync,
	// AppendRawUnit): where each starts in the batch's buffer and where
	// its unit's entries end, patched in before the write (patchUnit).
	marks      []unitMark
	dirty      dirtySet
	unflushed  map[string]int
	deadline   time.Time
	timer      <-chan time.Time
	jobs       int // group commits started or queued, not yet completed
	sinceSweep int // chunks indexed since the last sweepTails
	// tailCap is the capacity an empty tail is given at its first chunk
	// (0: not yet known), see tailCapFor.
	tailCap int
	touched int64 // what touchPartitions read (kept so the reads stay)
	// idxBuf and idxTodo are reused by every flush of index blocks
	// (flushTailLocked, flushTailsOf), empty between them.
	idxBuf  []byte
	idxTodo []pendBlock
	// spareJob is a completed group commit kept for the next (newJob).
	spareJob *syncJob
	// sealing is the last roll's sealing of the segment it left, until
	// waitSeal saw it done; one that failed stays until it is done again
	// (maybeRoll).
	sealing *sealJob
}

// unitMark is a unit's entry in the batch being written: its start in
// the batch's buffer and the end of the unit's last entry there.
type unitMark struct{ at, end int }

// rawUnitFits reports whether every part of the replica's unit g
// (AppendRawUnit) starts at its partition's written end (or creates its
// partition): only then is any of it written.
func (s *Store) rawUnitFits(g *request) bool {
	gen := s.partsGen.Load()
	ends := make(map[pkey]int64, len(g.group)) // a partition's end after the unit's earlier parts
	for _, q := range g.group {
		end, ok := ends[q.key]
		if !ok {
			p := q.hint
			if p == nil || q.hintGen != gen {
				p = s.lookup(q.key.topic, q.key.num)
			}
			end = q.at // created there
			if p != nil {
				end = p.wEnd
			}
		}
		if end != q.at {
			return false
		}
		ends[q.key] = q.at + int64(len(q.payload))
	}
	return true
}

// partEnd is a partition and its end.
type partEnd struct {
	p   *partition
	end int64
}

// dirtySet is the partitions written since their last fdatasync was
// queued, with their ends, in the order first written. It is the writer
// goroutine's: a partition's place in it is its wDirty field, so marking
// one costs no map operation, and handing the set to a group commit (take)
// reads no partition's lock: with a batch spread over thousands of
// partitions each partition is touched once per commit, when its chunk is
// indexed.
type dirtySet struct {
	list []partEnd // a removed partition leaves p nil
	n    int       // partitions in list
}

// mark puts p into the set with end as its end (the newest wins).
func (d *dirtySet) mark(p *partition, end int64) {
	if i := p.wDirty; i > 0 {
		d.list[i-1].end = end
		return
	}
	d.list = append(d.list, partEnd{p, end})
	p.wDirty = int32(len(d.list))
	d.n++
}

// remove takes p out of the set.
func (d *dirtySet) remove(p *partition) {
	if i := p.wDirty; i > 0 {
		d.list[i-1].p = nil
		p.wDirty = 0
		d.n--
	}
}

// len is the number of partitions in the set.
func (d *dirtySet) len() int { return d.n }

// take appends the set to dst and empties it.
func (d *dirtySet) take(dst []partEnd) []partEnd {
	for _, x := range d.list {
		if x.p != nil {
			x.p.wDirty = 0
			dst = append(dst, x)
		}
	}
	clear(d.list)
	d.list, d.n = d.list[:0], 0
	return dst
}

// syncJob is one group commit's fdatasync, run by the syncer goroutine
// while the writer goes on writing the next batch into the page cache. At
// most one is in flight; what is written meanwhile gathers in the next job
// (see syncQueue).
type syncJob struct {
	f     File
	path  string
	pos   int64         // log end the sync covers
	parts []partEnd     // partition ends it makes durable (a partition may appear more than once)
	reqs  []*request    // answered when it returns
	err   error         // set by the syncer
	took  time.Duration // set by the syncer
	// With cycle stats on: the commit's first write, and its fdatasync's
	// start and end (the last two set by the syncer).
	first, syncStart, syncEnd time.Time
}

// syncQueue passes group commits from the writer to the syncer. While a
// commit is in flight the writer adds what it writes to next, and the
// syncer starts next itself the moment the in-flight fdatasync returns.
// Waiting for the writer goroutine to start it instead left the disk idle
// for a scheduling round trip (measured 60-90 µs, a fifth of each cycle,
// under load): the writer may be busy writing, or queued behind the
// goroutines its answers have just woken.
type syncQueue struct {
	mu       sync.Mutex
	inflight *syncJob // being fdatasynced; after a failure, until the writer has completed it
	next     *syncJob // written since inflight started
}

// syncer runs the writer's fdatasyncs, one at a time, and hands each
// finished one back to the writer in order. It stops when jobs is closed
// (by the writer, on its way out).
func (s *Store) syncer(jobs <-chan *syncJob) {
	defer close(s.syncerDone)
	var idleFrom time.Time
	for j := range jobs {
		for j != nil {
			start := time.Now()
			j.err = j.f.Datasync()
			j.took = time.Since(start)
			if s.cs != nil {
				if !idleFrom.IsZero() {
					s.cs.idleNs.Add(int64(start.Sub(idleFrom)))
				}
				idleFrom = start.Add(j.took)
				j.syncStart, j.syncEnd = start, idleFrom
			}
			var next *syncJob
			s.sq.mu.Lock()
			if j.err == nil {
				next = s.sq.next
				s.sq.next = nil
				s.sq.inflight = next
			}
			// After a failure inflight stays set, so the writer queues
			// rather than starts another fdatasync: one could succeed after
			// the kernel dropped the failed pages. The writer fails next.
			s.sq.mu.Unlock()
			s.syncDone <- j
			j = next
		}
	}
}

func (s *Store) run() {
	defer close(s.done)
	defer func() {
		close(s.syncJobs)
		<-s.syncerDone
	}()
	batch := make([]*request, 0, 256)
	for {
		select {
		case r := <-s.reqs:
			s.noteTaken(r)
			batch = s.gather(addRequest(batch[:0], r))
			t := s.cycleNow()
			s.process(batch)
			if s.cs != nil {
				s.cs.batches.Add(1)
				s.cs.writeNs.Add(int64(time.Since(t)))
			}
		case j := <-s.syncDone:
			s.completeSync(j)
		case <-s.w.timer:
			s.w.timer = nil
			s.intervalTick()
		case <-s.quit:
			// Close set closed before quit, so nothing new is queued:
			// finish what is.
			for {
				select {
				case r := <-s.reqs:
					batch = s.gather(addRequest(batch[:0], r))
					s.process(batch)
					continue
				default:
				}
				break
			}
			s.finishInflight()
			return
		}
	}
}

// noteTaken counts r's time in the queue (cycle stats).
func (s *Store) noteTaken(r *request) {
	if s.cs != nil && !r.queuedAt.IsZero() {
		s.cs.taken.Add(1)
		s.cs.queuedNs.Add(int64(time.Since(r.queuedAt)))
	}
}

// addRequest adds r to batch, or a group's parts in its place.
func addRequest(batch []*request, r *request) []*request {
	if r.group != nil {
		return append(batch, r.group...)
	}
	return append(batch, r)
}

// gather adds every queued request to batch, up to MaxBatchBytes.
func (s *Store) gather(batch []*request) []*request {
	size := 0
	for _, r := range batch {
		size += len(r.payload)
	}
	for size < s.opts.MaxBatchBytes && len(batch) < 4096 {
		select {
		case r := <-s.reqs:
			s.noteTaken(r)
			batch = addRequest(batch, r)
			size += r.size
		default:
			return batch
		}
	}
	return batch
}

func (s *Store) intervalTick() {
	w := &s.w
	if w.deadline.IsZero() {
		return
	}
	if now := s.clk.Now(); now.Before(w.deadline) {
		w.timer = s.clk.After(w.deadline.Sub(now))
		return
	}
	s.syncNow()
}

// resolve finds or creates (at start) the partition of key. Only the writer
// creates partitions; the caller writes the define entry of a new one.
func (s *Store) resolve(key pkey, start int64) (*partition, bool) {
	s.mu.RLock()
	p := s.parts[key]
	s.mu.RUnlock()
	if p != nil {
		return p, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[key]; p != nil {
		return p, false
	}
	pid := s.nextPid
	s.nextPid++
	p = newPartition(key, pid, start)
	s.setPartLocked(p)
	s.byPid[pid] = p
	// A new partition's first tail starts small: while a topic's
	// partitions are being created the count is not yet known, and the
	// first of 10,000 would each take a whole block. Tails that start
	// again after a roll or a flush take the share of the partitions
	// there are, which only goes down here.
	p.tail = make([]idxEntry, 0, min(minTailCap, s.opts.blockEntries))
	if c := tailCapFor(len(s.parts), s.opts.tailBudget, s.opts.blockEntries); c < s.w.tailCap {
		s.w.tailCap = c
	}
	return p, true
}

func (s *Store) process(batch []*request) {
	if err := s.fatal(); err != nil {
		for _, r := range batch {
			r.err = err
			r.finish()
		}
		return
	}
	w := &s.w
	pipelined := true
	for _, r := range batch {
		if r.kind != reqAppend && r.kind != reqRaw {
			pipelined = false
		}
	}
	if !pipelined {
		// Partition creation, deletion, fences, flushes and checkpoints
		// see every earlier commit finished, and no segment being sealed
		// (a fence or a hole may cut a block; a checkpoint vouches for
		// sealed segments only).
		s.finishInflight()
		s.waitSeal()
	}
	ms := s.clk.Now().UnixMilli()
	if ms < w.lastMs {
		ms = w.lastMs // keep append times monotonic in the log
	}
	w.lastMs = ms
	buf := w.buf[:0]
	base := w.pos
	w.pend = w.pend[:0]
	w.marks = w.marks[:0]
	var created, deleted []*partition
	needSync := false
	if w.needDefines {
		// A roll could not write the new segment's leading defines (the
		// disk was full): they go first now.
		buf = s.appendDefines(buf)
	}
	w.touched = touchPartitions(batch)
	for _, r := range batch {
		switch r.kind {
		case reqFlush, reqCheckpoint:
			needSync, r.synced = true, true
		case reqProbe:
			r.err = s.probeSpace()
		case reqFence:
			// Applied before the batch's appends take their offsets, and
			// recorded in the log as a define entry with the new end so a
			// full scan reaches the same state.
			needSync, r.synced = true, true
			if s.fence(r.p, r.at) {
				buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: r.p.pid, off: r.at, ms: ms}, encodeDefine(r.p.key.topic, r.p.key.num))
			}
		case reqHole:
			// The partition's end goes into the log as a define entry: if
			// the damaged chunk was its last, the full scan at the next
			// start-up learns from it that those offsets were handed out.
			needSync, r.synced = true, true
			if s.markHole(r.p, r.at, r.n) {
				buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: r.p.pid, off: r.p.wEnd, ms: ms}, encodeDefine(r.p.key.topic, r.p.key.num))
			}
		case reqSkip:
			needSync, r.synced = true, true
			p, isNew := s.resolve(r.key, r.at)
			if isNew {
				created = append(created, p)
			} else if r.err = s.skip(p, r.at, ms); r.err != nil {
				continue
			}
			buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: r.at, ms: ms}, encodeDefine(r.key.topic, r.key.num))
			r.end = r.at
		case reqFill:
			needSync, r.synced = true, true
			p := s.lookup(r.key.topic, r.key.num)
			if p == nil {
				r.err = ErrNoPartition
				continue
			}
			if r.err = s.checkFill(p, r.at, int64(len(r.payload))); r.err != nil {
				continue
			}
			pos := base + int64(len(buf))
			buf = appendEntry(buf, entryHeader{typ: entryData, pid: p.pid, off: r.at, ms: ms}, r.payload)
			w.pend = append(w.pend, pendingChunk{p: p, pos: pos, n: int64(len(r.payload)), ms: ms, records: int64(r.records), fill: true, fillOff: r.at})
		case reqCreate:
			needSync, r.synced = true, true
			p, isNew := s.resolve(r.key, r.at)
			if isNew {
				created = append(created, p)
				buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: r.at, ms: ms}, encodeDefine(r.key.topic, r.key.num))
			}
		case reqDelete:
			needSync, r.synced = true, true
			// Out of the table at once, so a later request of this batch
			// for the same key creates a new partition instead of writing
			// into the deleted one.
			s.mu.Lock()
			p := s.parts[r.key]
			if p != nil {
				s.deletePartLocked(r.key)
				s.partsGen.Add(1)
			}
			s.mu.Unlock()
			if p == nil {
				r.err = ErrNoPartition
				continue
			}
			deleted = append(deleted, p)
			buf = appendEntry(buf, entryHeader{typ: entryDelete, pid: p.pid, off: p.wEnd, ms: ms}, nil)
		case reqAppend, reqRaw:
			g := r.parent
			unit := g != nil && g.unit
			if unit && r == g.group[0] {
				// The unit's entry goes first, before any define of a
				// partition it creates: a reader of the log (ReadLog, a
				// scan) learns where the unit ends before it meets any
				// of its entries. A replica's unit is written whole or
				// not at all.
				if r.kind == reqRaw && !s.rawUnitFits(g) {
					for _, q := range g.group {
						q.err = fmt.Errorf("a partition's end is not where the unit's records start: %w", ErrOffsetMismatch)
					}
				} else {
					w.marks = append(w.marks, unitMark{at: len(buf)})
					buf = appendEntry(buf, entryHeader{typ: entryUnit, ms: ms}, nil)
				}
			}
			if r.err != nil {
				continue // a replica's unit that does not fit (above)
			}
			start := int64(0)
			if r.kind == reqRaw {
				start = r.at
			}
			p, isNew := r.hint, false
			if p == nil || r.hintGen != s.partsGen.Load() {
				p, isNew = s.resolve(r.key, start)
			}
			if isNew {
				created = append(created, p)
				buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: start, ms: ms}, encodeDefine(r.key.topic, r.key.num))
			}
			if r.kind == reqRaw && p.wEnd != r.at {
				r.end = p.wEnd
				r.err = fmt.Errorf("partition end is %d: %w", p.wEnd, ErrOffsetMismatch)
				continue
			}
			if r.kind == reqAppend {
				for i, o := range r.recOffs {
					if r.ids[i] == 0 {
						r.ids[i] = w.ids.next(ms)
						binary.BigEndian.PutUint64(r.payload[o+8:], uint64(r.ids[i]))
					}
				}
			}
			r.offset = p.wEnd
			pos := base + int64(len(buf))
			buf = appendEntry(buf, entryHeader{typ: entryData, pid: p.pid, off: p.wEnd, ms: ms}, r.payload)
			n := int64(len(r.payload))
			if r.kind == reqAppend {
				// Copied into the write buffer; AppendAsync made it. A
				// group's parts share their parent's buffer, given back
				// after the last part (all are in this batch).
				switch g := r.parent; {
				case g == nil:
					payloads.Put(r.payload)
				case r == g.group[len(g.group)-1]:
					payloads.Put(g.payload)
					g.payload = nil
				}
				r.payload = nil
			}
			w.pend = append(w.pend, pendingChunk{})
			pc := &w.pend[len(w.pend)-1]
			pc.p, pc.pos, pc.n, pc.ms, pc.records = p, pos, n, ms, int64(r.records)
			p.wEnd += n
			r.end = p.wEnd
			if isNew {
				// The partition's define again, after its first records: if
				// damage takes the first one, recovery still learns where
				// the partition went on before the next segment restates it.
				buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: p.wEnd, ms: ms}, encodeDefine(r.key.topic, r.key.num))
			}
			if unit {
				// A unit's parts are next to each other in the batch.
				w.marks[len(w.marks)-1].end = len(buf)
			}
			if r.policy.UnflushThreshold <= 0 {
				needSync, r.synced = true, true
				continue
			}
			t := r.key.topic
			w.unflushed[t]++
			if w.unflushed[t] >= r.policy.UnflushThreshold {
				needSync = true
			}
			if r.policy.UnflushInterval > 0 {
				dl := s.clk.Now().Add(r.policy.UnflushInterval)
				if w.deadline.IsZero() || dl.Before(w.deadline) {
					w.deadline = dl
					w.timer = s.clk.After(r.policy.UnflushInterval)
				}
			}
		}
	}
	for _, m := range w.marks {
		patchUnit(buf, m.at, max(m.end, m.at+entryHeaderLen))
	}
	if len(buf) > 0 {
		if err := s.writeActive(buf); err != nil {
			herr := s.writeFailed(err)
			for _, pc := range w.pend {
				pc.p.wEnd = pc.p.end
			}
			s.mu.Lock()
			s.partsGen.Add(1)
			for _, p := range created {
				s.deletePartLocked(p.key)
				delete(s.byPid, p.pid)
			}
			for _, p := range deleted {
				if s.parts[p.key] == nil {
					s.setPartLocked(p)
				}
			}
			s.mu.Unlock()
			for _, r := range batch {
				if r.err == nil {
					r.err = herr
				}
				r.finish()
			}
			w.buf = buf[:0]
			return
		}
		segBytes := s.opts.SegmentBytes
		var idxErr error
		if w.tailCap == 0 {
			s.mu.RLock()
			w.tailCap = tailCapFor(len(s.parts), s.opts.tailBudget, s.opts.blockEntries)
			s.mu.RUnlock()
		}
		for _, pc := range w.pend {
			pc.p.mu.Lock()
			if !pc.fill {
				pc.p.tailRoomLocked(w.tailCap)
			}
			if pc.fill {
				pc.p.fillLocked(pc.fillOff, pc.n, pc.pos, pc.ms)
				pc.p.mu.Unlock()
				s.dropCheckpoint() // fills live in memory: the next start-up scans them
				continue
			}
			pc.p.addChunkLocked(pc.pos, pc.n, pc.ms, pc.records, segBytes)
			pc.p.messages += pc.records
			if len(pc.p.tail) >= s.opts.blockEntries && idxErr == nil {
				idxErr = s.flushTailLocked(pc.p, w.active)
			}
			end := pc.p.end
			pc.p.mu.Unlock()
			w.dirty.mark(pc.p, end)
		}
		w.sinceSweep += len(w.pend)
		if w.sinceSweep >= s.opts.tailBudget/4 && idxErr == nil {
			w.sinceSweep = 0
			idxErr = s.sweepTails()
		}
		if idxErr != nil {
			// The chunks stay indexed in memory; the disk is full (appends
			// are refused until there is room) or failing (no more).
			s.writeFailed(idxErr)
		} else {
			w.needDefines = false
			s.writeOK()
		}
		for _, p := range created {
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			w.dirty.mark(p, end)
		}
		if len(deleted) > 0 {
			s.mu.Lock()
			for _, p := range deleted {
				delete(s.byPid, p.pid)
				w.dirty.remove(p)
			}
			s.mu.Unlock()
			for _, p := range deleted {
				p.mu.Lock()
				p.deleted = true
				p.mu.Unlock()
			}
		}
	}
	if needSync && pipelined {
		s.commit(batch)
		if cap(buf) > 2*s.opts.MaxBatchBytes {
			buf = nil
		}
		w.buf = buf[:0]
		s.maybeRoll()
		return
	}
	var syncErr error
	if needSync {
		syncErr = s.syncNow()
	}
	for _, r := range batch {
		if r.err == nil && r.synced && syncErr != nil {
			r.err = syncErr
		}
		if r.kind == reqCheckpoint && r.err == nil && s.checkpointAside(r) {
			continue // finished once its checkpoint is written
		}
		r.finish()
	}
	if cap(buf) > 2*s.opts.MaxBatchBytes {
		buf = nil // do not pin one huge batch's buffer forever
	}
	w.buf = buf[:0]
	s.maybeRoll()
}

// touchPartitions reads, for each append of batch, its partition's first
// cache line and the slot its next tail entry goes into, in a loop of loads
// that do not wait for each other, and returns a sum of what it read. With
// a batch spread over thousands of partitions each one's memory has left
// the CPU caches since its last chunk; process, which takes a lock per
// chunk, would otherwise wait for those misses one after the other, while
// here the CPU has many in flight at once. Both are the writer goroutine's
// to change (wEnd, and tail, appended to only by the writer), so reading
// them without the partition's lock races with nobody.
func touchPartitions(batch []*request) int64 {
	var sum int64
	for _, r := range batch {
		p := r.hint
		if p == nil {
			continue
		}
		sum += p.wEnd
		if t := p.tail; len(t) < cap(t) {
			sum += t[len(t):cap(t)][0].off
		}
	}
	return sum
}

// commit queues batch, already written, for a group commit: it starts the
// fdatasync at once unless one is in flight, else it joins the next one,
// which the syncer starts as soon as the one in flight returns. The writer
// meanwhile goes back to writing whatever arrives. The batch is answered
// when its commit returns (see completeSync).
func (s *Store) commit(batch []*request) {
	w := &s.w
	var j *syncJob
	start := false
	failed := false
	q := &s.sq
	q.mu.Lock()
	for _, r := range batch {
		if r.err != nil {
			failed = true
			continue
		}
		if j == nil {
			j = q.next
			if start = q.inflight == nil; start || j == nil {
				j = w.newJob()
				j.first = s.cycleNow()
				w.jobs++
				if start {
					q.inflight = j
				} else {
					q.next = j
				}
			}
		}
		// Even those that asked for no sync: as in syncNow's path, a
		// batch that syncs is answered after the sync.
		j.reqs = append(j.reqs, r)
	}
	if j != nil {
		j.pos = w.pos
		j.parts = w.dirty.take(j.parts)
	}
	q.mu.Unlock()
	if failed {
		// After q.mu is released: finish runs the caller's notify. The
		// requests that go on are not answered before their commit (the
		// writer's own completeSync), so a part finished here cannot
		// finish its group while another part still waits in the loop.
		for _, r := range batch {
			if r.err != nil {
				r.finish()
			}
		}
	}
	if j == nil {
		return
	}
	clear(w.unflushed)
	w.deadline = time.Time{}
	w.timer = nil
	if start {
		s.syncJobs <- j
	}
}

// finishInflight waits until no group commit is in flight or queued.
func (s *Store) finishInflight() {
	for s.w.jobs > 0 {
		s.completeSync(<-s.syncDone)
	}
}

// completeSync publishes a finished group commit's durable ends and answers
// its requests. After a failed sync it rolls back as syncNow does, which
// also cuts what was written since: the requests of the queued next commit
// fail too.
func (s *Store) completeSync(j *syncJob) {
	w := &s.w
	w.jobs--
	if j.err != nil {
		s.sq.mu.Lock()
		next := s.sq.next
		s.sq.inflight, s.sq.next = nil, nil
		s.sq.mu.Unlock()
		err := s.setUnhealthy(fmt.Errorf("store: fdatasync %s: %w", j.path, j.err))
		if next != nil {
			w.jobs--
			j.parts = append(j.parts, next.parts...)
		}
		s.rollbackUnsynced(j.parts)
		for _, r := range j.reqs {
			if r.err == nil && r.synced {
				r.err = err
			}
			r.finish()
		}
		if next != nil {
			for _, r := range next.reqs {
				if r.err == nil {
					r.err = err
				}
				r.finish()
			}
		}
		return
	}
	if j.took > time.Second {
		s.log.Warn("STORE: slow fdatasync", "segment", j.path, "took", j.took)
	}
	t0 := s.cycleNow()
	// No partition lock: durable is the writer's to change (partition).
	for _, x := range j.parts {
		if d := &x.p.durable; x.end > d.Load() {
			d.Store(x.end)
		}
	}
	t1 := s.cycleNow()
	s.wakeGrown(j.parts)
	if c := s.cs; c != nil {
		c.wakeNs.Add(int64(time.Since(t1)))
	}
	s.setDurable(j.pos)
	finishAll(j.reqs)
	if c := s.cs; c != nil && !j.syncEnd.IsZero() {
		c.commits.Add(1)
		c.waitNs.Add(int64(j.syncStart.Sub(j.first)))
		c.syncNs.Add(int64(j.took))
		c.handNs.Add(int64(t0.Sub(j.syncEnd)))
		c.answerNs.Add(int64(time.Since(t0)))
	}
	w.freeJob(j)
}

// newJob returns an empty group commit of the active segment, reusing
// one that completed: a commit's lists hold a pointer per partition and
// per request it answers (thousands a second at 10,000 partitions).
func (w *writerState) newJob() *syncJob {
	j := w.spareJob
	if j == nil {
		j = &syncJob{parts: make([]partEnd, 0, w.dirty.len())}
	}
	w.spareJob = nil
	j.f, j.path = w.active.f, w.active.path
	return j
}

// freeJob keeps j, completed (nobody refers to it any more: the syncer
// handed it back and the writer answered its requests), for the next
// commit.
func (w *writerState) freeJob(j *syncJob) {
	clear(j.parts)
	clear(j.reqs)
	*j = syncJob{parts: j.parts[:0], reqs: j.reqs[:0]}
	w.spareJob = j
}

// finishAll finishes reqs in order, as finish on each would, but the parts
// of one group that follow each other finish it with one atomic operation
// instead of one per part: with a group's parts spread over thousands of
// partitions, a commit answers every put as a part of its own. A part's
// finish only counts it off its group (a part has no notify, no done and
// no parts of its own), so counting a run of them off at once is the same.
// Every part's group is read before the group can finish, which gives its
// parts back (see finish).
func finishAll(reqs []*request) {
	for i := 0; i < len(reqs); {
		r := reqs[i]
		g := r.parent
		if g == nil || r.notify != nil || r.done != nil || r.parts != nil {
			r.finish()
			i++
			continue
		}
		k := i + 1
		for k < len(reqs) && reqs[k].parent == g {
			k++
		}
		if g.pending.Add(-int32(k-i)) == 0 {
			g.finish()
		}
		i = k
	}
}

// writeActive appends b to the active segment; only the writer goroutine
// (or recovery, before it starts) calls it. On error it cuts the segment
// back to its previous size so no partial entry stays behind.
func (s *Store) writeActive(b []byte) error {
	w := &s.w
	g := w.active
	size := g.size.Load()
	if _, err := g.f.WriteAt(b, size); err != nil {
		if terr := g.f.Truncate(size); terr != nil {
			s.log.Error("STORE: cannot cut failed write back", "segment", g.path, "size", size, "err", terr)
		}
		return fmt.Errorf("store: write %d bytes to %s at %d: %w", len(b), g.path, size, err)
	}
	g.size.Store(size + int64(len(b)))
	w.pos += int64(len(b))
	return nil
}

// syncNow fdatasyncs the active segment and publishes the new durable ends.
func (s *Store) syncNow() error {
	w := &s.w
	s.finishInflight()
	if err := s.fatal(); err != nil {
		return err
	}
	if w.pos == s.durable() && w.dirty.len() == 0 {
		return nil
	}
	start := time.Now()
	if err := w.active.f.Datasync(); err != nil {
		// After a failed fsync the page cache cannot be trusted (the kernel
		// may have dropped the dirty pages): stop taking appends, and drop
		// what was written since the last good sync so it is not served.
		herr := s.setUnhealthy(fmt.Errorf("store: fdatasync %s: %w", w.active.path, err))
		s.rollbackUnsynced(nil)
		return herr
	}
	if d := time.Since(start); d > time.Second {
		s.log.Warn("STORE: slow fdatasync", "segment", w.active.path, "took", d)
	}
	for _, x := range w.dirty.take(nil) {
		p := x.p
		p.mu.Lock()
		p.durable.Store(p.end)
		p.mu.Unlock()
	}
	clear(w.unflushed)
	w.deadline = time.Time{}
	w.timer = nil
	s.wakeGrown(nil)
	s.setDurable(w.pos)
	return nil
}

// fence cuts p back to off (TruncatePartition: a former master drops the
// tail the new master never had, saved aside first; it is not damage):
// the records from off on are no longer served, and p continues at off.
// The define entry the writer logs with it makes the full scan at the next
// start-up reach the same state.
func (s *Store) fence(p *partition, off int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deleted || off < p.min || off >= p.end || p.wEnd != p.end {
		return false
	}
	if err := s.cutIndexLocked(p, off); err != nil {
		s.log.Error("STORE: cannot fence partition", "partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "offset", off, "err", err)
		return false
	}
	s.log.Info("STORE: partition cut back; the records from this offset on are no longer served",
		"partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "offset", off, "end", p.end)
	p.cutDamageLocked(off)
	p.fences = append(p.fences, fenceRef{pos: s.w.pos, off: off})
	return true
}

// markHole makes p's damaged chunk at off (n bytes) a hole: it is no
// longer served, everything after it stays readable at its offsets, and
// appends go on at p's end, so no offset is handed out twice. The index
// keeps the chunk's entry; the hole masks it (overlayLocked).
func (s *Store) markHole(p *partition, off, n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Known lost already (a hole, or repaired since and served from its
	// fills): nothing new to mark or to say.
	if p.deleted || off < p.min || off+n > p.end || p.inLostLocked(off, n) {
		return false
	}
	p.markLostLocked(off, off+n)
	s.log.Error("STORE: damaged records are not served; the rest of the partition is",
		"partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "from", off, "to", off+n)
	s.dropCheckpoint() // the hole lives in memory: the next start-up scans it
	return true
}

// skip moves p's end up to at, leaving a hole (a replica follows its
// master past records the master lost).
func (s *Store) skip(p *partition, at, ms int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wEnd != p.end || at < p.end {
		return fmt.Errorf("skip to %d, partition end is %d: %w", at, p.wEnd, ErrOffsetMismatch)
	}
	if p.addHoleLocked(at, ms) {
		p.wEnd = at
		s.w.dirty.mark(p, p.end)
		s.dropCheckpoint()
		s.log.Warn("STORE: partition continues past records lost on its source",
			"partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "to", at)
	}
	return nil
}

// checkFill tells whether records of n bytes can fill p's hole at off.
func (s *Store) checkFill(p *partition, off, n int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	room := p.holeRoomLocked(off)
	if room == 0 {
		return fmt.Errorf("%w: offset %d is not in a damaged range", ErrBadArgument, off)
	}
	if n > room {
		return fmt.Errorf("%w: %d bytes do not fit the %d bytes of damaged range at %d", ErrBadArgument, n, room, off)
	}
	return nil
}

// rollbackUnsynced cuts the log and the indexes back to the durable end:
// every dirty partition, and those of a failed commit (synced, not durable).
func (s *Store) rollbackUnsynced(synced []partEnd) {
	for _, x := range synced {
		s.w.dirty.mark(x.p, x.end)
	}
	w := &s.w
	d := s.durable()
	if d < w.active.start {
		return
	}
	if err := w.active.f.Truncate(d - w.active.start); err != nil {
		s.log.Error("STORE: cannot cut unsynced data", "segment", w.active.path, "err", err)
	}
	w.active.size.Store(d - w.active.start)
	w.pos = d
	for _, x := range w.dirty.take(nil) {
		p := x.p
		p.mu.Lock()
		if err := s.cutIndexLocked(p, p.durable.Load()); err != nil {
			s.log.Error("STORE: cannot cut the index back", "partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num), "err", err)
		}
		p.mu.Unlock()
	}
}

// sweepTails bounds the index entries held in memory with many busy
// partitions: when all tails together exceed the budget, the tails of at
// least half the average length are written out as (short) blocks, which
// frees at least half of the entries.
func (s *Store) sweepTails() error {
	ps := s.partitionList()
	s.w.tailCap = tailCapFor(len(ps), s.opts.tailBudget, s.opts.blockEntries)
	total, busy := 0, 0
	for _, p := range ps {
		p.mu.Lock()
		if n := len(p.tail); n > 0 {
			total += n
			busy++
		}
		p.mu.Unlock()
	}
	if total <= s.opts.tailBudget {
		return nil
	}
	return s.flushTailsOf(ps, s.w.active, max(total/busy/2, 1), true)
}

// tailCapFor is the capacity a partition's empty tail is given when the
// store has parts partitions: about what a tail holds when the sweep
// writes it out (its share of the budget, and half as much again for the
// chunks that come between two sweeps), at most a block and at least 16
// entries (a block can be smaller in tests). The tails' arrays together
// stay within about 1.5 times the budget.
func tailCapFor(parts, budget, block int) int {
	c := budget / max(parts, 1)
	return max(min(c+c/2, block), min(minTailCap, block))
}

// minTailCap is the least capacity a tail is given.
const minTailCap = 16

// maybeRoll seals the active segment once it reached SegmentBytes and starts
// the next one with a define entry for every live partition. A roll that
// cannot be done (no space, no descriptor) is not fatal: the active
// segment takes the next appends and the roll is tried again after them.
func (s *Store) maybeRoll() {
	w := &s.w
	if w.active.size.Load() < s.opts.SegmentBytes || s.fatal() != nil || w.needDefines {
		return
	}
	t0 := time.Now()
	s.waitSealed() // the previous roll's, so spans are added in segment order
	if j := w.sealing; j != nil && j.err != nil {
		// It failed (the disk was full): its segment's blocks are still
		// in memory, ahead of the active segment's. Rolling now would
		// seal the active segment into a span after them, which no
		// lookup expects (reads spun in chunks for ever). So that
		// sealing is done again first, and the active segment grows
		// until it succeeds.
		s.startSeal(resealJob(j))
		return
	}
	if err := s.syncNow(); err != nil {
		return
	}
	old := w.active
	var tOpen, tSeal time.Time
	g, err := openSegment(s.fs, s.logDir, w.pos, true)
	if err == nil {
		g.seq = s.nextSeq()
		if _, err = s.openIdx(g); err == nil {
			err = s.resetIdx(g, 0)
		}
		if err == nil {
			err = s.fs.SyncDir(s.logDir)
		}
		if err != nil {
			g.close()
			s.fs.Remove(g.path)
			s.fs.Remove(idxPathOf(g.path))
		}
	}
	if err != nil {
		if !w.rollFailing {
			s.log.Warn("STORE: cannot roll the log segment; retrying after each append", "err", err)
		}
		w.rollFailing = true
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			s.writeFailed(err)
		}
		return
	}
	if w.rollFailing {
		s.log.Info("STORE: log segment rolled again")
		w.rollFailing = false
	}
	tOpen = time.Now()
	job := s.detachTails(old)
	tSeal = time.Now()
	s.segMu.Lock()
	s.segs = append(s.segs, g)
	s.publishSegs()
	s.segMu.Unlock()
	w.active = g
	buf := s.appendDefines(w.buf[:0])
	if err := s.writeActive(buf); err != nil {
		w.needDefines = true
		s.writeFailed(err)
		s.startSeal(job)
		return
	}
	w.buf = buf[:0]
	if err := s.syncNow(); err != nil {
		s.startSeal(job)
		return
	}
	tDef := time.Now()
	s.afterRoll(job)
	tEnd := time.Now()
	// took is how long the writer stopped taking appends for the roll: the
	// fdatasync of the old segment and the new one's creation, its tails
	// handed to the sealing (seal; the .idx writes and the footer are the
	// sealing goroutine's), the new segment's defines and their
	// fdatasync, and the checkpoint's snapshot.
	s.log.Info("STORE: rolled log segment", "sealed", old.path, "new", g.path, "took", tEnd.Sub(t0),
		"seal", tSeal.Sub(tOpen), "defines", tDef.Sub(tSeal), "checkpoint", tEnd.Sub(tDef))
}

// appendDefines appends a define entry for every live partition at its
// writer end.
func (s *Store) appendDefines(buf []byte) []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.parts {
		buf = appendEntry(buf, entryHeader{typ: entryDefine, pid: p.pid, off: p.wEnd, ms: s.w.lastMs}, encodeDefine(p.key.topic, p.key.num))
	}
	return buf
}

// probeBlock is what probeSpace writes: 64 KiB, room for a few batches.
var probeBlock = make([]byte, 64<<10)

// probeSpace checks, while appends are refused for a full disk, whether
// there is room again: it writes probeBlock past the end of the active
// segment and cuts it off again (a crash in between leaves a tail that
// recovery cuts as torn). On success appends are accepted again.
func (s *Store) probeSpace() error {
	s.healthMu.Lock()
	blocked := s.blockedErr != nil
	s.healthMu.Unlock()
	if !blocked {
		return nil
	}
	g := s.w.active
	size := g.size.Load()
	_, err := g.f.WriteAt(probeBlock, size)
	if terr := g.f.Truncate(size); terr != nil {
		return s.setUnhealthy(fmt.Errorf("store: cut the space probe from %s: %w", g.path, terr))
	}
	if err != nil {
		return s.writeFailed(fmt.Errorf("store: probe for room in %s: %w", g.path, err))
	}
	s.writeOK()
	return nil
}
