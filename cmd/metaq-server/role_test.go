package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"metaq/georeplicator"
)

// TestRoleCommand: a data directory whose identity says this former master
// became a slave makes `start` (with the master's file) print that the
// recorded role overrides the command and start a slave; `role` shows it,
// `role -clear` refuses while the server runs and removes it once stopped.
func TestRoleCommand(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\n")
	dir := filepath.Join(s.dir, "data", "replication")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := georeplicator.OpenIdentity(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := id.SetRole(&georeplicator.Role{Name: georeplicator.RoleSlave, Generation: 2, SlaveID: 1,
		SlaveGroup: "meta-slave-group-bj", MasterAddress: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, "role", "-f", s.ini); code != 0 || !strings.Contains(out, "slave of generation 2") || !strings.Contains(out, "slaveId 1") {
		t.Fatalf("role: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := cli(t, "start", "-f", s.ini)
	if code != 0 || !strings.Contains(out, "WARNING: the role this site took at run time overrides the start command") || !strings.Contains(out, "role -clear") {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	pid := s.pid(t)
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	code, out, _ = cli(t, "status", "-json", "-f", s.ini)
	body := out
	var st struct{ Mode string }
	if code != 0 || json.Unmarshal([]byte(body), &st) != nil || st.Mode != "slave" {
		t.Fatalf("status (pid %d): exit %d\n%s", pid, code, out)
	}
	if code, out, errOut := cli(t, "role", "-clear", "-f", s.ini); code == 0 || !strings.Contains(errOut, "running") {
		t.Fatalf("role -clear while running: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "stop", "-f", s.ini); code != 0 {
		t.Fatalf("stop: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "role", "-clear", "-f", s.ini); code != 0 || !strings.Contains(out, "removed the recorded role") {
		t.Fatalf("role -clear: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := cli(t, "role", "-f", s.ini); code != 0 || !strings.Contains(out, "no role recorded") {
		t.Fatalf("role after clearing: exit %d\n%s", code, out)
	}
}
