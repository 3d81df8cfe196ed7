//lint:file-ignore ST1005 the slave errors are MetaQ's own texts, which Java producers show and match

package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/clock"
)

// slaveStatusTopic is the internal topic a MetaQ sync slave accepts for
// the master's health probes.
const slaveStatusTopic = "_metaq_slave_status_test"

// syncMaster is the put route's store step on a synchronous-replication
// master (MetaQ's samsa): in front of the broker's store, it has every
// message stored twice, in the local store and on the slave, sent over one
// pipelined MetaQ-protocol connection as `sync` with an id it picks, and
// answers a message as stored only when both did. It owns the ids, the
// connection to the slave and the slave's health: after FailureThreshold
// failed syncs in a row it calls OnSlaveLost, probes the slave, and calls
// OnSlaveBack once the slave stores a probe again.
//
// A partition's batches are replicated in order by one goroutine per busy
// partition, those queued while the previous ones waited together, their
// syncs written in order before their local append, so ids and offsets
// rise in the same order on both sides and a slow slave holds up neither
// the caller nor other partitions.
//
// A transaction's commit goes to the slave as one sync unit when the
// slave offered them on the connection (askUnits): it stores the unit all
// or none, so a slave cut off, killed or promoted in the middle of a
// commit holds none of it rather than part. A MetaQ slave offers none and
// gets one sync per message.
type syncMaster struct {
	local Store
	opts  syncMasterOptions
	log   *slog.Logger
	ids   idGen

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // partition goroutines and the probe loop

	queues *serialQueues[partKey, syncJob] // a partition's batches, replicated in order

	closeMu sync.Mutex // guards closed, and starting goroutines
	closed  bool

	failures atomic.Int64 // failed syncs in a row
	degraded atomic.Bool  // the slave was given up, probing it

	mu      sync.Mutex // guards the connection fields below
	nc      net.Conn
	pending map[int32]chan *wire.Result
	opaque  int32
	ncDone  bool // close was called: no new connection
	// unitBytes is the largest sync unit the slave of nc takes (it
	// answered `stats sync_units`), 0 when it offered none (a MetaQ
	// slave): a commit then goes as one sync per message.
	unitBytes int
	wmu       sync.Mutex // serialises writes on nc
	readers   sync.WaitGroup
}

// syncMasterOptions configure a syncMaster.
type syncMasterOptions struct {
	Addr             string // the slave's MetaQ-protocol host:port
	BrokerID         int
	Clock            clock.Clock
	Timeout          time.Duration // one sync's round trip
	FailureThreshold int
	ProbeInterval    time.Duration
	Logger           *slog.Logger
	// OnSlaveLost and OnSlaveBack run on the probe goroutine; their ctx
	// ends when the syncMaster is closed.
	OnSlaveLost func(ctx context.Context)
	OnSlaveBack func(ctx context.Context)
}

type partKey struct {
	topic     string
	partition int
}

type syncJob struct {
	msgs []store.Message // bodies copied: the caller reuses its buffers
	done func([]store.Appended, error)
	// unit is set instead on a unit's place in the queue of each of its
	// partitions (storeUnit).
	unit *syncUnit
}

// syncUnit is a transaction's commit on a synchronous master: the batches
// of several partitions replicated and stored as one unit (storeUnit).
// It has a place in each of its partitions' queues; the goroutine of the
// last partition to reach it runs it (runUnit) while the others wait, so
// in every one of its partitions it comes after the batches queued before
// it and before those queued after.
type syncUnit struct {
	appends []store.PartitionAppend // bodies copied
	done    func([]store.AppendOutcome)
	parts   int32        // distinct partitions: places in queues
	arrived atomic.Int32 // places reached
	ran     chan struct{}
}

func newSyncMaster(local Store, opts syncMasterOptions) *syncMaster {
	ctx, cancel := context.WithCancel(context.Background())
	s := &syncMaster{
		local:   local,
		opts:    opts,
		log:     opts.Logger,
		ctx:     ctx,
		cancel:  cancel,
		pending: make(map[int32]chan *wire.Result),
	}
	s.queues = newSerialQueues(&s.wg, maxSyncJobs, s.replicate)
	s.ids.brokerID = int64(opts.BrokerID)
	s.ids.clock = opts.Clock
	return s
}

// slaveError is a message the slave did not store; its text is the answer.
type slaveError struct{ text string }

func (e *slaveError) Error() string { return e.text }

