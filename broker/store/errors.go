package store

import (
	"errors"
	"fmt"
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
	// ErrNoSpace: the disk is full; the append was refused and nothing was
	// written. Appends are accepted again once there is room.
	ErrNoSpace = errors.New("store: no space left on device")
	// ErrBadArgument: an argument is invalid (empty topic, negative partition, maxBytes <= 0).
	ErrBadArgument = errors.New("store: bad argument")
)

// RangeError carries the bounds for ErrOffsetOutOfRange.
type RangeError struct {
	Offset, Min, Max int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("store: offset %d out of range [%d, %d)", e.Offset, e.Min, e.Max)
}

// Unwrap makes errors.Is(err, ErrOffsetOutOfRange) hold.
func (e *RangeError) Unwrap() error { return ErrOffsetOutOfRange }

// DamagedError: a read started inside a range of the partition whose
// records were lost to damage (a hole). Next is the first offset after it;
// a reader moves there (the broker answers 301 Next, as for a retention
// gap). It wraps ErrCorrupt.
type DamagedError struct {
	Offset, Next int64
	Err          error // the check that failed, when found by this read
}

func (e *DamagedError) Error() string {
	s := fmt.Sprintf("store: offset %d is in a damaged range; records continue at %d", e.Offset, e.Next)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *DamagedError) Unwrap() error { return ErrCorrupt }

// unhealthyError wraps the disk error that stopped the store.
type unhealthyError struct{ cause error }

func (e *unhealthyError) Error() string { return "store: unhealthy: " + e.cause.Error() }
func (e *unhealthyError) Unwrap() []error {
	return []error{ErrUnhealthy, e.cause}
}

// noSpaceError wraps the write error of a full disk.
type noSpaceError struct{ cause error }

func (e *noSpaceError) Error() string {
	return "store: refusing appends while the disk is full: " + e.cause.Error()
}
func (e *noSpaceError) Unwrap() []error { return []error{ErrNoSpace, e.cause} }
