package georeplicator

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"metaq/internal/netns"
	"metaq/internal/wan"
)

// wanLink is an emulated WAN between two network namespaces built with the
// repository's internal/wan: site m (master, 198.18.0.1) and site s (slave,
// 198.18.0.2), joined by a TUN link through a userspace relay that adds
// delay and loss, with tbf capping the rate.
type wanLink struct {
	masterNS   string
	slaveNS    string
	masterAddr string
	slaveAddr  string
}

// setupWAN builds the link or skips with the reason. delay is one way, loss
// a fraction (0.01 is 1%), rate as tc writes it (50mbit). Everything is
// removed in Cleanup, also when the test fails.
func setupWAN(t testing.TB, delay time.Duration, loss float64, rate string) *wanLink {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("emulated WAN needs Linux network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("emulated WAN needs root (network namespaces, TUN devices, tc); run the tests as root to include it")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("emulated WAN needs the %s command: %v", tool, err)
		}
	}
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		t.Skipf("emulated WAN needs `ip netns`, which is unavailable here: %v", err)
	}
	prefix := fmt.Sprintf("gr%d-", os.Getpid()%100000)
	n, err := wan.Setup([]string{"m", "s"}, wan.Options{Prefix: prefix, Delay: delay, Loss: loss, Rate: rate})
	if err != nil {
		t.Fatalf("emulated WAN: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("emulated WAN teardown: %v", err)
		}
		if b, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(b), prefix) {
			t.Errorf("namespaces left behind: %s", b)
		}
	})
	m, sl := n.Sites[0], n.Sites[1]
	return &wanLink{masterNS: m.NS, slaveNS: sl.NS, masterAddr: m.Addr, slaveAddr: sl.Addr}
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
	w := setupWAN(t, 30*time.Millisecond, 0.01, "50mbit")
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
