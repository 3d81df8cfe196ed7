package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// lockedBuffer is a bytes.Buffer safe for the dumping goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSIGUSR1DumpsStacksAndGoesOn: a site that stopped answering /status
// (seed 943055) left no stacks, since the harness dumped them only with
// SIGQUIT, which ends the process, and only once the site still failed
// later. SIGUSR1 now prints every goroutine's stack and the server goes on,
// so they can be taken the moment a site does not answer.
func TestSIGUSR1DumpsStacksAndGoesOn(t *testing.T) {
	var out lockedBuffer
	stop := dumpStacksOnSIGUSR1(&out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer stop()
	for round := 1; round <= 2; round++ {
		// Each round's dump must hold this goroutine's stack: the first
		// dump did not end the dumping (nor the process).
		from := len(out.String())
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
			if !strings.Contains(out.String()[from:], "TestSIGUSR1DumpsStacksAndGoesOn") {
				return errors.New("no stack of this test's goroutine in the dump yet")
			}
			return nil
		})
	}
}
