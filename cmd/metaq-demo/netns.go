package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"metaq/internal/netns"
	"metaq/internal/wan"
	"metaq/topology"
)

// Netns mode: every site is a network namespace built by internal/wan,
// with its address 198.18.0.i (RFC 2544 benchmarking range: it
// never leaves the namespaces) and a link to every other site through a
// relay in this process that adds the delay and loss; tbf caps the rate. Each
// bundle is a metaq-server child process inside its namespace; the tour's
// clients run in short-lived copies of this binary inside the namespaces
// (see step.go), and the demo itself reaches the dashboards, admin
// endpoints and NATS with sockets opened inside a namespace (nsDial).

// Ports every site uses inside its own namespace (the namespaces do not
// share ports, so the bundle defaults serve all three).
const (
	nsServerPort = 8123
	nsReplPort   = nsServerPort + 1
	nsAdminPort  = nsServerPort + 2
	nsGossipPort = nsServerPort + 3
	nsNATSPort   = nsServerPort + 4
	nsDashPort   = 8120
)

// staleFile, in the demo folder, names a netns run so that a demo killed
// before its cleanup has its namespaces and relay removed by the next start.
const staleFile = ".metaq-demo-netns"

// netnsUsable says whether the netns mode can run, and why not.
func netnsUsable(o Options) (bool, string) {
	if o.NoNetns {
		return false, "-no-netns"
	}
	if runtime.GOOS != "linux" {
		return false, "network namespaces need Linux"
	}
	if os.Geteuid() != 0 {
		return false, "not root; run as root for network namespaces with emulated WAN links"
	}
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		return false, fmt.Sprintf("`ip netns` is unavailable: %v", err)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return false, "no /dev/net/tun for the WAN links"
	}
	if _, err := exec.LookPath("tc"); err != nil && o.Rate != "" && o.Rate != "0" {
		return false, "no tc command for the links' rate cap (or use -rate 0)"
	}
	if o.ServerBin == "" && moduleRoot() == "" {
		return false, "not inside the metaq module, so metaq-server cannot be built; set -server-bin"
	}
	return true, ""
}

// moduleRoot is the folder of the metaq module's go.mod, "" outside it.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return ""
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return ""
	}
	if b, err := os.ReadFile(mod); err != nil || !bytes.HasPrefix(b, []byte("module metaq\n")) {
		return ""
	}
	return filepath.Dir(mod)
}

// child is a process the demo started; pid is also its process group.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

type nsSite struct {
	name    string
	slave   bool
	slaveID int
	ns      string
	ip      string
	dir     string
	proc    *child
	fwd     net.Listener // host-side dashboard forwarder
}

func (s *nsSite) metaqAddr() string { return net.JoinHostPort(s.ip, strconv.Itoa(nsServerPort)) }

// netnsDemo is the three-site deployment in network namespaces.
type netnsDemo struct {
	o       Options
	out     io.Writer
	dir     string
	tmp     string // the metaq-server binary
	self    string
	prefix  string
	wan     *wan.Net // the namespaces and their links, nil before they exist
	sites   []*nsSite
	shared  []byte
	nats    *child
	trickle *child
	// master is the site that takes puts: bj until -failover moves it.
	master string

	mu       sync.Mutex
	children []*child
	fwdWG    sync.WaitGroup
}

func (n *netnsDemo) printf(format string, args ...any) { fmt.Fprintf(n.out, format, args...) }

// Dir is the folder of the config sets, data and logs.
func (n *netnsDemo) Dir() string { return n.dir }

