package store

// This file fixes the store's public API so that the packages built on it
// (broker, georeplicator) can be written in parallel. The implementation
// replaces the bodies; the signatures are the contract.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"metaq/internal/clock"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNoPartition: the topic/partition has no store (never written, not on disk).
	ErrNoPartition = errors.New("store: partition does not exist")
	// ErrOffsetOutOfRange: a read or lookup offset is outside [Min, Max]; see *RangeError.
	ErrOffsetOutOfRange = errors.New("store: offset out of range")
	// ErrOffsetMismatch: AppendRaw was asked to write at an offset other than the partition's end.
	ErrOffsetMismatch = errors.New("store: offset does not match partition end")
	// ErrCorrupt: bytes failed a checksum or framing check.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store: closed")
	// ErrLogTruncated: ReadLog was asked for a position below the first retained log byte.
	ErrLogTruncated = errors.New("store: log position removed by retention")
	// ErrUnhealthy: a disk error (ENOSPC, EIO) made the store refuse appends; Health tells why.
	ErrUnhealthy = errors.New("store: unhealthy")
)

// RangeError carries the bounds for ErrOffsetOutOfRange.
type RangeError struct {
	Offset, Min, Max int64
}

func (e *RangeError) Error() string { return "store: offset out of range" }
func (e *RangeError) Unwrap() error { return ErrOffsetOutOfRange }

// Policy is the flush and retention policy of one topic.
type Policy struct {
	// UnflushThreshold <= 0: group commit, an append returns only after fsync.
	// N > 0: fsync after N unflushed appends or UnflushInterval, whichever first.
	UnflushThreshold int
	UnflushInterval  time.Duration
	// MaxAge: segments whose newest record is older are removed by Retain. 0 = keep forever.
	MaxAge time.Duration
	// Archive keeps removed data as <segment>.arc (or .zip with ArchiveCompress) instead of deleting it.
	Archive         bool
	ArchiveCompress bool
}

// Options configure a Store. Zero values mean defaults.
type Options struct {
	Dir          string // data root (server.ini dataPath); required
	SegmentBytes int64  // log segment roll size (maxSegmentSize); default 1 GiB
	// DefaultPolicy applies to topics without SetPolicy.
	DefaultPolicy Policy
	// BrokerID is stamped into message ids (spec §1.11).
	BrokerID int
	Logger   *slog.Logger // nil = discard
	Clock    clock.Clock  // nil = real
	FS       FS           // nil = the OS file system
}

// FS is the file-system seam used for ENOSPC/EIO injection in tests.
type FS interface{}

// Message is one message to append.
type Message struct {
	// ID 0 means the store assigns a wall-clock id (spec §1.11) when the
	// record is sequenced, so ids rise within a partition.
	ID   int64
	Flag int32
	// Body is the put body (attribute section + payload) exactly as received.
	Body []byte
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
	Max       int64 // end of the last record (readable end)
	Durable   int64 // end of the last fsynced record (<= Max)
	Messages  int64 // records appended since start-up (MetaQ's message_count)
	Bytes     int64 // Max - Min
}

// LogEntry is a run of whole records of one partition as it sits in the
// shared commit log. The georeplicator ships these.
type LogEntry struct {
	Topic     string
	Partition int
	Offset    int64  // partition offset of Records[0]
	Records   []byte // whole records (spec §1.10), back to back
	Time      time.Time
}

// Store is the broker's storage engine. All methods are safe for concurrent use.
type Store struct{}

// Open opens or creates the store under opts.Dir and recovers it.
func Open(opts Options) (*Store, error) { return nil, errors.New("store: not implemented") }

// SetPolicy sets a topic's flush and retention policy (start-up and reload).
func (s *Store) SetPolicy(topic string, p Policy) {}

// CreatePartition creates an empty partition whose first offset is start
// (0 on a master; a slave uses its master's min). Existing partitions are left as they are.
func (s *Store) CreatePartition(topic string, partition int, start int64) error { return nil }

// Append stores msgs in order in one partition (creating it at offset 0) and
// returns where each landed. Under group commit it returns after fsync.
func (s *Store) Append(ctx context.Context, topic string, partition int, msgs []Message) ([]Appended, error) {
	return nil, errors.New("store: not implemented")
}

// AppendRaw stores whole, already-encoded records (ids kept) at exactly
// offset at, which must equal the partition's end (ErrOffsetMismatch
// otherwise). A missing partition is created at at. Records are verified
// (framing and CRC) before anything is written. Returns the new end.
func (s *Store) AppendRaw(ctx context.Context, topic string, partition int, at int64, records []byte) (int64, error) {
	return 0, errors.New("store: not implemented")
}

// Read returns up to maxBytes of the partition's bytes starting at offset,
// exactly as `get` sends them (may end in a partial record, never empty).
// offset must be >= Min and < Max, else a *RangeError.
func (s *Store) Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error) {
	return nil, errors.New("store: not implemented")
}

// NearestOffset answers the `offset` command (spec §1.7).
func (s *Store) NearestOffset(topic string, partition int, offset int64) (int64, error) {
	return 0, errors.New("store: not implemented")
}

// OffsetForTime returns the offset of the first record appended at or after t.
func (s *Store) OffsetForTime(topic string, partition int, t time.Time) (int64, error) {
	return 0, errors.New("store: not implemented")
}

// Partition returns one partition's bounds.
func (s *Store) Partition(topic string, partition int) (PartitionInfo, error) {
	return PartitionInfo{}, errors.New("store: not implemented")
}

// Partitions lists every partition, sorted by topic then partition.
func (s *Store) Partitions() []PartitionInfo { return nil }

// LogBounds returns the first retained and the durable end position of the shared log.
func (s *Store) LogBounds() (first, durable int64) { return 0, 0 }

// ReadLog returns whole log entries from pos, at most about maxBytes, only
// durable ones, and the position after the last. ErrLogTruncated if pos < first.
func (s *Store) ReadLog(pos int64, maxBytes int) ([]LogEntry, int64, error) {
	return nil, 0, errors.New("store: not implemented")
}

// WaitDurable blocks until the durable log end is beyond pos or ctx ends.
func (s *Store) WaitDurable(ctx context.Context, pos int64) error { return ctx.Err() }

// Retain applies a topic's retention policy at now; returns segments removed.
func (s *Store) Retain(topic string, now time.Time) (int, error) { return 0, nil }

// DeletePartition removes a partition's data (operator command).
func (s *Store) DeletePartition(topic string, partition int) error { return nil }

// Flush fsyncs everything appended so far.
func (s *Store) Flush() error { return nil }

// Health is nil while the store accepts appends, else the disk error that stopped it.
func (s *Store) Health() error { return nil }

// Close flushes and closes the store. Idempotent.
func (s *Store) Close() error { return nil }
