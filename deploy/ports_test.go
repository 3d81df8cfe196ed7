package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUpRefusesEphemeralPorts: `up` with a METAQ_PORT_BASE inside the
// kernel's ephemeral port range refuses at once, saying why. Tried with
// METAQ_PORT_BASE=41000, up built everything (3 minutes here) and then
// failed with NATS's "bind: address already in use" on a port that was
// free when up checked it: another process's outgoing connection had taken
// it as its local port.
func TestUpRefusesEphemeralPorts(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral port range to read: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Skipf("ip_local_port_range %q", b)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi-lo < 60 {
		t.Skipf("ip_local_port_range %q", b)
	}
	dir := filepath.Join(t.TempDir(), "sites")
	// An empty METAQ_BIN: up must refuse before it looks for binaries.
	cmd := exec.Command("bash", "local-three-sites.sh", "up", dir)
	cmd.Env = append(os.Environ(), "METAQ_PORT_BASE="+strconv.Itoa(lo), "METAQ_BIN="+t.TempDir(), "METAQ_PORT_EPHEMERAL_OK=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("up with ports in the ephemeral range succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "overlap the ephemeral port range") {
		t.Fatalf("up with METAQ_PORT_BASE=%d (ephemeral range %d-%d) failed without naming the range:\n%s", lo, lo, hi, out)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("up wrote %s before refusing", dir)
	}
}