// storeBatch queues the batch on its partition (see batchStore). ctx is
// not used: a queued batch completes (see replicate).
func (s *syncMaster) storeBatch(_ context.Context, topic string, partition int, msgs []store.Message, done func([]store.Appended, error)) {
	cp := copyMessages(msgs)
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		done(nil, fmt.Errorf("broker: sync replication to %s: %w", s.opts.Addr, ErrClosed))
		return
	}
	s.queues.push(partKey{topic, partition}, syncJob{msgs: cp, done: done}, true)
}

// copyMessages copies msgs with their bodies in one buffer: the caller
// reuses its buffers once the store call returns.
func copyMessages(msgs []store.Message) []store.Message {
	cp := make([]store.Message, len(msgs))
	n := 0
	for _, m := range msgs {
		n += len(m.Body)
	}
	buf := make([]byte, 0, n)
	for i, m := range msgs {
		cp[i] = m
		buf = append(buf, m.Body...)
		cp[i].Body = buf[len(buf)-len(m.Body) : len(buf) : len(buf)]
	}
	return cp
}

// storeUnit stores a transaction's commit as one unit (see unitStore):
// the commit is sent to the slave as one sync unit when the slave offered
// them (wire.SyncUnit: the slave stores it all or none, so it never holds
// part of a commit), otherwise every message of all its partitions as
// `sync` (MetaQ's command carries one message), pipelined; the commit is
// appended locally as one unit (store.Store.AppendUnitAsync, so the
// cross-site replication of this master ships it whole), and one wait
// for the slave's answers decides the outcome of each partition,
// reported to done once for the whole commit. In each partition the unit
// keeps its place among the batches (see syncUnit); units are queued
// under closeMu, so two units sharing partitions are in the same order in
// all of their queues.
func (s *syncMaster) storeUnit(_ context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	u := &syncUnit{appends: make([]store.PartitionAppend, len(appends)), done: done, ran: make(chan struct{})}
	var keys []partKey
	seen := map[partKey]bool{}
	for i, a := range appends {
		u.appends[i] = store.PartitionAppend{Topic: a.Topic, Partition: a.Partition, Msgs: copyMessages(a.Msgs)}
		if k := (partKey{a.Topic, a.Partition}); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	u.parts = int32(len(keys))
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed || len(keys) == 0 {
		outs := make([]store.AppendOutcome, len(appends))
		for i := range outs {
			outs[i].Err = fmt.Errorf("broker: sync replication to %s: %w", s.opts.Addr, ErrClosed)
		}
		if len(keys) == 0 {
			outs = outs[:0]
		}
		done(outs)
		return
	}
	for _, k := range keys {
		s.queues.push(k, syncJob{unit: u}, true)
	}
}

// maxSyncJobs bounds the batches a partition replicates together.
const maxSyncJobs = 64

// replicate runs a partition's queued jobs in order: runs of batches
// (replicateBatches), and the units it reaches (reachUnit).
func (s *syncMaster) replicate(k partKey, jobs []syncJob) {
	for len(jobs) > 0 {
		n := 0
		for n < len(jobs) && jobs[n].unit == nil {
			n++
		}
		if n > 0 {
			s.replicateBatches(k, jobs[:n:n])
		}
		if n < len(jobs) {
			s.reachUnit(jobs[n].unit)
			n++
		}
		jobs = jobs[n:]
	}
}

// reachUnit is a partition's goroutine at its place for u: the last of
// u's partitions to get there runs it, the others wait until it ran, so
// none of their later batches overtakes it.
func (s *syncMaster) reachUnit(u *syncUnit) {
	if u.arrived.Add(1) < u.parts {
		<-u.ran
		return
	}
	s.runUnit(u)
	close(u.ran)
}

// runUnit replicates and stores the unit u (see storeUnit). It runs on
// the syncMaster's context, as replicate: once queued, it completes.
func (s *syncMaster) runUnit(u *syncUnit) {
	cmd := &wire.SyncUnit{}
	for _, a := range u.appends {
		for i := range a.Msgs {
			m := &a.Msgs[i]
			if m.ID == 0 {
				m.ID = s.ids.next()
			}
			cmd.Syncs = append(cmd.Syncs, wire.Sync{Topic: a.Topic, Partition: int32(a.Partition), Flag: m.Flag, MsgID: m.ID, Checksum: wire.Checksum(m.Body), Body: m.Body})
		}
	}
	// waits[i][j] is the slave's answer for message j of append i: one
	// wait shared by all when the unit went whole.
	waits := make([][]func() error, len(u.appends))
	if wait, ok := s.startUnit(s.ctx, cmd); ok {
		var serr error
		waited := false
		shared := func() error {
			if !waited {
				serr, waited = wait(), true
			}
			return serr
		}
		for i, a := range u.appends {
			waits[i] = slices.Repeat([]func() error{shared}, len(a.Msgs))
		}
	} else {
		k := 0
		for i, a := range u.appends {
			waits[i] = make([]func() error, len(a.Msgs))
			for j := range a.Msgs {
				waits[i][j] = s.start(s.ctx, &cmd.Syncs[k])
				k++
			}
		}
	}
	var local []store.AppendOutcome
	if ua, ok := s.local.(unitAppender); ok {
		ch := make(chan []store.AppendOutcome, 1)
		ua.AppendUnitAsync(s.ctx, u.appends, func(o []store.AppendOutcome) { ch <- o })
		local = <-ch
	} else {
		local = make([]store.AppendOutcome, len(u.appends))
		for i, a := range u.appends {
			local[i].Appended, local[i].Err = s.local.Append(s.ctx, a.Topic, a.Partition, a.Msgs)
		}
	}
	outs := make([]store.AppendOutcome, len(u.appends))
	for i, a := range u.appends {
		errs := make(messageErrors, len(a.Msgs))
		failed := false
		for j, wait := range waits[i] {
			serr := wait()
			s.noteResult(serr == nil)
			switch {
			case serr != nil:
				errs[j] = s.slaveFailure(a.Topic, a.Partition, serr)
			case local[i].Err != nil:
				errs[j] = local[i].Err
			}
			failed = failed || errs[j] != nil
		}
		outs[i].Appended = local[i].Appended
		if len(outs[i].Appended) != len(a.Msgs) {
			outs[i].Appended = make([]store.Appended, len(a.Msgs))
		}
		if failed {
			outs[i].Err = errs
		}
	}
	u.done(outs)
}

// slaveFailure is the answer for a message the slave did not store.
func (s *syncMaster) slaveFailure(topic string, partition int, serr error) error {
	s.log.Warn("SYNC: slave did not store the message", "slave", s.opts.Addr, "topic", topic, "partition", partition, "err", serr)
	text := fmt.Sprintf("Put message to [slave 'meta://%s'] [partition '%s-%d'] failed", s.opts.Addr, topic, partition)
	if errors.Is(serr, errSlaveDisconnected) {
		text = errSlaveDisconnected.Error()
	}
	return &slaveError{text: text}
}

// replicateBatches sends the messages of a partition's queued batches to
// the slave, pipelined and in order, and appends them locally with one
// call, then reports each message's outcome to its batch: stored when both
// stored it. It runs on the syncMaster's context: a batch in the queue
// completes unless the broker closes.
func (s *syncMaster) replicateBatches(k partKey, jobs []syncJob) {
	msgs := jobs[0].msgs
	if len(jobs) > 1 {
		msgs = nil
		for _, j := range jobs {
			msgs = append(msgs, j.msgs...)
		}
	}
	waits := make([]func() error, len(msgs))
	for i := range msgs {
		if msgs[i].ID == 0 {
			msgs[i].ID = s.ids.next()
		}
		m := &msgs[i]
		waits[i] = s.start(s.ctx, &wire.Sync{Topic: k.topic, Partition: int32(k.partition), Flag: m.Flag, MsgID: m.ID, Checksum: wire.Checksum(m.Body), Body: m.Body})
	}
	as, lerr := s.local.Append(s.ctx, k.topic, k.partition, msgs)
	errs := make(messageErrors, len(msgs))
	for i, wait := range waits {
		serr := wait()
		s.noteResult(serr == nil)
		switch {
		case serr != nil:
			errs[i] = s.slaveFailure(k.topic, k.partition, serr)
		case lerr != nil:
			errs[i] = lerr
		}
	}
	if len(as) != len(msgs) {
		as = make([]store.Appended, len(msgs))
	}
	for _, j := range jobs {
		n := len(j.msgs)
		jas, jerrs := as[:n:n], errs[:n:n]
		as, errs = as[n:], errs[n:]
		if slices.ContainsFunc(jerrs, func(err error) bool { return err != nil }) {
			j.done(jas, jerrs)
		} else {
			j.done(jas, nil)
		}
	}
}

// noteResult counts failed syncs in a row; at FailureThreshold the master
// gives the slave up (OnSlaveLost) and starts probing it.
func (s *syncMaster) noteResult(ok bool) {
	if ok {
		s.failures.Store(0)
		return
	}
	if s.failures.Add(1) < int64(s.opts.FailureThreshold) {
		return
	}
	if !s.degraded.CompareAndSwap(false, true) {
		return
	}
	s.log.Error("SYNC: slave keeps failing; leaving ZooKeeper until it answers again",
		"slave", s.opts.Addr, "failures", s.failures.Load())
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.probeLoop()
	}()
}

