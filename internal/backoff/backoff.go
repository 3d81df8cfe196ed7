// Package backoff computes the pauses between retries: exponential from a
// minimum to a maximum, optionally with jitter. Every retry loop of the
// project (client puts and fetches, replication reconnects, configsync's
// NATS connection) uses it, so they all grow and cap the same way.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is the state of one retry loop. The zero value is not usable:
// set Min and Max. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	// Jitter makes each pause a random duration between half the
	// exponential value and the whole of it, so many clients retrying after
	// the same failure (a master restart) spread out while keeping a floor.
	Jitter bool

	attempt int
}

// Next returns the pause before the next retry: Min, then doubled each
// call, never above Max.
func (b *Backoff) Next() time.Duration {
	d := b.Min << min(b.attempt, 30)
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	b.attempt++
	if b.Jitter {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// Reset starts the next Next from Min again, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }
