package store

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"metaq/internal/clock"
)

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
	// BrokerID is stamped into message ids (see Message ids in broker/wire/doc.go), 0..1023.
	BrokerID int
	Logger   *slog.Logger // nil = discard
	Clock    clock.Clock  // nil = real
	FS       FS           // nil = the OS file system
	// MaxBatchBytes caps the bytes the writer gathers into one write+fsync;
	// default 4 MiB.
	MaxBatchBytes int
	// ScrubRate is the most bytes per second the background scrub reads to
	// check sealed segments (see scrub.go); default 16 MiB/s, below 0 no
	// scrub (gets of data older than start-up are then always checked on
	// the way, through the copy path).
	ScrubRate int64
	// ScrubInterval is the pause between two full scrub passes; default 6h.
	ScrubInterval time.Duration
	// ScrubDelay is the wait after Open before the first pass, which
	// leaves the disk to the reads of a start-up (consumers and replicas
	// catching up); default 30s.
	ScrubDelay time.Duration

	// blockEntries is the size of an index block, tailBudget the index
	// entries all partitions' tails may hold together (tests make them small).
	blockEntries int
	tailBudget   int
	// summaryBudget is the footer blocks the summary cache may hold.
	summaryBudget int
	// sendfileMinChunk overrides the constant of that name (benchmarks).
	sendfileMinChunk int
}

// Scrub defaults: a 1 GiB segment is checked in about a minute, a small
// share of a disk's sequential rate; passes repeat four times a day.
const (
	DefaultScrubRate     = 16 << 20
	DefaultScrubInterval = 6 * time.Hour
	DefaultScrubDelay    = 30 * time.Second
)

// DefaultSegmentBytes is MetaQ's maxSegmentSize default (1 GiB).
const DefaultSegmentBytes = 1 << 30

func (o *Options) validate() error {
	if o.Dir == "" {
		return fmt.Errorf("store: Options.Dir is required")
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes // MetaQ maxSegmentSize
	}
	if o.SegmentBytes < 4096 {
		return fmt.Errorf("store: SegmentBytes %d is below 4096", o.SegmentBytes)
	}
	if o.BrokerID < 0 || o.BrokerID > 1023 {
		return fmt.Errorf("store: BrokerID %d outside 0..1023", o.BrokerID)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	switch {
	case o.ScrubRate == 0:
		o.ScrubRate = DefaultScrubRate
	case o.ScrubRate < 0:
		o.ScrubRate = 0
	}
	if o.ScrubInterval <= 0 {
		o.ScrubInterval = DefaultScrubInterval
	}
	if o.ScrubDelay <= 0 {
		o.ScrubDelay = DefaultScrubDelay
	}
	if o.sendfileMinChunk <= 0 {
		o.sendfileMinChunk = sendfileMinChunk
	}
	if o.blockEntries <= 0 {
		o.blockEntries = blockEntries
	}
	if o.tailBudget <= 0 {
		o.tailBudget = tailBudget
	}
	if o.summaryBudget <= 0 {
		o.summaryBudget = summaryBudget
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 4 << 20 // enough for 64 KiB+ per fsync with many writers
	}
	return nil
}