func startNetnsDemo(ctx context.Context, o Options, out io.Writer) (_ *netnsDemo, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("demo: own binary: %w", err)
	}
	removeStale(o.Dir, out)
	dir, err := prepareDir(o.Dir)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "metaq-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	n := &netnsDemo{o: o, out: out, dir: dir, tmp: tmp, self: self, master: "bj",
		prefix: fmt.Sprintf("mqd%d-", os.Getpid()%1000000)}
	defer func() {
		if err != nil {
			if cerr := n.Close(); cerr != nil {
				fmt.Fprintln(out, "cleanup:", cerr)
			}
		}
	}()
	for i, name := range []string{"bj", "hf", "gz"} {
		n.sites = append(n.sites, &nsSite{name: name, slave: i > 0, slaveID: i, ns: n.prefix + name,
			ip: fmt.Sprintf("198.18.0.%d", i+1), dir: filepath.Join(dir, name)})
	}
	n.shared = []byte(sharedServerINI())
	n.printf("MetaQ three-site demo in network namespaces: bj (master), hf and gz (async slaves); WAN links %v one way, loss %s%%, rate %s\n",
		o.WANDelay, o.Loss, o.Rate)
	n.printf("config sets, data and logs: %s\n", dir)

	bin := o.ServerBin
	if bin == "" {
		bin = filepath.Join(tmp, "metaq-server")
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/metaq-server")
		cmd.Dir = moduleRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("demo: build metaq-server: %w\n%s", err, b)
		}
		n.printf("built metaq-server in %v\n", time.Since(start).Round(100*time.Millisecond))
	}

	// Record the run before building anything, so a demo killed halfway is
	// cleaned up by the next start.
	stale := fmt.Sprintf("%s\n%s\n", n.prefix, tmp)
	if err := os.WriteFile(filepath.Join(dir, staleFile), []byte(stale), 0o644); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	loss, _ := strconv.ParseFloat(o.Loss, 64)
	if n.wan, err = wan.Setup([]string{"bj", "hf", "gz"}, wan.Options{Prefix: n.prefix, Delay: o.WANDelay,
		Loss: loss / 100, Rate: o.Rate}); err != nil {
		return nil, fmt.Errorf("demo: WAN links: %w", err)
	}
	n.printf("namespaces %sbj, %shf, %sgz (198.18.0.1-3) joined by emulated WAN links\n\n", n.prefix, n.prefix, n.prefix)

	// configsync's NATS server: the bundle refuses an embedded NATS listener
	// beyond loopback (it has no authentication), and the slaves must reach
	// it across the WAN, so the demo runs it in bj's namespace itself.
	bj := n.sites[0]
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	natsAddr := net.JoinHostPort(bj.ip, strconv.Itoa(nsNATSPort))
	if n.nats, err = n.spawn(bj.ns, "nats", filepath.Join(dir, "nats", "nats.log"),
		n.self, internalNATS, natsAddr, filepath.Join(dir, "nats", "store")); err != nil {
		return nil, err
	}
	if err := n.waitListen(ctx, bj.ns, natsAddr, n.nats, 15*time.Second); err != nil {
		return nil, fmt.Errorf("demo: NATS in %s: %w", bj.ns, err)
	}

	for _, s := range n.sites {
		if err := n.startSite(s, "nats://"+natsAddr); err != nil {
			return nil, err
		}
		if err := n.waitListen(ctx, s.ns, s.metaqAddr(), s.proc, 30*time.Second); err != nil {
			return nil, fmt.Errorf("demo: site %s: %w (see %s)", s.name, err, filepath.Join(s.dir, "bundle.log"))
		}
		if err := n.waitListen(ctx, s.ns, net.JoinHostPort("127.0.0.1", strconv.Itoa(nsDashPort)), s.proc, 15*time.Second); err != nil {
			return nil, fmt.Errorf("demo: site %s dashboard: %w", s.name, err)
		}
	}
	rtt, err := n.roundTrip(ctx, n.sites[1], bj)
	if err != nil {
		return nil, err
	}
	n.printf("WAN round trip hf -> bj: %v (one TCP connect from inside %s)\n", rtt.Round(time.Millisecond), n.sites[1].ns)
	for i, s := range n.sites {
		ps, err := portsFor(o.BasePort, i)
		if err != nil {
			return nil, err
		}
		if err := n.forward(s, ps.dash); err != nil {
			return nil, err
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tROLE\tNETNS\tMETAQ\tPID\tDASHBOARD\tCONFIG")
	for _, s := range n.sites {
		role := roleName(s.slave, s.slaveID)
		fmt.Fprintf(tw, "%s\t%s\t%s\tmeta://%s\t%d\thttp://%s/\t%s\n", s.name, role, s.ns, s.metaqAddr(), s.proc.cmd.Process.Pid,
			s.fwd.Addr(), filepath.Join(s.dir, "conf"))
	}
	tw.Flush()
	return n, nil
}

// removeStale removes the namespaces of an earlier run in dir that was
// killed before its cleanup (the relays died with it).
func removeStale(dir string, out io.Writer) {
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		return // not the demo's folder
	}
	b, err := os.ReadFile(filepath.Join(dir, staleFile))
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "mqd") {
		return
	}
	list, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(list), lines[0]) {
		fmt.Fprintf(out, "removing namespaces %s* left by an earlier run\n", lines[0])
		if err := wan.RemoveStale(lines[0]); err != nil {
			fmt.Fprintln(out, err)
		}
	}
	if tmp := lines[1]; strings.HasPrefix(filepath.Base(tmp), "metaq-demo-") {
		os.RemoveAll(tmp)
	}
}

