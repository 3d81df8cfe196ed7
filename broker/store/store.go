package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"metaq/internal/clock"
)

// Message is one message to append.
type Message struct {
	// ID 0 means the store assigns a wall-clock id (see Message ids in broker/wire/doc.go) when the
	// record is sequenced, so ids rise within a partition.
	ID   int64
	Flag int32
	// Body is the put body (attribute section + payload) exactly as received.
	Body []byte
	// Checksum, when ChecksumSet, is RecordChecksum(Body), already verified
	// by the caller (a put's checksum field): the store does not compute it
	// a second time.
	Checksum    uint32
	ChecksumSet bool
}

// Appended is where one message landed.
type Appended struct {
	ID     int64
	Offset int64 // absolute byte offset of the record's start in its partition
}

// PartitionInfo describes one partition.
type PartitionInfo struct {
	Topic     string
	Partition int
	Min       int64 // first retained offset
	Max       int64 // readable end: a Read must start below it (the durable end, as MetaQ's flushed size)
	Durable   int64 // end of the last fsynced record; equals Max (the readable end is the durable end)
	Written   int64 // end of the last written record (>= Max); AppendRaw appends here
	Messages  int64 // records appended since start-up (MetaQ's message_count)
	Bytes     int64 // Max - Min
}

// LogEntry is a run of whole records of one partition as it sits in the
// shared commit log. The georeplicator ships these.
type LogEntry struct {
	Topic     string
	Partition int
	Offset    int64  // partition offset of Records[0]
	Records   []byte // whole records (see Records in broker/wire/doc.go), back to back
	Time      time.Time
	// Unit is set by ReadLog on the first entry of a unit (AppendUnitAsync,
	// AppendRawUnit) that it returned more than one entry of: the number of
	// entries, this one included, that hold the unit's records. 0 on every
	// other entry.
	Unit int
}

type posRange struct{ from, to int64 }

// Store is the broker's storage engine. All methods are safe for concurrent use.
type Store struct {
	opts   Options
	fs     FS
	fds    *reserveFS // fs, with descriptors in reserve
	log    *slog.Logger
	clk    clock.Clock
	dir    string
	logDir string

	mu    sync.RWMutex // partition table
	parts map[pkey]*partition
	// byTopic holds the same partitions as parts by topic and number (see
	// topicParts); setPartLocked and deletePartLocked change both.
	byTopic map[string]*topicParts
	// partsGen counts removals from parts (under mu), which make the
	// partitions appends looked up before them stale (request.hint).
	partsGen atomic.Uint64
	byPid    map[uint32]*partition
	nextPid  uint32

	polMu    sync.RWMutex
	policies map[string]Policy

	retainMu  sync.Mutex // serialises Retain
	rebuildMu sync.Mutex // serialises index rebuilds (rebuildIdx)
	segMu     sync.RWMutex
	segs      []*segment
	// segTab is a copy of segs (published by publishSegs whenever segs
	// changes) through which spans find their segment without segMu;
	// lastSeq numbers the segments as they are opened or created.
	segTab     atomic.Pointer[[]*segment]
	lastSeq    uint32
	quarantine []posRange

	durMu      sync.Mutex
	durablePos int64
	durCh      chan struct{}

	// grow holds the channels of gets waiting for partitions to grow (Grown).
	grow growWaits

	healthMu   sync.Mutex
	healthErr  error // fatal: appends refused until reopened
	blockedErr error // disk full: cleared by the next write that succeeds

	closeMu sync.RWMutex
	closed  bool
	reqs    chan *request
	quit    chan struct{}
	done    chan struct{}
	// The writer's group commits are fdatasynced by its syncer goroutine.
	syncJobs   chan *syncJob
	syncDone   chan *syncJob
	syncerDone chan struct{}
	sq         syncQueue
	closeOnce  sync.Once
	// cs is the group commit cycle's debug breakdown (nil: off, see
	// cycleStatsEnv); csStop ends its logger, csDone says it ended.
	cs       *cycleStats
	csStop   chan struct{}
	csDone   chan struct{}
	closeErr error

	w writerState
	// rec is recovery's own state (see holdIndex), unused once Open returns.
	rec recState

	sums summaryCache // sealed segments' footers (see footer.go)

	scrub scrubState

	// checkedFrom is the log position from which every entry passed a crc
	// check in this process: recovery scanned from there, and the writer
	// wrote what follows from checked records. Below it a segment may be
	// served unread only once the scrub checked it (segment.checked).
	checkedFrom atomic.Int64

	// noCheckpoint is set once damage was found while serving: no more
	// checkpoints, so the next start-up scans (and quarantines) everything.
	noCheckpoint atomic.Bool

	// idxPending describes the segment indexes held in memory because
	// the disk had no room to write them (IndexPending); nil for none.
	idxPending atomic.Pointer[IndexPending]

	ckpt ckptWriter
}

// Open opens or creates the store under opts.Dir and recovers it.
func Open(opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:     opts,
		fds:      newReserveFS(opts.FS),
		log:      opts.Logger,
		clk:      opts.Clock,
		dir:      opts.Dir,
		logDir:   filepath.Join(opts.Dir, "log"),
		parts:    make(map[pkey]*partition),
		byTopic:  make(map[string]*topicParts),
		byPid:    make(map[uint32]*partition),
		policies: make(map[string]Policy),
		durCh:    make(chan struct{}),
		reqs:     make(chan *request, 1024),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		// The writer sends a job only when none is in flight, so that send
		// never waits. The syncer hands back jobs it chained itself too:
		// room for many, so it does not wait for the writer before the
		// next fdatasync.
		syncJobs:   make(chan *syncJob, 1),
		syncDone:   make(chan *syncJob, 64),
		syncerDone: make(chan struct{}),
	}
	s.fs = s.fds
	s.sums.budget = opts.summaryBudget
	s.w.ids.broker = int64(opts.BrokerID)
	s.w.unflushed = make(map[string]int)
	if err := s.fs.MkdirAll(s.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", s.logDir, err)
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	if every := cycleStatsInterval(); every > 0 {
		s.cs = &cycleStats{}
		s.csStop, s.csDone = make(chan struct{}), make(chan struct{})
		go s.logCycleStats(every, s.csStop, s.csDone)
	}
	go s.syncer(s.syncJobs)
	go s.run()
	s.startScrub()
	return s, nil
}