// probeLoop runs OnSlaveLost, then sends a probe sync every ProbeInterval
// until the slave stores one, and runs OnSlaveBack.
func (s *syncMaster) probeLoop() {
	if s.opts.OnSlaveLost != nil {
		s.opts.OnSlaveLost(s.ctx)
	}
	body := []byte("test")
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.opts.ProbeInterval):
		}
		probe := &wire.Sync{Topic: slaveStatusTopic, Partition: 0, MsgID: s.ids.next(), Checksum: wire.Checksum(body), Body: body}
		if err := s.start(s.ctx, probe)(); err != nil {
			continue
		}
		s.log.Info("SYNC: slave answers again", "slave", s.opts.Addr)
		s.failures.Store(0)
		if s.opts.OnSlaveBack != nil {
			s.opts.OnSlaveBack(s.ctx)
		}
		s.degraded.Store(false)
		return
	}
}

// errSlaveDisconnected is MetaQ's text, trailing space included.
var errSlaveDisconnected = errors.New("Slave is disconnected ")

// start writes one sync to the slave and returns the wait for its answer:
// nil once the slave answered 200.
func (s *syncMaster) start(ctx context.Context, cmd *wire.Sync) (wait func() error) {
	ch := make(chan *wire.Result, 1)
	nc, op, err := s.register(ch, 0)
	if err != nil {
		return func() error { return err }
	}
	cmd.Opaque = op
	return s.send(ctx, nc, cmd, ch)
}

