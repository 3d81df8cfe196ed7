package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker"
	"metaq/broker/store"
	"metaq/internal/clock"
)

// XA error codes used by MetaQ (javax.transaction.xa.XAException).
const (
	XAErrRMErr  = -3  // XAER_RMERR
	XAErrNotA   = -4  // XAER_NOTA
	XAErrProto  = -6  // XAER_PROTO
	XAErrRMFail = -7  // XAER_RMFAIL
	XAHeurHaz   = 8   // XA_HEURHAZ
	XAHeurCom   = 7   // XA_HEURCOM
	XAHeurRB    = 6   // XA_HEURRB
	XARBOther   = 104 // XA_RBOTHER
	VoteOK      = 0   // XA_OK
	VoteRDOnly  = 3   // XA_RDONLY
	defaultFile = 64 << 20
)

// XAError is an XAException; the broker answers it as
// `500 XAException:code=<Code>,msg=<Msg>`, which the Java client parses.
type XAError struct {
	Code int
	Msg  string
}

func (e *XAError) Error() string { return "XAException:code=" + strconv.Itoa(e.Code) + ",msg=" + e.Msg }

// ErrNotStarted is wrapped by the error for a local transaction that is not
// open on the connection. Its text is MetaQ's and goes to the client as is.
var ErrNotStarted = errors.New("transaction has not been started")

type notStartedError struct{ key string }

func (e *notStartedError) Error() string {
	return "Local transaction '" + e.key + "' has not been started."
}
func (e *notStartedError) Unwrap() error { return ErrNotStarted }

// ErrNotStored is what a Store's error wraps when it refused a write before
// storing any of it (the broker's write gate: broker.ErrNotStored).
var ErrNotStored = broker.ErrNotStored

// GroupStore is a Store that stores the batches of several partitions as
// one unit: all or none of them reach the log, with one check of the
// broker's write gate (broker.Broker.StoreValidatedGroup). Its error wraps
// ErrNotStored when none was stored (outs nil); any other error with outs
// says some or all may be stored (writes stopped on the way: the outcome is
// unknown to the producer even when every outcome is a success); outs has
// one outcome per append otherwise.
type GroupStore interface {
	Store
	AppendGroup(ctx context.Context, appends []store.PartitionAppend) ([]store.AppendOutcome, error)
}

// ErrClosed is returned after Close.
var ErrClosed = errors.New("txn: closed")

// Store is what transactions need from the storage engine. A broker's
// bundle gives Append the broker's put route (broker.Broker.StoreValidated),
// so committed messages pass its write gate and reach a synchronous slave;
// tests may give the store itself.
type Store interface {
	Append(ctx context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error)
	Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error)
	Partition(topic string, partition int) (store.PartitionInfo, error)
}

// Options configure a Manager.
type Options struct {
	// Dir is the transactions directory, <dataLogPath>/transactions.
	Dir   string
	Store Store
	// NextID hands out message ids (see Message ids in broker/wire/doc.go); required.
	NextID func() int64
	// FlushAtCommit is flushTxLogAtCommit: 0, 1 (default when unset is up to the caller) or 2.
	FlushAtCommit int
	// MaxTimeout caps a BEGIN's timeout (maxTxTimeoutInSeconds).
	MaxTimeout time.Duration
	// JournalFileSize is when the journal is compacted; default 64 MiB.
	JournalFileSize int64
	Logger          *slog.Logger
	Clock           clock.Clock
}

// ConnID identifies a client connection; local transactions belong to one.
type ConnID uint64

type state int

const (
	stateStart state = iota
	stateInUse
	statePrepared
	stateCommitting
	stateHeurCommit
	stateHeurRollback
	stateHeurComplete
)

type message struct {
	topic     string
	partition int
	id        int64
	flag      int32
	body      []byte
}

type tx struct {
	key      string
	xa       bool
	uq       string // XA unique qualifier
	conn     ConnID // local only
	state    state
	msgs     []message
	deadline time.Time // zero: none
	intent   []intentPart
}

// Manager owns every open transaction and the journal. Safe for concurrent use.
type Manager struct {
	opts   Options
	log    *slog.Logger
	clock  clock.Clock
	mu     sync.Mutex
	j      *journal
	dirty  bool           // entries written since the last fsync (FlushAtCommit 2)
	local  map[string]*tx // key -> tx (key embeds the session id; conn checked)
	xa     map[string]*tx
	heur   map[string]*tx
	closed atomic.Bool
	quit   chan struct{}
	wg     sync.WaitGroup
}

