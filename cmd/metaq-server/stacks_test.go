package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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

// TestRunningServerDumpsStacksAtSIGUSR1: the started server (not only the
// helper) answers SIGUSR1 with its goroutines' stacks in its log and
// keeps running and answering status.
func TestRunningServerDumpsStacksAtSIGUSR1(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\n")
	pid := s.start(t)
	defer cli(t, "stop", "-f", s.ini)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(s.logDir, "metaServer.log")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		log, _ := os.ReadFile(logFile)
		if !strings.Contains(string(log), "every goroutine's stack follows") || !strings.Contains(string(log), "goroutine ") {
			return errors.New("no stacks in the log yet")
		}
		return nil
	})
	if code, out, errOut := cli(t, "status", "-f", s.ini); code != 0 {
		t.Fatalf("status after SIGUSR1: exit %d %s%s", code, out, errOut)
	}
}

// TestPromoteNamesWhyTheAdminEndpointFailed: a promote whose admin
// endpoint does not answer exits 1 and says why (seed 943053 recorded a
// failed promote with no output; the command had printed this, and the
// harness lost it).
func TestPromoteNamesWhyTheAdminEndpointFailed(t *testing.T) {
	s := newServer(t, "", fmt.Sprintf("[topic=orders]\n\n[site]\nadminAddr=127.0.0.1:%d\n", testutil.FreePort(t)))
	code, out, errOut := cli(t, "promote", "-force", "-f", s.ini)
	if code != 1 || !strings.Contains(errOut, "metaq-server promote: ctl: admin endpoint") || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("promote -force with no server: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
