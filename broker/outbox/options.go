package outbox

import (
	"errors"
	"log/slog"
	"time"
)

// Defaults.
const (
	DefaultMaxBytes     = 256 << 20 // bytes of pending entries
	DefaultMaxAge       = time.Hour // age of the oldest pending entry
	DefaultSegmentBytes = 16 << 20  // a segment rolls past this size
)

// Options configure an Outbox.
type Options struct {
	// Dir is the outbox's directory, created when missing. Required.
	Dir string
	// MaxBytes bounds the pending entries (record bytes); 0 means
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxAge bounds the age of the oldest pending entry; 0 means
	// DefaultMaxAge.
	MaxAge time.Duration
	// SegmentBytes is the size past which a segment rolls; 0 means
	// DefaultSegmentBytes.
	SegmentBytes int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// validate checks o and fills in the defaults of its zero values.
func (o *Options) validate() error {
	if o.Dir == "" {
		return errors.New("outbox: Options.Dir is required")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