// Open replays the journal under opts.Dir, finishes half-done commits,
// restores prepared XA transactions and rolls back the rest.
func Open(opts Options) (*Manager, error) {
	if opts.Dir == "" || opts.Store == nil || opts.NextID == nil {
		return nil, errors.New("txn: Dir, Store and NextID are required")
	}
	if opts.FlushAtCommit < 0 || opts.FlushAtCommit > 2 {
		return nil, fmt.Errorf("txn: flushTxLogAtCommit=%d, expected 0, 1 or 2", opts.FlushAtCommit)
	}
	if opts.JournalFileSize <= 0 {
		opts.JournalFileSize = defaultFile
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("txn: create %s: %w", opts.Dir, err)
	}
	m := &Manager{
		opts: opts, log: opts.Logger.With("component", "txn"), clock: opts.Clock,
		local: map[string]*tx{}, xa: map[string]*tx{}, heur: map[string]*tx{},
		quit: make(chan struct{}),
	}
	if err := m.recover(); err != nil {
		return nil, err
	}
	m.wg.Add(1)
	go m.tickLoop()
	return m, nil
}

// recover replays every journal file, settles what is unfinished and writes
// the survivors to a fresh file.
func (m *Manager) recover() error {
	ns, err := listJournals(m.opts.Dir)
	if err != nil {
		return fmt.Errorf("txn: list %s: %w", m.opts.Dir, err)
	}
	all := map[string]*tx{}
	var order []string
	get := func(key string) *tx {
		t := all[key]
		if t == nil {
			t = &tx{key: key}
			if k, err := ParseKey(key); err == nil {
				t.xa, t.uq = k.XA, k.UniqueQualifier
			}
			all[key] = t
			order = append(order, key)
		}
		return t
	}
	for i, n := range ns {
		path := journalName(m.opts.Dir, n)
		entries, valid, err := readJournal(path)
		if err != nil {
			return fmt.Errorf("txn: read journal %s: %w", path, err)
		}
		if fi, err := os.Stat(path); err == nil && fi.Size() != valid {
			m.log.Warn("journal has a torn or corrupt tail; ignoring it", "path", path, "valid", valid, "size", fi.Size(), "last", i == len(ns)-1)
		}
		for _, e := range entries {
			if e.kind == kindSnapshot {
				// This file restates every live transaction: the files
				// before it are its sources, left by a crash before their
				// removal, and replaying them too would add their puts twice.
				all, order = map[string]*tx{}, nil
				continue
			}
			t := get(e.rec.Key)
			switch e.kind {
			case kindPut:
				t.msgs = append(t.msgs, message{e.rec.Topic, e.rec.Partition, e.rec.ID, e.rec.Flag, e.rec.Body})
				if t.state == stateStart {
					t.state = stateInUse
				}
			case kindPrepare:
				// After an intent: a commit refused before it stored
				// anything left the transaction prepared.
				t.state, t.intent = statePrepared, nil
			case kindIntent:
				t.state, t.intent = stateCommitting, e.rec.Parts
			case kindDone, kindRollback, kindForget:
				delete(all, e.rec.Key)
			case kindHeuristic:
				t.state = state(e.rec.State)
				t.msgs = nil
			}
		}
	}
	for _, key := range order {
		t := all[key]
		if t == nil {
			continue
		}
		switch {
		case t.state == stateCommitting:
			if err := m.finishCommit(t); errors.Is(err, ErrNotStored) {
				// The broker refuses writes (it starts as a replica, or
				// until it confirms it is the master): the intent is kept,
				// for a COMMIT sent again or the next start.
				m.log.Warn("a commit interrupted by a crash cannot be finished now: writes are refused; kept for the next start", "tx", key, "err", err)
				t.state = stateInUse
				if t.xa {
					t.state = statePrepared
					m.xa[key] = t
				} else {
					m.local[key] = t
				}
				continue
			} else if err != nil {
				return fmt.Errorf("txn: finish commit of %s at start-up: %w", key, err)
			}
			m.log.Info("finished a commit interrupted by a crash", "tx", key, "messages", len(t.msgs))
			delete(all, key)
		case t.state == statePrepared && t.xa:
			m.xa[key] = t
			m.log.Info("restored prepared XA transaction", "tx", key, "messages", len(t.msgs))
		case t.state >= stateHeurCommit:
			m.heur[key] = t
		default:
			m.log.Info("rolled back a transaction left open at shutdown", "tx", key, "messages", len(t.msgs))
			delete(all, key)
		}
	}
	next := 1
	if len(ns) > 0 {
		next = ns[len(ns)-1] + 1
	}
	if err := m.startJournalLocked(next); err != nil {
		// Nothing is lost: the files replayed stay until a snapshot of
		// them is in place (a full disk refuses it here).
		return fmt.Errorf("txn: start-up snapshot of the live transactions in %s (the journal files replayed are kept): %w", m.opts.Dir, err)
	}
	for _, n := range ns {
		os.Remove(journalName(m.opts.Dir, n))
	}
	return nil
}