func (s *Store) closeFiles() {
	s.fds.close()
	s.segMu.Lock()
	defer s.segMu.Unlock()
	for _, g := range s.segs {
		g.close()
	}
	s.segs = nil
	s.publishSegs()
}

// SetPolicy sets a topic's flush and retention policy (start-up and reload).
func (s *Store) SetPolicy(topic string, p Policy) {
	s.polMu.Lock()
	s.policies[topic] = p
	s.polMu.Unlock()
}

func (s *Store) policy(topic string) Policy {
	s.polMu.RLock()
	defer s.polMu.RUnlock()
	if p, ok := s.policies[topic]; ok {
		return p
	}
	return s.opts.DefaultPolicy
}

func (s *Store) lookup(topic string, partition int) *partition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.parts[pkey{topic, partition}]
}

func checkKey(topic string, partition int) error {
	if topic == "" || len(topic) > 0xFFFF || partition < 0 {
		return fmt.Errorf("%w: topic %q partition %d", ErrBadArgument, topic, partition)
	}
	return nil
}

// submit queues r for the writer and waits for its answer.
func (s *Store) submit(ctx context.Context, r *request) error {
	if err := s.enqueue(ctx, r); err != nil {
		return err
	}
	// Once queued the request is carried out even if ctx ends: the caller
	// learns the outcome unless it stops waiting.
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enqueue hands r to the writer; it waits only while the queue is full.
func (s *Store) enqueue(ctx context.Context, r *request) error {
	r.done = make(chan struct{})
	if r.group == nil {
		r.size = len(r.payload)
	}
	r.queuedAt = s.cycleNow()
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	select {
	case s.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CreatePartition creates an empty partition whose first offset is start
// (0 on a master; a slave uses its master's min). Existing partitions are left as they are.
func (s *Store) CreatePartition(topic string, partition int, start int64) error {
	if err := checkKey(topic, partition); err != nil {
		return err
	}
	if start < 0 {
		return fmt.Errorf("%w: start offset %d", ErrBadArgument, start)
	}
	if s.lookup(topic, partition) != nil {
		return nil
	}
	return s.submit(context.Background(), &request{kind: reqCreate, key: pkey{topic, partition}, at: start})
}

// Append stores msgs in order in one partition (creating it at offset 0) and
// returns where each landed. Under group commit it returns after fsync.
func (s *Store) Append(ctx context.Context, topic string, partition int, msgs []Message) ([]Appended, error) {
	pa := s.AppendAsync(ctx, topic, partition, msgs, nil)
	select {
	case <-pa.Done():
		return pa.Result()
	case <-ctx.Done():
		return nil, fmt.Errorf("store: append %s-%d: %w", topic, partition, ctx.Err())
	}
}

// PendingAppend is an append handed to the writer by AppendAsync.
type PendingAppend struct {
	topic     string
	partition int
	r         *request
	err       error // refused before it reached the writer
}

// FailedAppend is a PendingAppend that failed with err before reaching a
// store (for wrappers that refuse an append themselves).
func FailedAppend(err error) *PendingAppend { return &PendingAppend{err: err} }

// closedChan is a closed channel: Done of an append refused before it
// was queued, Grown's answer for a partition already past the end asked for.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// AppendAsync is Append without the wait: the records are encoded (the
// bodies are not referenced after it returns) and queued behind every
// append queued before, so a caller keeps its order across calls while
// several of its appends share one group commit. ctx bounds only the wait
// for room in the queue.
//
// notify, when not nil, is called exactly once with what Result returns,
// just before Done is closed: on the store's writer goroutine, or before
// AppendAsync returns when the append is refused before it is queued. It
// runs on the writer's path to every later commit, so it must be quick and
// must not block. It lets a caller answer as soon as the commit returns,
// without a goroutine of its own waiting on Done.
func (s *Store) AppendAsync(ctx context.Context, topic string, partition int, msgs []Message, notify func([]Appended, error)) *PendingAppend {
	pa := s.appendAsync(ctx, topic, partition, msgs, notify)
	if pa.r == nil && notify != nil {
		notify(nil, pa.err)
	}
	return pa
}

func (s *Store) appendAsync(ctx context.Context, topic string, partition int, msgs []Message, notify func([]Appended, error)) *PendingAppend {
	pa, r := s.encodeAppend(topic, partition, msgs)
	if r == nil {
		return pa
	}
	if notify != nil {
		r.notify = func() { notify(pa.outcome(r)) }
	}
	if err := s.enqueue(ctx, r); err != nil {
		pa.err = fmt.Errorf("store: append %s-%d: %w", topic, partition, err)
		return pa
	}
	pa.r = r
	return pa
}

// encodeAppend checks msgs and encodes them into the request that appends
// them, or returns the PendingAppend refused with no request.
func (s *Store) encodeAppend(topic string, partition int, msgs []Message) (*PendingAppend, *request) {
	pa := &PendingAppend{topic: topic, partition: partition}
	size := 0
	if size, pa.err = s.checkAppend(topic, partition, msgs); pa.err != nil || size == 0 {
		return pa, nil
	}
	// Records are encoded (and their body CRC computed) here, in parallel
	// across callers; the writer only patches in offsets and ids.
	payload := payloads.Get(size)[:0]
	recOffs := make([]int32, len(msgs))
	ids := make([]int64, len(msgs))
	payload = encodeRecords(payload, recOffs, ids, msgs)
	return pa, &request{kind: reqAppend, key: pkey{topic, partition}, payload: payload, recOffs: recOffs, ids: ids,
		records: len(msgs), policy: s.policy(topic)}
}

// checkAppend checks an append and returns the bytes its records take (0
// for no messages).
func (s *Store) checkAppend(topic string, partition int, msgs []Message) (int, error) {
	return appendSize(topic, partition, msgs, s.fatal)
}

// appendSize is checkAppend with the store's health asked through fatal,
// only for an append that has messages (AppendManyAsync asks once per call).
func appendSize(topic string, partition int, msgs []Message, fatal func() error) (int, error) {
	if err := checkKey(topic, partition); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := fatal(); err != nil {
		return 0, err
	}
	size := 0
	for i, m := range msgs {
		if len(m.Body) > MaxRecordBody {
			return 0, fmt.Errorf("%w: message %d body %d bytes exceeds %d", ErrBadArgument, i, len(m.Body), MaxRecordBody)
		}
		size += RecordHeaderLen + len(m.Body)
	}
	return size, nil
}

// encodeRecords appends msgs' records to payload, filling in where each
// starts (relative to payload's length on entry) and its preset id.
func encodeRecords(payload []byte, recOffs []int32, ids []int64, msgs []Message) []byte {
	start := len(payload)
	for i, m := range msgs {
		recOffs[i] = int32(len(payload) - start)
		ids[i] = m.ID
		sum := m.Checksum
		if !m.ChecksumSet {
			sum = RecordChecksum(m.Body)
		}
		payload = appendRecordSum(payload, m.ID, m.Flag, sum, m.Body)
	}
	return payload
}

// PartitionAppend is one partition's messages in an AppendManyAsync.
type PartitionAppend struct {
	Topic     string
	Partition int
	Msgs      []Message
}

// AppendOutcome is what Result would return for one PartitionAppend.
type AppendOutcome struct {
	Appended []Appended
	Err      error
}

// AppendManyAsync is AppendAsync for several partitions at once, with one
// hand-off to the writer and one notify: a caller whose messages spread
// over many partitions (a connection's puts to a topic of 10,000) pays the
// queueing and the wake-up once, not once per partition. The appends are
// queued in order behind the caller's earlier ones and are always
// committed in the same batch, so they keep each partition's order as
// separate AppendAsync calls would. notify, required, gets one outcome per
// append (in order) exactly once, on the terms of AppendAsync's notify.
// The bodies are not referenced after it returns.
func (s *Store) AppendManyAsync(ctx context.Context, appends []PartitionAppend, notify func([]AppendOutcome)) {
	s.appendMany(ctx, appends, notify, false)
}

// AppendUnitAsync is AppendManyAsync for appends that are one unit, a
// transaction's partitions at its commit: besides being committed in one
// batch (durable all or none), they are written after a unit entry that
// gives their length in the log (see doc.go), and ReadLog never ends a
// read inside a unit of at most maxUnitBytes, so a replica that ships the
// log in ReadLog's pieces gets all of the unit's entries in one piece or
// none, after a restart of this store too. A unit the crash tore (its
// write not durable whole) is cut off at the next start with the torn
// tail.
func (s *Store) AppendUnitAsync(ctx context.Context, appends []PartitionAppend, notify func([]AppendOutcome)) {
	s.appendMany(ctx, appends, notify, true)
}

// maxUnitBytes bounds a unit ReadLog keeps whole: a replica's frame holds
// at most 64 MiB, and a read that kept a larger unit whole would exceed it.
// A larger unit is read like any entries.
const maxUnitBytes = 16 << 20

// RawAppend is one partition's records in an AppendRawUnit.
type RawAppend struct {
	Topic     string
	Partition int
	At        int64  // where the records go: the partition's end (see AppendRaw)
	Records   []byte // whole records, ids kept
}

// AppendRawUnit is AppendRaw for the records of several partitions that
// are one unit, as a replica applies a unit its master shipped whole: they
// are written in one piece after a unit entry, as AppendUnitAsync writes
// them, so this store keeps them one unit for its own replicas (a slave
// promoted later ships them whole). Each part's records must be non-empty
// and start at its partition's end (a missing partition is created at
// At); if one does not, nothing is written and the error wraps
// ErrOffsetMismatch. It returns each partition's new end once the unit is
// stored (durable when a topic's policy syncs at once, as AppendRaw).
func (s *Store) AppendRawUnit(ctx context.Context, appends []RawAppend) ([]int64, error) {
	if len(appends) == 0 {
		return nil, nil
	}
	size := 0
	for _, a := range appends {
		if err := checkKey(a.Topic, a.Partition); err != nil {
			return nil, err
		}
		if a.At < 0 {
			return nil, fmt.Errorf("%w: offset %d", ErrBadArgument, a.At)
		}
		n, err := VerifyRecords(a.Records)
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: no records", ErrBadArgument)
		}
		if err != nil {
			return nil, fmt.Errorf("store: append raw unit %s-%d at %d: %w", a.Topic, a.Partition, a.At, err)
		}
		size += len(a.Records)
	}
	if err := s.fatal(); err != nil {
		return nil, err
	}
	g := &request{kind: reqRaw, size: size, unit: true}
	parts := make([]request, len(appends))
	g.group = make([]*request, len(appends))
	for i, a := range appends {
		n, _ := VerifyRecords(a.Records)
		r := &parts[i]
		r.kind, r.key, r.at, r.payload, r.records, r.policy, r.parent = reqRaw, pkey{a.Topic, a.Partition}, a.At, a.Records, n, s.policy(a.Topic), g
		r.size = len(a.Records)
		g.group[i] = r
	}
	g.pending.Store(int32(len(parts)))
	where := func() string {
		a := appends[0]
		return fmt.Sprintf("%s-%d at %d and %d more partition(s)", a.Topic, a.Partition, a.At, len(appends)-1)
	}
	if err := s.submit(ctx, g); err != nil {
		return nil, fmt.Errorf("store: append raw unit %s: %w", where(), err)
	}
	ends := make([]int64, len(parts))
	for i := range parts {
		if err := parts[i].err; err != nil {
			a := appends[i]
			return nil, fmt.Errorf("store: append raw unit %s-%d at %d: %w", a.Topic, a.Partition, a.At, err)
		}
		ends[i] = parts[i].end
	}
	return ends, nil
}

func (s *Store) appendMany(ctx context.Context, appends []PartitionAppend, notify func([]AppendOutcome), unit bool) {
	outs := make([]AppendOutcome, len(appends))
	// The call's other lists (sizes, which append each part is, the
	// records' starts and ids) live in a partsBuf reused from call to
	// call, given back with the parts: at 10,000 partitions every put is
	// a part of its own, and four allocations per call were a share of
	// what a put to one of many partitions costs more.
	pb := getPartsBuf(len(appends))
	sizes := pb.sizes[:len(appends)]
	total, records := 0, 0
	// The store's health is asked once for the whole call, not per part.
	var health error
	asked := false
	fatal := func() error {
		if !asked {
			health, asked = s.fatal(), true
		}
		return health
	}
	for i, a := range appends {
		sizes[i], outs[i].Err = appendSize(a.Topic, a.Partition, a.Msgs, fatal)
		if outs[i].Err != nil {
			outs[i].Err = fmt.Errorf("store: append %s-%d: %w", a.Topic, a.Partition, outs[i].Err)
		}
		total += sizes[i]
		if sizes[i] > 0 {
			records += len(a.Msgs)
		}
	}
	if total == 0 {
		pb.release()
		notify(outs)
		return
	}
	// One buffer for every part: the writer gives it back after it copied
	// the group's last part (process).
	payload := payloads.Get(total)[:0]
	recOffs, ids := pb.records(records)
	g := &request{kind: reqAppend, payload: payload, size: total, unit: unit}
	g.parts = pb
	parts := pb.parts
	idx := pb.idx // appends[idx[k]] is parts[k]
	// A call's parts are mostly of one topic: its policy and its
	// partitions' table are looked up once per run of the same topic.
	var topic string
	var pol Policy
	for i, a := range appends {
		if sizes[i] == 0 {
			continue
		}
		if len(parts) == 0 || a.Topic != topic {
			topic, pol = a.Topic, s.policy(a.Topic)
		}
		n, start := len(a.Msgs), len(payload)
		payload = encodeRecords(payload, recOffs[:n:n], ids[:n:n], a.Msgs)
		// Set field by field in the part's (zeroed) place: a composite
		// literal is built on the stack and copied in 16-byte moves that
		// each straddle two of its 8-byte stores, which the CPU cannot
		// forward (perf annotate: most of this call's own time at 10,000
		// partitions, where every put is a part).
		parts = parts[:len(parts)+1]
		r := &parts[len(parts)-1]
		r.kind, r.key, r.payload = reqAppend, pkey{a.Topic, a.Partition}, payload[start:len(payload):len(payload)]
		r.recOffs, r.ids, r.records, r.policy, r.parent = recOffs[:n:n], ids[:n:n], n, pol, g
		recOffs, ids = recOffs[n:], ids[n:]
		idx = append(idx, int32(i))
	}
	pb.parts, pb.idx = parts, idx
	g.group = pb.group[:len(parts)]
	s.mu.RLock()
	gen := s.partsGen.Load()
	var tp *topicParts
	for k := range parts {
		r := &parts[k]
		if tp == nil || tp.topic != r.key.topic {
			tp = s.byTopic[r.key.topic]
		}
		r.hint, r.hintGen = tp.get(r.key.num), gen
		g.group[k] = r
	}
	s.mu.RUnlock()
	g.pending.Store(int32(len(parts)))
	g.notify = func() {
		// One slice of results for every part, cut in turn.
		all := make([]Appended, records)
		for k, i := range idx {
			r := g.group[k]
			if r.err != nil {
				outs[i].Err = fmt.Errorf("store: append %s-%d: %w", r.key.topic, r.key.num, r.err)
				continue
			}
			n := len(r.recOffs)
			as := all[:n:n]
			all = all[n:]
			for j, o := range r.recOffs {
				as[j] = Appended{ID: r.ids[j], Offset: r.offset + int64(o)}
			}
			outs[i].Appended = as
		}
		notify(outs)
	}
	if err := s.enqueue(ctx, g); err != nil {
		for _, i := range idx {
			a := appends[i]
			outs[i].Err = fmt.Errorf("store: append %s-%d: %w", a.Topic, a.Partition, err)
		}
		notify(outs)
	}
}

// partsBuf is the part requests of an AppendManyAsync call and the list
// the writer takes them from, with the call's other per-part and
// per-record lists, reused from call to call (partsBufs): at 10,000
// partitions a read's puts make one part each, and a call no longer
// allocates, zeroes and leaves to the garbage collector a 280-byte
// request per part. The group's finish gives it back once its last part
// finished, after the group's notify (request.finish); nothing reads a
// part, or the lists, after that.
type partsBuf struct {
	parts []request
	group []*request
	sizes []int   // bytes of each append (0: refused or empty)
	idx   []int32 // the append each part is
	// recOffs and ids hold every record's start in its part's payload
	// and its id (the parts' recOffs and ids are cut from them).
	recOffs []int32
	ids     []int64
}

var partsBufs = sync.Pool{New: func() any { return new(partsBuf) }}

// maxPooledParts bounds the parts a pooled partsBuf keeps room for, and
// maxPooledRecords its records.
const (
	maxPooledParts   = 1024
	maxPooledRecords = 4096
)

// getPartsBuf returns a partsBuf with room for n parts, its lists empty
// (sizes with room for n).
func getPartsBuf(n int) *partsBuf {
	pb := partsBufs.Get().(*partsBuf)
	if cap(pb.parts) < n {
		pb.parts = make([]request, 0, n)
		pb.group = make([]*request, 0, n)
		pb.sizes = make([]int, n)
		pb.idx = make([]int32, 0, n)
	}
	return pb
}

// records returns room for n records' starts and ids.
func (pb *partsBuf) records(n int) ([]int32, []int64) {
	if cap(pb.recOffs) < n {
		pb.recOffs = make([]int32, n)
		pb.ids = make([]int64, n)
	}
	return pb.recOffs[:n], pb.ids[:n]
}

// release clears the parts (they hold payloads, partitions and errors)
// and gives pb back.
func (pb *partsBuf) release() {
	clear(pb.parts)
	clear(pb.group[:len(pb.parts)])
	pb.parts, pb.group, pb.idx = pb.parts[:0], pb.group[:0], pb.idx[:0]
	if cap(pb.parts) <= maxPooledParts && cap(pb.ids) <= maxPooledRecords {
		partsBufs.Put(pb)
	}
}

// Done is closed when the append's outcome is known.
func (pa *PendingAppend) Done() <-chan struct{} {
	if pa.r == nil {
		return closedChan
	}
	return pa.r.done
}

// Result waits for the append and returns what Append returns.
func (pa *PendingAppend) Result() ([]Appended, error) {
	if pa.r == nil {
		return nil, pa.err
	}
	<-pa.r.done
	return pa.outcome(pa.r)
}

// outcome is Result of a finished request r.
func (pa *PendingAppend) outcome(r *request) ([]Appended, error) {
	if r.err != nil {
		return nil, fmt.Errorf("store: append %s-%d: %w", pa.topic, pa.partition, r.err)
	}
	out := make([]Appended, len(r.recOffs))
	for i, o := range r.recOffs {
		out[i] = Appended{ID: r.ids[i], Offset: r.offset + int64(o)}
	}
	return out, nil
}

// AppendRaw stores whole, already-encoded records (ids kept) at exactly
// offset at, which must equal the partition's end (ErrOffsetMismatch
// otherwise). A missing partition is created at at. Records are verified
// (framing and CRC) before anything is written. Returns the new end.
func (s *Store) AppendRaw(ctx context.Context, topic string, partition int, at int64, records []byte) (int64, error) {
	if err := checkKey(topic, partition); err != nil {
		return 0, err
	}
	if at < 0 {
		return 0, fmt.Errorf("%w: offset %d", ErrBadArgument, at)
	}
	n, err := VerifyRecords(records)
	if err != nil {
		return 0, fmt.Errorf("store: append raw %s-%d at %d: %w", topic, partition, at, err)
	}
	if err := s.fatal(); err != nil {
		return 0, err
	}
	if n == 0 {
		if err := s.CreatePartition(topic, partition, at); err != nil {
			return 0, err
		}
		p := s.lookup(topic, partition)
		if p == nil {
			return 0, ErrNoPartition
		}
		p.mu.Lock()
		end := p.end
		p.mu.Unlock()
		if end != at {
			return end, fmt.Errorf("store: append raw %s-%d at %d, end is %d: %w", topic, partition, at, end, ErrOffsetMismatch)
		}
		return end, nil
	}
	r := &request{kind: reqRaw, key: pkey{topic, partition}, at: at, payload: records, records: n,
		policy: s.policy(topic)}
	if err := s.submit(ctx, r); err != nil {
		// After a cancelled wait the writer may still be filling r in: read
		// r.end only once it has finished with r.
		var end int64
		select {
		case <-r.done:
			end = r.end
		default:
		}
		return end, fmt.Errorf("store: append raw %s-%d at %d: %w", topic, partition, at, err)
	}
	return r.end, nil
}

// Read returns up to maxBytes of the partition's bytes starting at offset,
// exactly as `get` sends them (may end in a partial record, never empty).
// offset must be >= Min and < Max, else a *RangeError.
//
// Every chunk read is checked against its entry crc. A chunk that fails is
// never served: Read returns the bytes before it, or an error wrapping
// ErrCorrupt when there are none, and the store makes the next start-up scan
// the whole log so the damage is quarantined (see doc.go).
func (s *Store) Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error) {
	return s.read(topic, partition, offset, maxBytes, false)
}

// read is Read; retried is set on the second try after damage was found
// and the intact records around it were written back.
func (s *Store) read(topic string, partition int, offset int64, maxBytes int, retried bool) ([]byte, error) {
	pl, err := s.plan(topic, partition, offset, maxBytes)
	if err != nil {
		return nil, err
	}
	return s.copyChunks(pl, retried)
}

// readPlan is what a read serves: the chunks of p from offset, total bytes.
type readPlan struct {
	p         *partition
	topic     string
	partition int
	pid       uint32
	offset    int64
	maxBytes  int
	ents      []idxEntry
	total     int64
}

// plan finds the chunks a read of maxBytes at offset serves: contiguous
// from offset, up to a hole, a gap or maxBytes. Only the first is entered
// part way and only the last may be cut.
func (s *Store) plan(topic string, partition int, offset int64, maxBytes int) (readPlan, error) {
	if maxBytes <= 0 {
		return readPlan{}, fmt.Errorf("%w: maxBytes %d", ErrBadArgument, maxBytes)
	}
	if s.isClosed() {
		return readPlan{}, ErrClosed
	}
	p := s.lookup(topic, partition)
	if p == nil {
		return readPlan{}, ErrNoPartition
	}
	total := int64(0)
	p.mu.Lock()
	if d := p.durable.Load(); offset < p.min || offset >= d {
		e := &RangeError{Offset: offset, Min: p.min, Max: d}
		p.mu.Unlock()
		return readPlan{}, e
	}
	pid := p.pid
	want := min(int64(maxBytes), p.end-offset)
	p.mu.Unlock()
	ents, err := s.chunks(p, offset, want)
	if err != nil && len(ents) == 0 {
		if errors.Is(err, ErrLogTruncated) {
			p.mu.Lock()
			e := &RangeError{Offset: offset, Min: p.min, Max: p.durable.Load()}
			p.mu.Unlock()
			return readPlan{}, e
		}
		return readPlan{}, fmt.Errorf("store: read %s-%d at %d: %w", topic, partition, offset, err)
	}
	p.mu.Lock()
	ents = p.overlayLocked(ents)
	p.mu.Unlock()
	for len(ents) > 0 && ents[0].off+int64(ents[0].n) <= offset {
		ents = ents[1:] // before offset: pieces of a chunk the overlay split
	}
	if len(ents) > 0 && ents[0].hole() && ents[0].off <= offset {
		next := ents[0].off + int64(ents[0].n)
		for _, c := range ents[1:] {
			if !c.hole() {
				break
			}
			next = c.off + int64(c.n)
		}
		return readPlan{}, &DamagedError{Offset: offset, Next: next}
	}
	// The chunks served: contiguous from offset, up to a hole, a gap or
	// want. Only the first is entered part way (skip) and only the last
	// may be cut (by want), so the loops below need no list of their own.
	k := 0
	for _, c := range ents {
		if c.off > offset+total || c.hole() {
			break // a hole: never serve bytes from elsewhere
		}
		take := min(int64(c.n)-max(offset-c.off, 0), want-total)
		if take <= 0 {
			break
		}
		total += take
		k++
	}
	ents = ents[:k]
	if total >= prefetchMin && len(ents) > 0 {
		s.prefetchLog(p, ents)
	}
	return readPlan{p: p, topic: topic, partition: partition, pid: pid, offset: offset, maxBytes: maxBytes,
		ents: ents, total: total}, nil
}

// copyChunks reads the planned chunks into one buffer, checking each
// chunk's crc.
func (s *Store) copyChunks(pl readPlan, retried bool) ([]byte, error) {
	p, topic, partition, pid, offset, ents, total := pl.p, pl.topic, pl.partition, pl.pid, pl.offset, pl.ents, pl.total
	out := make([]byte, 0, total)
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	defer func() { *bp = buf[:0] }()
	for i := 0; i < len(ents); {
		// Chunks that sit close together in the log (back to back, or with
		// other partitions' entries of at most readGap between them) are
		// read with one pread of up to 4 MiB: a partition interleaved with
		// a few others costs a few system calls per get, not one per chunk.
		// Never across a segment end: positions are contiguous from one
		// segment to the next, files are not.
		j := i + 1
		start := ents[i].pos
		end := start + entryHeaderLen + int64(ents[i].n)
		segEnd := s.segmentEnd(start)
		for j < len(ents) {
			c := ents[j]
			cend := c.pos + entryHeaderLen + int64(c.n)
			if c.pos < end || c.pos-end > readGap || cend-start > 4<<20 || cend > segEnd {
				break
			}
			end = cend
			j++
		}
		size := end - start
		if int64(cap(buf)) < size {
			buf = make([]byte, size)
			if size > 8<<20 {
				defer func() { buf = nil }() // do not pool huge buffers
			}
		}
		b := buf[:size]
		if err := s.readLog(b, start); err != nil {
			if errors.Is(err, ErrLogTruncated) {
				// Retention removed the segment after we looked: answer
				// with the new bounds.
				p.mu.Lock()
				e := &RangeError{Offset: offset, Min: p.min, Max: p.durable.Load()}
				p.mu.Unlock()
				return nil, e
			}
			return nil, fmt.Errorf("store: read %s-%d at %d: %w", topic, partition, offset, err)
		}
		for _, c := range ents[i:j] {
			n := int64(c.n)
			e := b[c.pos-start:][:entryHeaderLen+n]
			if err := checkChunk(e, pid, c.off, c.n); err != nil {
				s.damageFound(p, c.off, c.pos, n, err)
				if len(out) > 0 {
					return out, nil
				}
				if !retried {
					// the intact records around the damage may have been
					// written back: read again, once
					return s.read(topic, partition, offset, pl.maxBytes, true)
				}
				return nil, &DamagedError{Offset: offset, Next: c.off + n, Err: err}
			}
			skip := max(offset-c.off, 0)
			take := min(n-skip, total-int64(len(out)))
			out = append(out, e[entryHeaderLen+skip:entryHeaderLen+skip+take]...)
		}
		i = j
	}
	return out, nil
}

// prefetchLog starts reading, without waiting, the log range a consumer
// of p that just read the chunks ents (in a sealed segment) will read in
// its next two reads of that size, so the disk fetches it while this read
// is served and the next ones are asked for. Only when the reads pass
// over the range densely (at least half of it is read, the rest being
// gaps over readGap that Read skips): a partition thinly spread through
// the log (one of thousands) would have most of the range read for
// nothing, so its reads are left to the index. At most logAheadMax per
// read. p.logAhead remembers how far it was asked for, so each range is
// asked for once. The kernel's own read-ahead is per open file and every
// reader of a segment shares it: consumers of different partitions
// reading at different places would keep resetting it.
func (s *Store) prefetchLog(p *partition, ents []idxEntry) {
	from, to := ents[0].pos, ents[0].pos
	skipped := int64(0)
	for _, c := range ents {
		if c.hole() {
			continue
		}
		if gap := c.pos - to; gap > readGap {
			skipped += gap
		}
		to = max(to, c.pos+entryHeaderLen+int64(c.n))
	}
	if span := to - from; span <= 0 || skipped > span/2 {
		return
	}
	x, end := to, to+min(2*(to-from), logAheadMax)
	if ahead := p.logAhead.Load(); ahead >= to && ahead <= end {
		x = ahead // the rest was asked for by the previous read
	}
	if x >= end {
		return
	}
	p.logAhead.Store(end)
	for x < end {
		s.segMu.RLock()
		g := s.segmentLocked(x)
		s.segMu.RUnlock()
		if g == nil || !g.isSealed() {
			return // the active segment: recent, in the page cache
		}
		size := g.size.Load()
		if rel := x - g.start; rel < size {
			g.prefetchAt(rel, min(end-x, size-rel))
		}
		x = g.start + size
	}
}

// logAheadMax bounds what one read asks for ahead in the log.
const logAheadMax = 32 << 20

// readGap is the most bytes of other entries one pread of Read spans: a
// system call costs about as much as copying a few KiB, so wider gaps are
// read with separate preads (BenchmarkStore read/interleaved-16: 1 KiB
// chunks 15 KiB apart ran at 30-67 MB/s with 64 KiB gaps merged, 240-260
// with 4 KiB).
const readGap = 4 << 10

// readBufs recycles Read's scratch buffers: fresh memory is slow to touch
// and every get would otherwise allocate one.
var readBufs = sync.Pool{New: func() any { return new([]byte) }}

// damageFound handles a damaged chunk of p (at offset off, log position
// pos, n payload bytes) met while serving: its log range is quarantined,
// the chunk's offsets become a hole (the rest of p stays readable at its
// offsets), the records of the entry that pass their own checksum are
// written back (see salvage), and the writer records p's end in the log so
// that the full scan at the next start-up reaches the same state.
func (s *Store) damageFound(p *partition, off, pos, n int64, cause error) {
	s.corruptionFound(pos, cause)
	s.segMu.Lock()
	if s.quarantinedAt(pos) == 0 {
		s.quarantine = append(s.quarantine, posRange{pos, pos + entryHeaderLen + n})
	}
	s.segMu.Unlock()
	if s.submit(context.Background(), &request{kind: reqHole, p: p, at: off, n: n}) != nil {
		return
	}
	e := make([]byte, entryHeaderLen+n)
	if s.readLog(e, pos) != nil {
		return
	}
	payload := e[entryHeaderLen:]
	a, b := salvage(payload)
	for _, piece := range []struct {
		off  int64
		recs []byte
	}{{off, payload[:a]}, {off + int64(b), payload[b:]}} {
		if len(piece.recs) == 0 {
			continue
		}
		r := &request{kind: reqFill, key: p.key, at: piece.off, payload: piece.recs, records: 1}
		if err := s.submit(context.Background(), r); err != nil {
			s.log.Warn("STORE: cannot keep the intact records of a damaged entry", "err", err)
			return
		}
	}
	if a > 0 || b < len(payload) {
		s.log.Warn("STORE: intact records of a damaged entry are kept", "partition", fmt.Sprintf("%s-%d", p.key.topic, p.key.num),
			"damaged", fmt.Sprintf("[%d, %d)", off+int64(a), off+int64(b)), "kept", a+len(payload)-b)
	}
}

// corruptionFound handles damage met while serving: the damaged entry is
// not served, and the checkpoint is removed so the next start-up scans the
// whole log and quarantines the damage.
func (s *Store) corruptionFound(pos int64, err error) {
	s.log.Error("STORE: corrupt log entry found while reading; it is not served", "position", pos, "err", err)
	s.dropCheckpoint()
}

// readLog fills b from log position pos (within one segment). The
// segment list is locked only to find the segment, not for the read.
func (s *Store) readLog(b []byte, pos int64) error {
	s.segMu.RLock()
	g := s.segmentLocked(pos)
	s.segMu.RUnlock()
	if g == nil {
		return ErrLogTruncated
	}
	return g.readAt(b, pos-g.start)
}

// segmentEnd returns the end position of the segment holding pos (0 if none).
func (s *Store) segmentEnd(pos int64) int64 {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	if g := s.segmentLocked(pos); g != nil {
		return g.end()
	}
	return 0
}

// segmentLocked returns the segment holding pos, or nil.
func (s *Store) segmentLocked(pos int64) *segment {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].start > pos }) - 1
	if i < 0 {
		return nil
	}
	return s.segs[i]
}

