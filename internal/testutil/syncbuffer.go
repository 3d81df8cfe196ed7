package testutil

import (
	"bytes"
	"log/slog"
	"sync"
)

// SyncBuffer is a bytes.Buffer that goroutines may write and read at once:
// a logger's output that a test reads while the logging goes on. The zero
// value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger returns a text logger (Info and above) that writes into s.
func (s *SyncBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(s, nil)) }