// snapshotLocked lists the entries that rebuild every live transaction.
func (m *Manager) snapshotLocked() []journalEntry {
	var out []journalEntry
	emit := func(t *tx) {
		for _, msg := range t.msgs {
			out = append(out, journalEntry{kindPut, record{Key: t.key, Topic: msg.topic, Partition: msg.partition, ID: msg.id, Flag: msg.flag, Body: msg.body}})
		}
		if t.state == statePrepared {
			out = append(out, journalEntry{kindPrepare, record{Key: t.key}})
		}
		switch {
		case t.intent != nil && t.state < stateHeurCommit:
			// A commit under way or of unknown outcome: a restart finishes it.
			out = append(out, journalEntry{kindIntent, record{Key: t.key, Parts: t.intent}})
		case t.state >= stateHeurCommit:
			out = append(out, journalEntry{kindHeuristic, record{Key: t.key, State: int(t.state)}})
		}
	}
	for _, t := range m.local {
		emit(t)
	}
	for _, t := range m.xa {
		emit(t)
	}
	for _, t := range m.heur {
		emit(t)
	}
	return out
}

// Key is a parsed transaction key.
type Key struct {
	XA              bool
	SessionID       string // local: TX:<sessionId>:<n>
	Seq             int
	FormatID        int
	GlobalID        []byte
	BranchQualifier []byte
	UniqueQualifier string
}

// ParseKey parses a TX: or XID: key as MetaQ does (see Transactions in broker/wire/doc.go).
func ParseKey(s string) (Key, error) {
	switch {
	case strings.HasPrefix(s, "TX:"):
		parts := strings.Split(s, ":")
		if len(parts) != 3 {
			return Key{}, fmt.Errorf("txn: invalid local transaction key %q: want TX:<sessionId>:<n>", s)
		}
		n, err := strconv.Atoi(parts[2])
		if err != nil {
			return Key{}, fmt.Errorf("txn: invalid local transaction key %q: %w", s, err)
		}
		return Key{SessionID: parts[1], Seq: n}, nil
	case strings.HasPrefix(s, "XID:"):
		parts := strings.Split(s, ":")
		if len(parts) != 5 {
			return Key{}, fmt.Errorf("txn: invalid XA transaction key %q: want XID:<formatId>:<gtrid>:<bqual>:<uq>", s)
		}
		f, err := strconv.Atoi(parts[1])
		if err != nil {
			return Key{}, fmt.Errorf("txn: invalid XA format id in %q: %w", s, err)
		}
		g, err := decodeHex(parts[2])
		if err != nil {
			return Key{}, fmt.Errorf("txn: invalid XA global id in %q: %w", s, err)
		}
		b, err := decodeHex(parts[3])
		if err != nil {
			return Key{}, fmt.Errorf("txn: invalid XA branch qualifier in %q: %w", s, err)
		}
		return Key{XA: true, FormatID: f, GlobalID: g, BranchQualifier: b, UniqueQualifier: parts[4]}, nil
	}
	return Key{}, fmt.Errorf("txn: invalid transaction key %q: want TX: or XID: prefix", s)
}

func decodeHex(s string) ([]byte, error) {
	if len(s)%2 != 0 {
		return nil, errors.New("odd length hex")
	}
	out := make([]byte, len(s)/2)
	for i := 0; i < len(out); i++ {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, err
		}
		out[i] = byte(v)
	}
	return out, nil
}