// NearestOffset answers the `offset` command (see offset in broker/wire/doc.go).
func (s *Store) NearestOffset(topic string, partition int, offset int64) (int64, error) {
	p := s.lookup(topic, partition)
	if p == nil {
		return 0, ErrNoPartition
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nearestLocked(offset), nil
}

// OffsetForTime returns the offset of the first record appended at or after
// t: Max when none was. Chunk times never decrease along the log, so the
// index blocks' first times narrow the search to one block.
func (s *Store) OffsetForTime(topic string, partition int, t time.Time) (int64, error) {
	p := s.lookup(topic, partition)
	if p == nil {
		return 0, ErrNoPartition
	}
	return s.offsetForTime(p, t.UnixMilli())
}

// Backlog answers how far behind a reader at offset from is in one
// partition (the replication shipper's lag): the records from from to the
// durable end and the append time of the chunk holding from (zero when
// from is at or beyond the end). The time is exact, from the index (one
// block read at most); the count is the bytes divided by the partition's
// mean record size, exact when records are of one size.
func (s *Store) Backlog(topic string, partition int, from int64) (int64, time.Time, error) {
	p := s.lookup(topic, partition)
	if p == nil {
		return 0, time.Time{}, ErrNoPartition
	}
	p.mu.Lock()
	from = max(from, p.min)
	end := p.durable.Load()
	msgs := p.recordsInLocked(end - from)
	p.mu.Unlock()
	if from >= end {
		return 0, time.Time{}, nil
	}
	ents, err := s.chunks(p, from, 1)
	if err != nil {
		return msgs, time.Time{}, err
	}
	if len(ents) == 0 {
		return msgs, time.Time{}, nil
	}
	return msgs, time.UnixMilli(ents[0].ms), nil
}

// Partition returns one partition's bounds.
func (s *Store) Partition(topic string, partition int) (PartitionInfo, error) {
	p := s.lookup(topic, partition)
	if p == nil {
		return PartitionInfo{}, ErrNoPartition
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked(), nil
}

// Partitions lists every partition, sorted by topic then partition.
func (s *Store) Partitions() []PartitionInfo {
	s.mu.RLock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	s.mu.RUnlock()
	out := make([]PartitionInfo, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		out = append(out, p.infoLocked())
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// LogBounds returns the first retained and the durable end position of the shared log.
func (s *Store) LogBounds() (first, durable int64) {
	s.segMu.RLock()
	if len(s.segs) > 0 {
		first = s.segs[0].start
	}
	s.segMu.RUnlock()
	return first, s.durable()
}

func (s *Store) durable() int64 {
	s.durMu.Lock()
	defer s.durMu.Unlock()
	return s.durablePos
}

func (s *Store) setDurable(pos int64) {
	s.durMu.Lock()
	if pos > s.durablePos {
		s.durablePos = pos
		close(s.durCh)
		s.durCh = make(chan struct{})
	}
	s.durMu.Unlock()
}

// WaitDurable blocks until the durable log end is beyond pos or ctx ends.
func (s *Store) WaitDurable(ctx context.Context, pos int64) error {
	for {
		s.durMu.Lock()
		if s.durablePos > pos {
			s.durMu.Unlock()
			return nil
		}
		ch := s.durCh
		s.durMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return ErrClosed
		}
	}
}

// DeletePartition removes a partition's data (operator command). Its
// records stay in the shared log until retention removes the segments, but
// they are never served again.
func (s *Store) DeletePartition(topic string, partition int) error {
	if s.lookup(topic, partition) == nil {
		return ErrNoPartition
	}
	return s.submit(context.Background(), &request{kind: reqDelete, key: pkey{topic, partition}})
}

// Flush fsyncs everything appended so far.
func (s *Store) Flush() error {
	return s.submit(context.Background(), &request{kind: reqFlush})
}

// Health is nil while the store accepts appends, else why not: the disk
// error that stopped it for good (a failed fdatasync), or, while the disk
// is full, an error wrapping ErrNoSpace that goes away by itself once an
// append (or ProbeSpace) finds room again.
func (s *Store) Health() error {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.healthErr != nil {
		return s.healthErr
	}
	return s.blockedErr
}

// ProbeSpace is nil once the store accepts appends again after a full
// disk refused one: it tries a small write (see probeSpace) rather than
// waiting for an append to do so, for a caller that refuses client writes
// meanwhile. It returns the error that stopped the store, if one did.
func (s *Store) ProbeSpace(ctx context.Context) error {
	if err := s.fatal(); err != nil {
		return err
	}
	if s.Health() == nil {
		return nil
	}
	return s.submit(ctx, &request{kind: reqProbe})
}

// fatal is the error that stopped the store for good, or nil.
func (s *Store) fatal() error {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	return s.healthErr
}

// writeFailed handles a failed write (already cut back, so nothing partial
// stays). A full disk (ENOSPC, EDQUOT) only refuses this batch: nothing
// written before is touched and the next append tries again. Anything else
// stops the store.
func (s *Store) writeFailed(err error) error {
	if !isNoSpace(err) {
		return s.setUnhealthy(err)
	}
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.blockedErr == nil {
		s.log.Error("STORE: disk full, refusing appends until there is room", "dir", s.dir, "err", err)
	}
	s.blockedErr = &noSpaceError{cause: err}
	return s.blockedErr
}

// isNoSpace reports whether err is a write refused for a full disk.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// writeOK clears a full-disk refusal once a write succeeded, and then
// starts again a sealing that failed for lack of room (retrySeal). Only
// the writer goroutine calls it.
func (s *Store) writeOK() {
	s.healthMu.Lock()
	was := s.blockedErr != nil
	if was {
		s.log.Info("STORE: disk has room again, accepting appends", "dir", s.dir)
		s.blockedErr = nil
	}
	s.healthMu.Unlock()
	if was {
		s.retrySeal()
	}
}

func (s *Store) setUnhealthy(err error) error {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.healthErr == nil {
		s.healthErr = &unhealthyError{cause: err}
		s.log.Error("STORE: disk error, refusing appends", "dir", s.dir, "err", err)
	}
	return s.healthErr
}

// Close flushes and closes the store. Idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stopScrub()
		if s.cs != nil {
			close(s.csStop)
			<-s.csDone
		}
		s.closeMu.Lock()
		s.closed = true
		s.closeMu.Unlock()
		close(s.quit)
		<-s.done
		s.closeErr = s.shutdown()
		// A roll's checkpoint may still be written: it syncs .idx files.
		s.ckpt.wg.Wait()
		s.closeFiles()
	})
	return s.closeErr
}

