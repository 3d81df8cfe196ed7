package registry

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"metaq/internal/atomicfile"
)

// keptSessions is how many session ids SessionFile keeps: enough for a
// broker that crashed again while its earlier sessions were still alive.
const keptSessions = 8

// readSessionFile returns the session ids recorded in path. A missing or
// unreadable file gives none: RegisterBroker then waits as MetaQ does.
func readSessionFile(path string, log *slog.Logger) map[int64]bool {
	ids := map[int64]bool{}
	if path == "" {
		return ids
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Warn("REGISTRY: cannot read the session file; a node left by a crashed run is waited out", "file", path, "err", err)
		}
		return ids
	}
	for _, f := range strings.Fields(string(data)) {
		if id, err := strconv.ParseInt(strings.TrimPrefix(f, "0x"), 16, 64); err == nil && id != 0 {
			ids[id] = true
		}
	}
	return ids
}

// recordSession adds the current session to SessionFile (temp file, fsync,
// rename), keeping the newest keptSessions ids.
func (r *Registry) recordSession() {
	path := r.opts.SessionFile
	id := r.conn.SessionID()
	if path == "" || id == 0 {
		return
	}
	lines := []string{fmt.Sprintf("0x%x", id)}
	if data, err := os.ReadFile(path); err == nil {
		for _, f := range strings.Fields(string(data)) {
			if f != lines[0] && len(lines) < keptSessions {
				lines = append(lines, f)
			}
		}
	}
	if err := writeFileAtomic(path, []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		r.log.Warn("REGISTRY: cannot record the ZooKeeper session; after a crash the next start waits for it to expire",
			"file", path, "err", err)
	}
}

// writeFileAtomic replaces path with data (see internal/atomicfile),
// creating its directory first.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o644)
}

// leftByUs reports whether a broker node owned by owner and holding value
// was written by an earlier process of this broker: a session recorded in
// SessionFile, and this broker's own url (so a copied data directory on
// another host does not take over a live broker's node).
func (r *Registry) leftByUs(owner int64, value, url []byte) bool {
	return owner != 0 && r.previous[owner] && string(value) == string(url)
}