// Begin opens a transaction (idempotent, as in MetaQ). timeout > 0 arms a
// roll-back for a transaction not prepared by then, capped at MaxTimeout.
func (m *Manager) Begin(conn ConnID, key string, timeout time.Duration) error {
	k, err := ParseKey(key)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return ErrClosed
	}
	var t *tx
	if k.XA {
		if m.xa[key] != nil {
			return nil
		}
		t = &tx{key: key, xa: true, uq: k.UniqueQualifier}
		m.xa[key] = t
	} else {
		if old := m.local[key]; old != nil && old.conn == conn {
			return nil
		}
		t = &tx{key: key, conn: conn}
		m.local[key] = t
	}
	if timeout > 0 {
		if timeout > m.opts.MaxTimeout {
			timeout = m.opts.MaxTimeout
		}
		t.deadline = m.clock.Now().Add(timeout)
	}
	return nil
}

// getLocked finds a transaction the way TransactionalCommandProcessor does.
func (m *Manager) getLocked(conn ConnID, key string) (*tx, error) {
	if strings.HasPrefix(key, "XID:") {
		if t := m.xa[key]; t != nil {
			return t, nil
		}
		if t := m.heur[key]; t != nil {
			switch t.state {
			case stateHeurCommit:
				return nil, &XAError{XAHeurCom, "XA transaction '" + key + "' has been heuristically committed."}
			case stateHeurRollback:
				return nil, &XAError{XAHeurRB, "XA transaction '" + key + "' has been heuristically rolled back."}
			default:
				return nil, &XAError{XAHeurHaz, "XA transaction '" + key + "' has been heuristically completed."}
			}
		}
		return nil, &XAError{XAErrNotA, "XA transaction '" + key + "' has not been started."}
	}
	if t := m.local[key]; t != nil && t.conn == conn {
		return t, nil
	}
	return nil, &notStartedError{key}
}

// Put records a message in an open transaction and returns its id. The
// caller has already checked topic, partition (not -1) and checksum.
func (m *Manager) Put(conn ConnID, key, topic string, partition int, flag int32, body []byte) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return 0, ErrClosed
	}
	t, err := m.getLocked(conn, key)
	if err != nil {
		// A put with an XID key that is not open is answered with the bare
		// text, without the XAException prefix (see Transactions in broker/wire/doc.go).
		var xe *XAError
		if errors.As(err, &xe) {
			return 0, errors.New(xe.Msg)
		}
		return 0, err
	}
	if t.state != stateStart && t.state != stateInUse {
		return 0, &XAError{XAErrProto, "Cannot put now: transaction '" + key + "' is prepared or finishing."}
	}
	id := m.opts.NextID()
	b := append([]byte(nil), body...)
	if err := m.j.append(kindPut, &record{Key: key, Topic: topic, Partition: partition, ID: id, Flag: flag, Body: b}); err != nil {
		return 0, err
	}
	t.msgs = append(t.msgs, message{topic, partition, id, flag, b})
	t.state = stateInUse
	return id, m.afterWriteLocked(false)
}

// afterWriteLocked applies flushTxLogAtCommit after a journal write; decision
// entries (prepare, commit, rollback) pass decision=true.
func (m *Manager) afterWriteLocked(decision bool) error {
	switch {
	case decision && m.opts.FlushAtCommit == 1:
		if err := m.j.flush(true); err != nil {
			return err
		}
		m.dirty = false
		return nil
	case decision && m.opts.FlushAtCommit == 2:
		m.dirty = true
		return m.j.flush(false)
	case decision:
		return m.j.flush(false)
	}
	m.dirty = true
	return nil
}

// Prepare is XA PREPARE: VoteRDOnly (and the transaction ends) when nothing
// was put, else VoteOK once the prepare is journaled.
func (m *Manager) Prepare(conn ConnID, key string) (int, error) {
	return m.prepare(conn, key, "")
}