func (n *netnsDemo) overlay(s *nsSite, natsURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, ";; Site overlay of %s (network namespace %s): keys here override server.ini on this site only.\n", s.name, s.ns)
	fmt.Fprintf(&b, "[system]\nhostName=%s\nserverPort=%d\ndashboardHttpPort=%d\ndataPath=%s\n\n", s.ip, nsServerPort, nsDashPort, filepath.Join(s.dir, "data"))
	fmt.Fprintf(&b, ";; Dashboard and admin stay on the namespace's loopback; the demo forwards\n;; the dashboard to the host's 127.0.0.1.\n")
	fmt.Fprintf(&b, "[site]\nname=%s\ndashboardAddr=127.0.0.1:%d\nadminAddr=127.0.0.1:%d\n\n", s.name, nsDashPort, nsAdminPort)
	fmt.Fprintf(&b, "[replication]\nlisten=%s:%d\n;; Master and slaves prove they hold this secret.\nsecretFile=replication.key\n\n", s.ip, nsReplPort)
	fmt.Fprintf(&b, "[gossip]\nbind=%s:%d\n", s.ip, nsGossipPort)
	// Every site names the others, so that any of them, restarted, finds
	// the pool again (bj first, so a slave started with it joins at once).
	var seeds []string
	for _, o := range n.sites {
		if o != s {
			seeds = append(seeds, net.JoinHostPort(o.ip, strconv.Itoa(nsGossipPort)))
		}
	}
	fmt.Fprintf(&b, "join=%s\n", strings.Join(seeds, ","))
	fmt.Fprintf(&b, "\n[nats]\n;; The demo's NATS server in bj's namespace (across the WAN for hf and gz).\nurl=%s\n", natsURL)
	fmt.Fprintf(&b, ";; Pushes must be signed by this key.\ntrustedKeys=%s\n", pushPublicKey())
	return b.String()
}

