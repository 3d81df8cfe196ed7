package testutil

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a logger that writes records at level and above into the
// test's log (shown with -v or when the test fails). Records logged after
// the test and its cleanups have finished, by a goroutine that outlived
// it, are dropped rather than crashing the run. Benchmarks get a logger
// that discards everything.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	if _, bench := t.(*testing.B); bench {
		return slog.New(slog.DiscardHandler)
	}
	w := &testWriter{t: t}
	t.Cleanup(w.finish) // registered first, so it runs after every later cleanup
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

var _ io.Writer = (*testWriter)(nil)

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