// startUnit writes the sync unit cmd to the slave and returns the wait for
// its answer, as start does, when the slave's connection takes units of
// its size; otherwise it sends nothing and reports false.
func (s *syncMaster) startUnit(ctx context.Context, cmd *wire.SyncUnit) (wait func() error, ok bool) {
	ch := make(chan *wire.Result, 1)
	nc, op, err := s.register(ch, cmd.BodyLen())
	if errors.Is(err, errNoUnits) {
		return nil, false
	}
	if err != nil {
		return func() error { return err }, true
	}
	cmd.Opaque = op
	return s.send(ctx, nc, cmd, ch), true
}

// send writes cmd, registered under its opaque with ch, on nc and returns
// the wait for its answer: nil once the slave answered 200.
func (s *syncMaster) send(ctx context.Context, nc net.Conn, cmd wire.Command, ch chan *wire.Result) (wait func() error) {
	op := cmd.OpaqueID()
	timeout := s.opts.Timeout
	deadline := time.Now().Add(timeout)
	s.wmu.Lock()
	nc.SetWriteDeadline(deadline)
	_, err := nc.Write(cmd.AppendTo(nil))
	s.wmu.Unlock()
	if err != nil {
		s.unregister(op)
		s.drop(nc, err)
		return func() error { return fmt.Errorf("broker: %s to %s: %w", cmd.Name(), s.opts.Addr, err) }
	}
	return func() error {
		defer s.unregister(op)
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case r := <-ch:
			if r == nil {
				return errSlaveDisconnected
			}
			if !r.OK() {
				return fmt.Errorf("broker: slave answered %d %s", r.Code, r.Body)
			}
			return nil
		case <-t.C:
			return fmt.Errorf("broker: %s to %s timed out after %v", cmd.Name(), s.opts.Addr, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errNoUnits is register's answer for a sync unit the slave's connection
// does not take: it offered none, or none that large.
var errNoUnits = errors.New("broker: the slave takes no sync unit of that size")

// register takes an opaque for a request answered on ch and returns the
// connection, dialling it if needed. unitBytes > 0 registers a sync unit
// of that many bytes, which fails with errNoUnits unless the connection's
// slave takes it. The dial and askUnits run under mu (bounded by
// Timeout): every request waits for the connection either way.
func (s *syncMaster) register(ch chan *wire.Result, unitBytes int) (net.Conn, int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ncDone {
		return nil, 0, errSlaveDisconnected
	}
	if s.nc == nil {
		nc, err := net.DialTimeout("tcp", s.opts.Addr, s.opts.Timeout)
		if err != nil {
			s.log.Warn("SYNC: cannot connect to slave", "slave", s.opts.Addr, "err", err)
			return nil, 0, errSlaveDisconnected
		}
		br := bufio.NewReader(nc)
		units, err := s.askUnits(nc, br)
		if err != nil {
			nc.Close()
			s.log.Warn("SYNC: slave did not answer stats "+syncUnitsItem, "slave", s.opts.Addr, "err", err)
			return nil, 0, errSlaveDisconnected
		}
		s.log.Info("SYNC: connected to slave", "slave", s.opts.Addr, "syncUnitBytes", units)
		s.nc, s.unitBytes = nc, units
		s.readers.Add(1)
		go s.readLoop(nc, br)
	}
	if unitBytes > 0 && unitBytes > s.unitBytes {
		return nil, 0, errNoUnits
	}
	s.opaque++
	s.pending[s.opaque] = ch
	return s.nc, s.opaque, nil
}

// askUnits asks a newly dialled slave whether it takes sync units (stats
// sync_units, before anything else is sent on nc) and returns the largest
// it takes, 0 for none. A MetaQ slave answers the statistics of a topic of
// that name, without the line.
func (s *syncMaster) askUnits(nc net.Conn, br *bufio.Reader) (int, error) {
	nc.SetDeadline(time.Now().Add(s.opts.Timeout))
	defer nc.SetDeadline(time.Time{})
	const op = 0
	if _, err := nc.Write((&wire.Stats{Item: syncUnitsItem, HasItem: true, Opaque: op, HasOpaque: true}).AppendTo(nil)); err != nil {
		return 0, fmt.Errorf("broker: ask %s for sync units: %w", s.opts.Addr, err)
	}
	cmd, err := wire.NewDecoder(br).Decode()
	if err != nil {
		return 0, fmt.Errorf("broker: ask %s for sync units: %w", s.opts.Addr, err)
	}
	r, ok := cmd.(*wire.Result)
	if !ok || r.Opaque != op {
		return 0, fmt.Errorf("broker: ask %s for sync units: answered %s %d", s.opts.Addr, cmd.Name(), cmd.OpaqueID())
	}
	return syncUnitBytes(r), nil
}

// syncUnitBytes reads the "sync_units <bytes>" line of a slave's answer to
// stats sync_units: 0 when there is none (a MetaQ slave).
func syncUnitBytes(r *wire.Result) int {
	if !r.OK() {
		return 0
	}
	for _, line := range strings.Split(string(r.Body), "\r\n") {
		f := strings.Split(line, " ")
		if len(f) != 2 || f[0] != syncUnitsItem {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

func (s *syncMaster) unregister(op int32) {
	s.mu.Lock()
	delete(s.pending, op)
	s.mu.Unlock()
}

func (s *syncMaster) readLoop(nc net.Conn, br *bufio.Reader) {
	defer s.readers.Done()
	d := wire.NewDecoder(br)
	for {
		cmd, err := d.Decode()
		if err != nil {
			s.drop(nc, err)
			return
		}
		r, ok := cmd.(*wire.Result)
		if !ok {
			continue
		}
		s.mu.Lock()
		ch := s.pending[r.Opaque]
		delete(s.pending, r.Opaque)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// drop forgets a broken connection and fails every request pending on it.
func (s *syncMaster) drop(nc net.Conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nc {
		return
	}
	if !s.ncDone {
		s.log.Warn("SYNC: lost connection to slave", "slave", s.opts.Addr, "err", err)
	}
	nc.Close()
	s.nc, s.unitBytes = nil, 0
	for op, ch := range s.pending {
		ch <- nil
		delete(s.pending, op)
	}
}

// close fails the batches still queued, stops the probe loop, closes the
// connection and waits for every goroutine of the syncMaster.
func (s *syncMaster) close() {
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	s.cancel()
	s.mu.Lock()
	s.ncDone = true
	nc := s.nc
	s.mu.Unlock()
	if nc != nil {
		s.drop(nc, errors.New("closed"))
	}
	s.wg.Wait()
	s.readers.Wait()
}
