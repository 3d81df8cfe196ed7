package topology

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
)

// logWriter routes memberlist's log.Logger lines ("[LEVEL] memberlist: msg")
// into slog at the matching level. It also spots the prober's suspicion line:
// memberlist has no delegate hook for suspect state, and this line is the
// moment it marks a member suspect.
type logWriter struct {
	log       *slog.Logger
	onSuspect func(name string)
}

const suspectPrefix = "Suspect "
const suspectSuffix = " has failed, no acks received"

func newMemberlistLogger(l *slog.Logger, onSuspect func(string)) *log.Logger {
	return log.New(&logWriter{log: l.With("component", "memberlist"), onSuspect: onSuspect}, "", 0)
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelInfo
	msg := line
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			switch line[1:i] {
			case "DEBUG", "TRACE":
				level = slog.LevelDebug
			case "WARN":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			}
			msg = strings.TrimSpace(line[i+1:])
			if level == slog.LevelError && isPeerUnreachable(msg) {
				level = slog.LevelWarn
			}
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if strings.HasPrefix(msg, suspectPrefix) && strings.HasSuffix(msg, suspectSuffix) && w.onSuspect != nil {
		w.onSuspect(strings.TrimSuffix(strings.TrimPrefix(msg, suspectPrefix), suspectSuffix))
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// peerUnreachable are the causes memberlist reports when a peer could not be
// reached or answered late: a site that is paused, cut off or restarting. The
// failure detector exists for exactly that, and the site's state is reported
// by topology itself, so these are warnings, not errors an operator must act
// on. Decode failures, address conflicts and the like stay errors.
var peerUnreachable = []string{"i/o timeout", "connection refused", "connection reset", "broken pipe", "no route to host", "EOF"}

func isPeerUnreachable(msg string) bool {
	for _, cause := range peerUnreachable {
		if strings.Contains(msg, cause) {
			return true
		}
	}
	return false
}