// prepare is Prepare; refused, when not empty, is why this broker refuses
// writes: a transaction with messages is then not prepared (XAER_RMFAIL),
// since a broker that refuses writes (a replica, a master handing over)
// could not commit it, and a master that hands over does not hand its
// prepared transactions on.
func (m *Manager) prepare(conn ConnID, key, refused string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.getLocked(conn, key)
	if err != nil {
		return 0, err
	}
	if !t.xa {
		return 0, &XAError{XAErrRMErr, "Prepare not implemented on Local Transactions."}
	}
	switch t.state {
	case stateStart:
		delete(m.xa, key)
		return VoteRDOnly, nil
	case stateInUse:
		if refused != "" {
			return 0, &XAError{XAErrRMFail, "Cannot prepare XA transaction '" + key + "' now: this broker refuses writes (" + refused + "); roll it back"}
		}
		if err := m.j.append(kindPrepare, &record{Key: key}); err != nil {
			return 0, err
		}
		if err := m.afterWriteLocked(true); err != nil {
			return 0, err
		}
		t.state = statePrepared
		t.deadline = time.Time{}
		return VoteOK, nil
	}
	return 0, &XAError{XAErrProto, "Cannot call prepare now."}
}

// Commit stores the transaction's messages, one batch per partition in
// arrival order, all of them as one unit when the Store is a GroupStore,
// and answers once they are stored. Its outcomes:
//
//   - nil: every partition's batch is stored;
//   - nothing stored (the write gate refused the commit, see GroupStore):
//     a local or one-phase transaction is rolled back (XA_RBOTHER, its
//     messages dropped); a prepared XA transaction stays prepared
//     (XAER_RMFAIL: commit it again, or roll it back);
//   - anything else (a store failure, writes stopped while the batches were
//     on their way, ctx ended): the outcome is unknown (XAER_RMFAIL, the
//     text saying so). The commit intent stays in the journal: a COMMIT sent
//     again finishes it, storing only the batches not found in their
//     partitions, and so does a restart.
func (m *Manager) Commit(ctx context.Context, conn ConnID, key string, onePhase bool) error {
	m.mu.Lock()
	t, err := m.getLocked(conn, key)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if t.xa {
		switch t.state {
		case stateStart:
			if !onePhase {
				m.mu.Unlock()
				return &XAError{XAErrProto, "Cannot do 2 phase commit if the transaction has not been prepared."}
			}
			delete(m.xa, key)
			m.mu.Unlock()
			return nil
		case stateInUse:
			if !onePhase {
				m.mu.Unlock()
				return &XAError{XAErrProto, "Cannot do 2 phase commit if the transaction has not been prepared."}
			}
		case statePrepared:
		default:
			m.mu.Unlock()
			return &XAError{XAErrProto, "Cannot call commit now."}
		}
	} else if t.state == stateCommitting {
		m.mu.Unlock()
		return &XAError{XAErrProto, "Cannot call commit now."}
	}
	if len(t.msgs) == 0 {
		m.removeLocked(t)
		m.mu.Unlock()
		return nil
	}
	// An intent left by a commit whose outcome was unknown is finished,
	// not planned again: its batches found in their partitions are not
	// stored twice.
	again := t.intent != nil
	if !again {
		intent, err := m.planLocked(t)
		if err == nil {
			err = m.j.append(kindIntent, &record{Key: key, Parts: intent})
		}
		if err == nil {
			err = m.afterWriteLocked(true)
		}
		if err != nil {
			m.mu.Unlock()
			return &XAError{XARBOther, "STORE COMMIT FAILED: " + err.Error()}
		}
		t.intent = intent
	}
	before := t.state
	t.state, t.deadline = stateCommitting, time.Time{}
	m.mu.Unlock()

	var skip func(p intentPart) (bool, error)
	if again {
		skip = m.batchPresent
	}
	stored, err := m.appendCommit(ctx, t, skip)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil || stored {
		if jerr := m.j.append(kindDone, &record{Key: key}); jerr == nil {
			_ = m.afterWriteLocked(false)
		}
		m.removeLocked(t)
		if cerr := m.maybeCompactLocked(); cerr != nil && err == nil {
			return cerr
		}
		if err != nil {
			return &XAError{XAErrRMFail, "Transaction '" + key + "': outcome unknown: all its messages are stored at this broker, " +
				"but its writes were stopped meanwhile (" + err.Error() + "): a new master may not have them"}
		}
		return nil
	}
	if !again && errors.Is(err, ErrNotStored) {
		if t.xa && before == statePrepared {
			// Still prepared: the intent is withdrawn by a second prepare
			// entry, so a restart restores it as prepared, not committing.
			t.state, t.intent = statePrepared, nil
			if jerr := m.j.append(kindPrepare, &record{Key: key}); jerr == nil {
				_ = m.afterWriteLocked(true)
			}
			return &XAError{XAErrRMFail, "XA transaction '" + key + "' was not committed, nothing of it is stored, it stays prepared: " + err.Error()}
		}
		t.state = before
		if rerr := m.rollbackLocked(t); rerr != nil {
			m.log.Error("journal the rollback of a commit refused before it was stored", "tx", key, "err", rerr)
		}
		return &XAError{XARBOther, "Transaction '" + key + "' was rolled back, nothing of it is stored: " + err.Error()}
	}
	// The intent stays in the journal: a restart finishes the commit, and
	// so does a COMMIT sent again.
	t.state = before
	return &XAError{XAErrRMFail, "Transaction '" + key + "': outcome unknown, some or all of its messages may be stored (" + err.Error() +
		"); commit it again to finish it: what is stored is not stored twice"}
}

