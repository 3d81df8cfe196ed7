package bundle

import (
	"context"
	"log/slog"
	"regexp"
	"time"
)

// waitLog logs why automatic failover does not promote this site yet:
// once when the reason changes, and again every `every` while it lasts,
// instead of at every tick. Reasons hold values that move at every tick
// (how long ago gossip declared a sibling down); two reasons that differ
// only in their numbers are the same reason.
type waitLog struct {
	log   *slog.Logger
	every time.Duration
	key   string    // the reason last logged, without its numbers
	at    time.Time // when it was logged
}

// reasonNumbers matches the numbers in a reason: positions, and durations
// as time.Duration prints them (250ms, 1.5s, 1m2s).
var reasonNumbers = regexp.MustCompile(`[0-9][0-9.]*(?:[a-zµ]+[0-9][0-9.]*)*(?:ns|µs|ms|s|m|h)?`)

// note logs msg with why at level unless the same reason was logged less
// than every ago.
func (w *waitLog) note(now time.Time, level slog.Level, msg, why string) {
	key := msg + "\x00" + reasonNumbers.ReplaceAllString(why, "#")
	if key == w.key && now.Sub(w.at) < w.every {
		return
	}
	w.key, w.at = key, now
	w.log.Log(context.Background(), level, msg, "why", why)
}

// reset forgets the reason: the next one is logged whatever it is.
func (w *waitLog) reset() { w.key, w.at = "", time.Time{} }
