package topology

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestMemberlistLogLevels(t *testing.T) {
	for _, c := range []struct {
		line, level string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1", "DEBUG"},
		{"[WARN] memberlist: Was able to connect to hf-1-s over TCP but UDP probes failed", "WARN"},
		// A peer paused or cut off: the failure detector's business, a warning.
		{"[ERR] memberlist: Push/Pull with bj-1-m failed: read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout", "WARN"},
		{"[ERR] memberlist: Failed fallback TCP ping: dial tcp 127.0.0.1:2: connect: connection refused", "WARN"},
		{"[ERR] memberlist: Failed to read remote state: EOF from=127.0.0.1:2", "WARN"},
		// Anything else memberlist calls an error stays one.
		{"[ERR] memberlist: Failed to decode ping: msgpack decode error from=127.0.0.1:2", "ERROR"},
		{"[ERR] memberlist: Conflicting address for gz-1-s. Mine: 127.0.0.1:1 Theirs: 127.0.0.1:2 Old state: 0", "ERROR"},
	} {
		var buf bytes.Buffer
		l := newMemberlistLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
		l.Print(c.line)
		if !strings.Contains(buf.String(), "level="+c.level+" ") {
			t.Errorf("%q logged as %s; want level %s", c.line, strings.TrimSpace(buf.String()), c.level)
		}
	}
}