// planLocked groups messages by partition and records where each batch will
// land at the earliest.
func (m *Manager) planLocked(t *tx) ([]intentPart, error) {
	var parts []intentPart
	idx := map[string]int{}
	for _, msg := range t.msgs {
		pk := msg.topic + "\x00" + strconv.Itoa(msg.partition)
		if i, ok := idx[pk]; ok {
			parts[i].Count++
			continue
		}
		from := int64(0)
		info, err := m.opts.Store.Partition(msg.topic, msg.partition)
		switch {
		case err == nil:
			from = info.Max
		case errors.Is(err, store.ErrNoPartition):
		default:
			return nil, err
		}
		idx[pk] = len(parts)
		parts = append(parts, intentPart{Topic: msg.topic, Partition: msg.partition, From: from, FirstID: msg.id, Count: 1})
	}
	return parts, nil
}

// batchOf is the messages of t bound for p's partition, in arrival order.
func batchOf(t *tx, p intentPart) []store.Message {
	batch := make([]store.Message, 0, p.Count)
	for _, msg := range t.msgs {
		if msg.topic == p.Topic && msg.partition == p.Partition {
			batch = append(batch, store.Message{ID: msg.id, Flag: msg.flag, Body: msg.body})
		}
	}
	return batch
}

// appendCommit stores t's batches (with skip, those not already in their
// partition) and reports whether all of them are stored now; its error
// wraps ErrNotStored when the Store refused them before storing any. A
// GroupStore stores them as one unit; another Store one partition after
// the other (a refusal half way then is an unknown outcome, not
// ErrNotStored).
func (m *Manager) appendCommit(ctx context.Context, t *tx, skip func(p intentPart) (bool, error)) (bool, error) {
	var appends []store.PartitionAppend
	for _, p := range t.intent {
		if skip != nil {
			present, err := skip(p)
			if err != nil {
				return false, fmt.Errorf("look for the batch of %s-%d: %w", p.Topic, p.Partition, err)
			}
			if present {
				continue
			}
		}
		appends = append(appends, store.PartitionAppend{Topic: p.Topic, Partition: p.Partition, Msgs: batchOf(t, p)})
	}
	if len(appends) == 0 {
		return true, nil
	}
	gs, ok := m.opts.Store.(GroupStore)
	if !ok {
		for i, a := range appends {
			if _, err := m.opts.Store.Append(ctx, a.Topic, a.Partition, a.Msgs); err != nil {
				err = fmt.Errorf("append %d messages to %s-%d: %w", len(a.Msgs), a.Topic, a.Partition, err)
				if i > 0 && errors.Is(err, ErrNotStored) {
					err = fmt.Errorf("%d of %d batches stored, then: %s", i, len(appends), err.Error()) // no longer nothing stored
				}
				return false, err
			}
		}
		return true, nil
	}
	outs, err := gs.AppendGroup(ctx, appends)
	if len(outs) != len(appends) {
		if err == nil {
			err = fmt.Errorf("the store answered %d outcomes for %d batches", len(outs), len(appends))
		}
		return false, err
	}
	var failed []string
	for i, o := range outs {
		if o.Err != nil {
			failed = append(failed, fmt.Sprintf("%s-%d: %v", appends[i].Topic, appends[i].Partition, o.Err))
		}
	}
	switch {
	case len(failed) > 0 && err != nil:
		return false, fmt.Errorf("%w; %d of %d batches failed: %s", err, len(failed), len(appends), strings.Join(failed, "; "))
	case len(failed) > 0:
		return false, fmt.Errorf("%d of %d batches failed: %s", len(failed), len(appends), strings.Join(failed, "; "))
	}
	return true, err
}

