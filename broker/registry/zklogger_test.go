package registry

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestFailedDialsAreNotLoggedEverySecond: while an ensemble is down the
// library reports a failed dial about once a second per server; the first
// is logged at WARN, the ones within the next minute at DEBUG only, and
// other library messages at WARN every time.
func TestFailedDialsAreNotLoggedEverySecond(t *testing.T) {
	var buf bytes.Buffer
	l := &zkLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for range 5 {
		l.Printf("failed to connect to %s: %v", "127.0.0.1:1", "connection refused")
	}
	l.Printf("recv loop terminated: %v", "EOF")
	var warn, debug int
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		switch {
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "failed to connect"):
			warn++
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, "failed to connect"):
			debug++
		}
	}
	if warn != 1 || debug != 4 {
		t.Fatalf("5 failed dials: %d at WARN, %d at DEBUG, want 1 and 4\n%s", warn, debug, buf.String())
	}
	if !strings.Contains(buf.String(), `level=WARN msg="zk: recv loop terminated: EOF"`) {
		t.Fatalf("another library message was not logged at WARN:\n%s", buf.String())
	}
}