// startSite writes a site's config set and starts its metaq-server.
func (n *netnsDemo) startSite(s *nsSite, natsURL string) error {
	conf := filepath.Join(s.dir, "conf")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	files := map[string]string{"server.ini": string(n.shared), "site.ini": n.overlay(s, natsURL)}
	args := []string{n.binPath(), "start"}
	if s.slave {
		files["async_slave.properties"] = asyncSlaveProperties(s.name, s.slaveID, "bj", net.JoinHostPort(n.sites[0].ip, strconv.Itoa(nsReplPort)))
		args = append(args, "slave", "-s", filepath.Join(conf, "async_slave.properties"))
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := writeReplicationKey(conf); err != nil {
		return err
	}
	args = append(args, "-f", filepath.Join(conf, "server.ini"), "-foreground")
	c, err := n.spawn(s.ns, "site "+s.name, filepath.Join(s.dir, "bundle.log"), args...)
	if err != nil {
		return err
	}
	s.proc = c
	return nil
}

func (n *netnsDemo) binPath() string {
	if n.o.ServerBin != "" {
		if abs, err := filepath.Abs(n.o.ServerBin); err == nil {
			return abs
		}
		return n.o.ServerBin
	}
	return filepath.Join(n.tmp, "metaq-server")
}

// spawn starts a long-running child in ns logging to logPath.
func (n *netnsDemo) spawn(ns, name, logPath string, argv ...string) (*child, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	cmd := nsCommand(ns, argv...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("demo: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	n.mu.Lock()
	n.children = append(n.children, c)
	n.mu.Unlock()
	return c, nil
}

// stop ends a child's process group: SIGTERM, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	pid := c.cmd.Process.Pid
	select {
	case <-c.done:
	default:
		syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(grace):
			syscall.Kill(-pid, syscall.SIGKILL)
			<-c.done
		}
	}
	// No group-wide kill once the leader is reaped: its id could then name
	// someone else's group. ip netns exec execs the program in place, so
	// the group held only the leader; Close checks that it is empty.
}

// waitListen waits until addr accepts connections inside ns, failing early
// when the child that should open it exits.
func (n *netnsDemo) waitListen(ctx context.Context, ns, addr string, c *child, timeout time.Duration) error {
	dial := nsDial(ns)
	return waitFor(ctx, timeout, func() error {
		select {
		case <-c.done:
			return fmt.Errorf("%s exited: %v", c.name, c.err)
		default:
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := dial(dctx, "tcp", addr)
		if err != nil {
			return err
		}
		conn.Close()
		return nil
	})
}

// roundTrip times a TCP connect from inside from to to's MetaQ port: one
// round trip across the emulated WAN (the fastest of three).
func (n *netnsDemo) roundTrip(ctx context.Context, from, to *nsSite) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	dial := nsDial(from.ns)
	for range 3 {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		c, err := dial(dctx, "tcp", to.metaqAddr())
		took := time.Since(start)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("demo: %s cannot reach %s across the WAN: %w", from.name, to.metaqAddr(), err)
		}
		c.Close()
		best = min(best, took)
	}
	return best, nil
}

// forward serves a site's dashboard (on its namespace's loopback) on the
// host's 127.0.0.1:port (a free port when port is 0).
func (n *netnsDemo) forward(s *nsSite, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("demo: dashboard forwarder for %s (try -base-port 0): %w", s.name, err)
	}
	s.fwd = ln
	dial := nsDial(s.ns)
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(nsDashPort))
	n.fwdWG.Add(1)
	go func() {
		defer n.fwdWG.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				up, err := dial(ctx, "tcp", target)
				cancel()
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					io.Copy(up, c)
					up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				io.Copy(c, up)
				c.Close()
				<-done
			}()
		}
	}()
	return nil
}