// appendBatches writes each partition's batch; with skip, a batch already in
// the partition (found by its first id) is left alone.
func (m *Manager) appendBatches(ctx context.Context, t *tx, skip func(p intentPart) (bool, error)) error {
	_, err := m.appendCommit(ctx, t, skip)
	return err
}

// finishCommit completes a commit found half done in the journal.
func (m *Manager) finishCommit(t *tx) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.appendBatches(ctx, t, func(p intentPart) (bool, error) { return m.batchPresent(p) })
}

// batchPresent scans a partition from p.From for a record with p.FirstID.
func (m *Manager) batchPresent(p intentPart) (bool, error) {
	off := p.From
	for {
		data, err := m.opts.Store.Read(p.Topic, p.Partition, off, 1<<20)
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) || errors.Is(err, store.ErrNoPartition) {
				return false, nil
			}
			return false, err
		}
		pos := 0
		for pos+20 <= len(data) {
			n := int(binary.BigEndian.Uint32(data[pos:]))
			if n < 0 || pos+20+n > len(data) {
				break
			}
			if int64(binary.BigEndian.Uint64(data[pos+8:])) == p.FirstID {
				return true, nil
			}
			pos += 20 + n
		}
		if pos == 0 {
			return false, fmt.Errorf("record at %s-%d offset %d does not fit in a 1 MiB read", p.Topic, p.Partition, off)
		}
		off += int64(pos)
	}
}

// Rollback drops the transaction's messages.
func (m *Manager) Rollback(conn ConnID, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.getLocked(conn, key)
	if err != nil {
		return err
	}
	if t.state == stateCommitting {
		return &XAError{XAErrProto, "Cannot call rollback now."}
	}
	if t.intent != nil {
		// Its commit's outcome was unknown: some of it may be stored, which
		// a rollback cannot take back.
		return &XAError{XAErrProto, "Cannot roll back transaction '" + key + "': its commit's outcome is unknown and some of it may be stored; commit it again to finish it."}
	}
	return m.rollbackLocked(t)
}

func (m *Manager) rollbackLocked(t *tx) error {
	if len(t.msgs) > 0 {
		if err := m.j.append(kindRollback, &record{Key: t.key}); err != nil {
			return err
		}
		if err := m.afterWriteLocked(true); err != nil {
			return err
		}
	}
	m.removeLocked(t)
	return m.maybeCompactLocked()
}

func (m *Manager) removeLocked(t *tx) {
	if t.xa {
		delete(m.xa, t.key)
	} else if m.local[t.key] == t {
		delete(m.local, t.key)
	}
}

