//go:build linux

// Package wan builds emulated WAN sites on one Linux machine: each site is a
// network namespace with one address (198.18.0.i, the RFC 2544 benchmarking
// range, which never leaves the namespaces), and every pair of sites is
// joined by a point-to-point TUN link whose packets this process relays with
// a one-way delay and a loss rate. The kernel's tbf qdisc caps each link's
// rate. It needs root and the `ip` and `tc` commands; the demo's netns mode
// and WAN tests use it (no sch_netem needed).
package wan

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"metaq/internal/netns"
)

// Site is one emulated site.
type Site struct {
	Name string // as given
	NS   string // network namespace: Prefix + Name
	Addr string // 198.18.0.<i>
}

// Net is a set of sites and the relays between them. Close removes
// everything Setup made.
type Net struct {
	o      Options
	Sites  []Site
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	files  []*os.File
	// blocked holds the TCP endpoints ("addr:port") whose packets the
	// relays drop (Block); copied on write.
	blocked atomic.Pointer[map[string]bool]
}

// Block drops, on every link, each TCP packet from or to port at site's
// address while on is true: that port is cut off across the WAN (a black
// hole: nothing is reset) while the site's other traffic flows.
func (n *Net) Block(site string, port int, on bool) error {
	var addr string
	for _, s := range n.Sites {
		if s.Name == site {
			addr = s.Addr
		}
	}
	if addr == "" {
		return fmt.Errorf("wan: no site %q", site)
	}
	key := net.JoinHostPort(addr, strconv.Itoa(port))
	next := map[string]bool{}
	if cur := n.blocked.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	if on {
		next[key] = true
	} else {
		delete(next, key)
	}
	n.blocked.Store(&next)
	return nil
}

// isBlocked says whether an IPv4 packet is TCP from or to a blocked
// endpoint.
func (n *Net) isBlocked(p []byte) bool {
	blocked := n.blocked.Load()
	if blocked == nil || len(*blocked) == 0 || len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_TCP {
		return false
	}
	ihl := int(p[0]&0x0f) * 4
	if len(p) < ihl+4 {
		return false
	}
	src := net.JoinHostPort(net.IP(p[12:16]).String(), strconv.Itoa(int(binary.BigEndian.Uint16(p[ihl:]))))
	dst := net.JoinHostPort(net.IP(p[16:20]).String(), strconv.Itoa(int(binary.BigEndian.Uint16(p[ihl+2:]))))
	return (*blocked)[src] || (*blocked)[dst]
}

// Setup creates one namespace per name (at most 254) and a link between
// every pair. On error it removes what it made.
func Setup(names []string, o Options) (_ *Net, err error) {
	if len(names) == 0 || len(names) > 254 {
		return nil, fmt.Errorf("wan: %d sites (want 1..254)", len(names))
	}
	if o.Loss < 0 || o.Loss >= 1 {
		return nil, fmt.Errorf("wan: loss %v out of [0,1)", o.Loss)
	}
	if o.MTU <= 0 {
		o.MTU = 1500
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Net{o: o, log: o.Logger.With("component", "wan"), cancel: cancel}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	for i, name := range names {
		s := Site{Name: name, NS: o.Prefix + name, Addr: fmt.Sprintf("198.18.0.%d", i+1)}
		if err := run("ip", "netns", "add", s.NS); err != nil {
			return nil, err
		}
		n.Sites = append(n.Sites, s)
		if err := run("ip", "-n", s.NS, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
		if err := run("ip", "-n", s.NS, "addr", "add", s.Addr+"/32", "dev", "lo"); err != nil {
			return nil, err
		}
	}
	for i := range n.Sites {
		for j := i + 1; j < len(n.Sites); j++ {
			if err := n.link(ctx, n.Sites[i], n.Sites[j]); err != nil {
				return nil, err
			}
		}
	}
	n.log.Info("WAN: sites up", "sites", len(n.Sites), "delay", o.Delay, "loss", o.Loss, "rate", o.Rate)
	return n, nil
}

// link joins a and b: a TUN device in each namespace named after the other
// site, a route to the other's address through it, and two relays.
func (n *Net) link(ctx context.Context, a, b Site) error {
	ta, err := n.tun(a, b)
	if err != nil {
		return err
	}
	tb, err := n.tun(b, a)
	if err != nil {
		return err
	}
	n.wg.Add(2)
	go n.relay(ctx, ta, tb)
	go n.relay(ctx, tb, ta)
	return nil
}

// tun creates the device w-<to> in from's namespace and routes to's address
// through it.
func (n *Net) tun(from, to Site) (*os.File, error) {
	dev := "w-" + to.Name
	if len(dev) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("wan: device name %q too long: use shorter site names", dev)
	}
	var f *os.File
	err := netns.Do(from.NS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("create %s: %w", dev, err)
		}
		// Non-blocking, so that the runtime poller serves reads and Close
		// ends them.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), dev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wan: %s in %s: %w", dev, from.NS, err)
	}
	n.files = append(n.files, f)
	steps := [][]string{
		{"ip", "-n", from.NS, "link", "set", dev, "mtu", fmt.Sprint(n.o.MTU), "up"},
		{"ip", "-n", from.NS, "route", "add", to.Addr + "/32", "dev", dev, "src", from.Addr},
	}
	if n.o.Rate != "" && n.o.Rate != "0" {
		steps = append(steps, []string{"tc", "-n", from.NS, "qdisc", "add", "dev", dev, "root", "tbf",
			"rate", n.o.Rate, "burst", "32kb", "latency", "100ms"})
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// packet is one IP packet waiting for its delivery time.
type packet struct {
	data []byte
	due  time.Time
}

// relay copies packets from src to dst, dropping a fraction Loss of them
// and delivering each Delay after it was read, in order.
func (n *Net) relay(ctx context.Context, src, dst *os.File) {
	defer n.wg.Done()
	queue := make(chan packet, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range queue {
			if d := time.Until(p.due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			// A full or closed device drops the packet, as a wire would.
			dst.Write(p.data)
		}
	}()
	buf := make([]byte, 65536)
	for {
		k, err := src.Read(buf)
		if err != nil {
			break
		}
		if n.o.Loss > 0 && rand.Float64() < n.o.Loss || n.isBlocked(buf[:k]) {
			continue
		}
		select {
		case queue <- packet{data: append([]byte(nil), buf[:k]...), due: time.Now().Add(n.o.Delay)}:
		default: // queue overflow: drop
		}
	}
	close(queue)
	<-done
}

// Close stops the relays and deletes the namespaces (which removes their
// devices and routes).
func (n *Net) Close() error {
	n.cancel()
	for _, f := range n.files {
		f.Close()
	}
	n.wg.Wait()
	var errs []error
	for _, s := range n.Sites {
		if err := run("ip", "netns", "del", s.NS); err != nil {
			errs = append(errs, err)
		}
	}
	n.Sites = nil
	return errors.Join(errs...)
}

// RemoveStale deletes every namespace whose name starts with prefix (left by
// a run that was killed before its Close).
func RemoveStale(prefix string) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("wan: ip netns list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			if err := run("ip", "netns", "del", f[0]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) error {
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("wan: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}
