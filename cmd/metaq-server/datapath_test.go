package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataOverrideMovesJournal: `start -data X` puts both the store and the
// transaction journal under X and leaves server.ini's dataPath untouched,
// and the commands that read the data directory offline (role here) look
// in X too.
func TestDataOverrideMovesJournal(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\n")
	moved := filepath.Join(t.TempDir(), "moved")
	s.startMode(t, "", "-data", moved)
	put(t, s.addr(), "orders", 0, "hello")
	s.stop(t)
	for _, sub := range []string{"transactions", "log"} {
		if _, err := os.Stat(filepath.Join(moved, sub)); err != nil {
			t.Errorf("-data %s: no %s there: %v", moved, sub, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, "data")); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(filepath.Join(s.dir, "data"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("server.ini's dataPath was written although -data moved it: %v", names)
	}
	if code, out, errOut := cli(t, "role", "-f", s.ini, "-data", moved); code != 0 || !strings.Contains(out, "no role recorded") {
		t.Fatalf("role -data: exit %d %s %s", code, out, errOut)
	}
}
