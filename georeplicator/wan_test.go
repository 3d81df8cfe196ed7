package georeplicator

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/netns"
)

// wanLink is an emulated WAN between two network namespaces built with the
// project's wanemu scripts: site m (master, 198.18.0.1) and site s (slave,
// 198.18.0.2), joined by a TUN link through a userspace relay that adds
// delay and loss, with tbf capping the rate.
type wanLink struct {
	prefix     string
	masterNS   string
	slaveNS    string
	masterAddr string
	slaveAddr  string
}

// wanemuDir finds the wanemu scripts: $METAQ_WANEMU or ../../shared/tools/wanemu.
func wanemuDir() string {
	if d := os.Getenv("METAQ_WANEMU"); d != "" {
		return d
	}
	d, _ := filepath.Abs(filepath.Join("..", "..", "shared", "tools", "wanemu"))
	return d
}

// setupWAN builds the link or skips with the reason. delay is one way;
// loss in percent; rate as tc writes it (50mbit). Everything is removed in
// Cleanup, also when the test fails.
func setupWAN(t testing.TB, delay string, loss string, rate string) *wanLink {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("emulated WAN needs root (network namespaces, TUN devices, tc); run the tests as root to include it")
	}
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		t.Skipf("emulated WAN needs `ip netns`, which is unavailable here: %v", err)
	}
	dir := wanemuDir()
	if _, err := os.Stat(filepath.Join(dir, "setup.sh")); err != nil {
		t.Skipf("emulated WAN needs the wanemu scripts (set METAQ_WANEMU): %v", err)
	}
	prefix := fmt.Sprintf("gr%d-", os.Getpid()%100000)
	run := filepath.Join(t.TempDir(), "wanemu")
	env := append(os.Environ(), "SITES=m s", "PREFIX="+prefix, "DELAY="+delay, "LOSS="+loss, "RATE="+rate,
		"WAN_RUNDIR="+run)
	teardown := func() {
		cmd := exec.Command("bash", filepath.Join(dir, "teardown.sh"))
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("wanemu teardown: %v\n%s", err, out)
		}
	}
	cmd := exec.Command("bash", filepath.Join(dir, "setup.sh"))
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		teardown()
		t.Fatalf("wanemu setup: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		teardown()
		if b, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(b), prefix) {
			t.Errorf("namespaces left behind: %s", b)
		}
	})
	return &wanLink{prefix: prefix, masterNS: prefix + "m", slaveNS: prefix + "s",
		masterAddr: "198.18.0.1", slaveAddr: "198.18.0.2"}
}

// listen opens the master's replication listener inside the master site.
func (w *wanLink) listen(t testing.TB) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(w.masterNS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(w.masterAddr, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln
}

// dial connects from inside the slave site.
func (w *wanLink) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(w.slaveNS, func() (err error) {
		d := net.Dialer{KeepAlive: 15 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// wanRig is a rig whose link is the emulated WAN instead of the proxy.
func newWANRig(t testing.TB, w *wanLink) *rig {
	if _, ok := t.(*testing.B); ok {
		fileSegmentBytes = 256 << 20 // benchmarks: realistic segments, rolls are rare
	}
	g := newRig(t, kinds()[0])
	g.shOpts.Listener = w.listen(t)
	g.shOpts.Keepalive = time.Second
	g.rcOpts.Dial = w.dial
	g.rcOpts.MaxDelay = 500 * time.Millisecond
	return g
}

func TestEmulatedWAN(t *testing.T) {
	w := setupWAN(t, "30ms", "1", "50mbit")
	g := newWANRig(t, w)
	// A backlog of log-like JSON and of random bytes, then live load.
	g.load(3000, defaultParts())
	body := make([]byte, 4000)
	for i := 0; i < 250; i++ { // 1 MB incompressible
		for j := range body {
			body[j] = byte(i*31 + j*7 ^ j>>3*13)
		}
		g.put("random", i%2, append([]byte(nil), body...))
	}
	g.startMaster()
	// The slave dials the master's address inside the master site.
	g.startSlaveAt(g.sh.Addr())
	start := time.Now()
	g.load(1000, defaultParts())
	g.waitConverged(60 * time.Second)
	g.waitLagZero(10 * time.Second)
	l := g.sh.Lag()[0]
	t.Logf("converged over the emulated WAN in %v: raw %d bytes, wire %d bytes, rtt %v, codec %s",
		time.Since(start), l.RawBytes, l.WireBytes, l.RTT, l.Codec)
	if l.RTT < 55*time.Millisecond {
		t.Fatalf("RTT %v: the link does not add the configured 2x30ms", l.RTT)
	}
}