// Recover lists prepared XA transactions (and heuristic ones) whose unique
// qualifier is uq, or all when uq is "".
func (m *Manager) Recover(uq string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for key, t := range m.xa {
		if t.state == statePrepared && (uq == "" || t.uq == uq) {
			out = append(out, key)
		}
	}
	for key, t := range m.heur {
		if uq == "" || t.uq == uq {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// Prepared lists the prepared XA transactions (not the heuristic records).
func (m *Manager) Prepared() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for key, t := range m.xa {
		if t.state == statePrepared {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// Forget removes a heuristic record.
func (m *Manager) Forget(key string) error {
	k, err := ParseKey(key)
	if err != nil || !k.XA {
		return &XAError{XAErrNotA, key + " is not a valid xid"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.heur[key]; ok {
		delete(m.heur, key)
		if err := m.j.append(kindForget, &record{Key: key}); err != nil {
			return err
		}
		return m.afterWriteLocked(true)
	}
	return nil
}

// Heuristic ends a prepared XA transaction by an operator's decision
// (commit, rollback or complete), kept until FORGET, as MetaQ's JMX
// commitTransactionHeuristically and friends.
func (m *Manager) Heuristic(ctx context.Context, key, decision string) error {
	m.mu.Lock()
	t := m.xa[key]
	if t == nil || t.state != statePrepared {
		m.mu.Unlock()
		return fmt.Errorf("txn: %s is not a prepared XA transaction", key)
	}
	m.mu.Unlock()
	var st state
	switch decision {
	case "commit":
		if err := m.Commit(ctx, 0, key, false); err != nil {
			return err
		}
		st = stateHeurCommit
	case "rollback":
		if err := m.Rollback(0, key); err != nil {
			return err
		}
		st = stateHeurRollback
	case "complete":
		m.mu.Lock()
		delete(m.xa, key)
		m.mu.Unlock()
		st = stateHeurComplete
	default:
		return fmt.Errorf("txn: unknown heuristic decision %q: want commit, rollback or complete", decision)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.heur[key] = &tx{key: key, xa: true, uq: t.uq, state: st}
	if err := m.j.append(kindHeuristic, &record{Key: key, State: int(st)}); err != nil {
		return err
	}
	return m.afterWriteLocked(true)
}

// ConnClosed rolls back the local transactions of a closed connection
// (MetaQ 1.4.6 left them open until a timeout or restart; see Java defects in broker/wire/doc.go).
func (m *Manager) ConnClosed(conn ConnID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.local {
		if t.conn == conn && t.intent != nil && t.state != stateCommitting {
			// A commit of unknown outcome is not rolled back: a restart
			// finishes it.
			m.log.Warn("connection closed with a commit of unknown outcome; it is finished at the next start", "tx", t.key)
			continue
		}
		if t.conn == conn && t.state != stateCommitting {
			if err := m.rollbackLocked(t); err != nil {
				m.log.Error("roll back transaction of closed connection", "tx", t.key, "err", err)
			}
		}
	}
}

// Count returns the number of open local and XA transactions (stats).
func (m *Manager) Count() (local, xa int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.local), len(m.xa)
}

// tickLoop rolls back timed-out transactions and, with FlushAtCommit 2,
// fsyncs the journal once a second.
func (m *Manager) tickLoop() {
	defer m.wg.Done()
	tick := m.clock.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastSync := m.clock.Now()
	for {
		select {
		case <-m.quit:
			return
		case now := <-tick.C():
			m.mu.Lock()
			for _, t := range m.local {
				m.expireLocked(t, now)
			}
			for _, t := range m.xa {
				m.expireLocked(t, now)
			}
			if m.dirty && now.Sub(lastSync) >= time.Second && m.opts.FlushAtCommit == 2 {
				if err := m.j.flush(true); err != nil {
					m.log.Error("fsync transaction journal", "err", err)
				}
				m.dirty, lastSync = false, now
			}
			m.mu.Unlock()
		}
	}
}

func (m *Manager) expireLocked(t *tx, now time.Time) {
	if t.deadline.IsZero() || now.Before(t.deadline) || (t.state != stateStart && t.state != stateInUse) || t.intent != nil {
		return
	}
	m.log.Warn("transaction timed out; rolled back", "tx", t.key)
	if err := m.rollbackLocked(t); err != nil {
		m.log.Error("roll back timed-out transaction", "tx", t.key, "err", err)
	}
}

// maybeCompactLocked starts a new journal file holding only the live
// transactions once the current one is large.
func (m *Manager) maybeCompactLocked() error {
	if m.j.size < m.opts.JournalFileSize {
		return nil
	}
	old := m.j
	if err := old.close(); err != nil {
		return err
	}
	if err := m.startJournalLocked(old.n + 1); err != nil {
		return err
	}
	if err := os.Remove(journalName(m.opts.Dir, old.n)); err != nil {
		m.log.Warn("remove old journal", "path", journalName(m.opts.Dir, old.n), "err", err)
	}
	return nil
}

// startJournalLocked writes the live transactions to journal file n and
// continues the journal there.
func (m *Manager) startJournalLocked(n int) error {
	if err := writeSnapshot(m.opts.Dir, n, m.snapshotLocked()); err != nil {
		return err
	}
	fi, err := os.Stat(journalName(m.opts.Dir, n))
	if err != nil {
		return fmt.Errorf("txn: stat journal: %w", err)
	}
	j, err := openJournalFile(m.opts.Dir, n, fi.Size())
	if err != nil {
		return err
	}
	m.j = j
	return nil
}

// Close fsyncs and closes the journal. Open transactions stay in it: local
// ones are rolled back at the next Open, prepared XA ones restored.
func (m *Manager) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(m.quit)
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.j.close()
}