// Damage is a range of a partition whose records were lost to damage on
// disk: never served, never handed out again (see doc.go, Recovery).
type Damage struct {
	Topic     string
	Partition int
	From, To  int64 // partition offsets [From, To)
}

// Damaged lists the damaged ranges of every partition, sorted. A store with
// any is degraded: it serves and accepts appends, but records were lost
// (until repaired from a replica, see Repair).
func (s *Store) Damaged() []Damage {
	s.mu.RLock()
	var out []Damage
	for _, p := range s.parts {
		p.mu.Lock()
		for _, h := range p.holes {
			out = append(out, Damage{Topic: p.key.topic, Partition: p.key.num, From: h.from, To: h.to})
		}
		p.mu.Unlock()
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.From < b.From
	})
	return out
}

// Degraded is nil while no partition has a damaged range, else an error
// naming them (at most ten). The store still serves and accepts appends.
func (s *Store) Degraded() error {
	d := s.Damaged()
	if len(d) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "store: degraded: %d damaged range(s), records lost:", len(d))
	for i, x := range d {
		if i == 10 {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " %s-%d [%d, %d)", x.Topic, x.Partition, x.From, x.To)
	}
	return errors.New(b.String())
}

// SkipTo moves a partition's end up to at, leaving the offsets below it a
// hole: a replica uses it when its master lost records there (a hole
// marker from ReadLog), so its offsets keep matching the master's. A
// missing partition is created at at.
func (s *Store) SkipTo(ctx context.Context, topic string, partition int, at int64) error {
	if err := checkKey(topic, partition); err != nil {
		return err
	}
	if at < 0 {
		return fmt.Errorf("%w: offset %d", ErrBadArgument, at)
	}
	if err := s.fatal(); err != nil {
		return err
	}
	if err := s.submit(ctx, &request{kind: reqSkip, key: pkey{topic, partition}, at: at}); err != nil {
		return fmt.Errorf("store: skip %s-%d to %d: %w", topic, partition, at, err)
	}
	return nil
}

// Repair writes records into a damaged range of a partition at off:
// whole, verified records (framing and CRC), exactly the bytes the
// partition held there, as fetched from a replica. They may cover the
// range in part; the rest stays damaged. The records are appended to the
// log (the damaged bytes are never touched) and served at their offsets
// from then on.
func (s *Store) Repair(ctx context.Context, topic string, partition int, off int64, records []byte) error {
	n, err := VerifyRecords(records)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: no records", ErrBadArgument)
	}
	if err != nil {
		return fmt.Errorf("store: repair %s-%d at %d: %w", topic, partition, off, err)
	}
	if err := s.fatal(); err != nil {
		return err
	}
	r := &request{kind: reqFill, key: pkey{topic, partition}, at: off, payload: records, records: n}
	if err := s.submit(ctx, r); err != nil {
		return fmt.Errorf("store: repair %s-%d at %d: %w", topic, partition, off, err)
	}
	s.log.Warn("STORE: damaged range repaired", "partition", fmt.Sprintf("%s-%d", topic, partition),
		"from", off, "to", off+int64(len(records)))
	return nil
}