// nsDial dials from inside namespace ns.
func nsDial(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(ns, func() (err error) {
			d := net.Dialer{Timeout: 10 * time.Second}
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// natsDialer gives nats.go connections opened inside a namespace.
type natsDialer struct{ ns string }

func (d natsDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return nsDial(d.ns)(ctx, network, addr)
}

// httpGet fetches url from inside ns.
func httpGet(ctx context.Context, ns, url string) ([]byte, error) {
	tr := &http.Transport{DialContext: nsDial(ns), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// lagDoc reads the master's lag report from its dashboard.
func (n *netnsDemo) lagDoc(ctx context.Context) (topology.LagDocument, error) {
	var doc topology.LagDocument
	b, err := httpGet(ctx, n.site(n.master).ns, fmt.Sprintf("http://127.0.0.1:%d/lag", nsDashPort))
	if err != nil {
		return doc, err
	}
	err = json.Unmarshal(b, &doc)
	return doc, err
}

// stat reads one broker counter from a site's admin endpoint.
func (n *netnsDemo) stat(ctx context.Context, s *nsSite, name string) int64 {
	b, err := httpGet(ctx, s.ns, fmt.Sprintf("http://127.0.0.1:%d/stats", nsAdminPort))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok && k == name {
			v, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return v
		}
	}
	return 0
}

// step runs one tour step in a copy of this binary inside ns and decodes
// its JSON answer into res.
func (n *netnsDemo) step(ctx context.Context, ns string, req stepRequest, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	cmd := nsCommand(ns, n.self, internalStep, string(body))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("demo: step %s in %s: %w", req.Op, ns, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("demo: step %s in %s: %v: %s", req.Op, ns, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), res); err != nil {
		return fmt.Errorf("demo: step %s in %s: answer %q: %w", req.Op, ns, stdout.String(), err)
	}
	return nil
}

func (n *netnsDemo) site(name string) *nsSite {
	for _, s := range n.sites {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (n *netnsDemo) addrs() map[string]string {
	m := map[string]string{}
	for _, s := range n.sites {
		m[s.name] = s.metaqAddr()
	}
	return m
}

// Follow keeps a producer at the master sending a trickle and prints the
// master's lag report every Options.Every until ctx ends.
func (n *netnsDemo) Follow(ctx context.Context) {
	m := n.site(n.master)
	body, _ := json.Marshal(stepRequest{Op: "trickle", Addr: m.metaqAddr(), Topic: sampleTopic})
	c, err := n.spawn(m.ns, "trickle", filepath.Join(n.dir, "trickle.log"), n.self, internalStep, string(body))
	if err != nil {
		n.printf("trickle producer: %v\n", err)
	}
	n.trickle = c
	followLag(ctx, n.out, n.o.Every, func() (topology.LagDocument, error) { return n.lagDoc(ctx) })
}

// Close stops the trickle, the sites (slaves first), the NATS server and
// the forwarders, tears the namespaces and relay down, and checks that
// nothing it started is left.
func (n *netnsDemo) Close() error {
	var errs []error
	if n.trickle != nil {
		n.trickle.stop(5 * time.Second)
	}
	for i := len(n.sites) - 1; i >= 0; i-- {
		if s := n.sites[i]; s.proc != nil {
			s.proc.stop(20 * time.Second)
		}
	}
	if n.nats != nil {
		n.nats.stop(10 * time.Second)
	}
	for _, s := range n.sites {
		if s.fwd != nil {
			s.fwd.Close()
		}
	}
	n.fwdWG.Wait()
	n.mu.Lock()
	children := append([]*child(nil), n.children...)
	n.mu.Unlock()
	for _, c := range children {
		c.stop(5 * time.Second)
		if err := syscall.Kill(c.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("%s (pid %d) is still running", c.name, c.cmd.Process.Pid))
		}
		if err := syscall.Kill(-c.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("process group %d of %s still has members", c.cmd.Process.Pid, c.name))
		}
	}
	if n.wan != nil {
		if err := n.wan.Close(); err != nil {
			errs = append(errs, err)
		}
		list, err := exec.Command("ip", "netns", "list").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("ip netns list: %w", err))
		}
		var left []string
		for _, l := range strings.Split(string(list), "\n") {
			if strings.HasPrefix(l, n.prefix) {
				left = append(left, strings.Fields(l)[0])
			}
		}
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("namespaces left behind: %s", strings.Join(left, " ")))
		}
		if len(errs) == 0 {
			os.Remove(filepath.Join(n.dir, staleFile))
			n.printf("removed namespaces %sbj, %shf, %sgz and the WAN relay; no process of the demo is left\n", n.prefix, n.prefix, n.prefix)
		}
	}
	if n.tmp != "" && len(errs) == 0 {
		os.RemoveAll(n.tmp)
	}
	if len(errs) > 0 {
		return fmt.Errorf("demo: %w", errors.Join(errs...))
	}
	return nil
}
