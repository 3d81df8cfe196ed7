package faultsched

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Links are the proxies on the links between sites, between a site and its
// ZooKeeper, and between the workload's clients and a site, with the
// faults set on each pair of endpoints. An endpoint is a site name,
// "zk:<site>" for a site's ZooKeeper, or Clients. A proxy between sites
// tells which site dialed it by finding the dialing socket among the site
// processes' open files, so one listener serves every pair; a proxy of
// ListenClients knows its dialer. A site's session with another site's
// ZooKeeper crosses the link between the two sites (linkPair): a cut
// between them holds it, as a partition would.
type Links struct {
	pids func() map[int]string // running site processes: pid -> site

	mu      sync.Mutex
	cut     map[[2]string]bool
	slow    map[[2]string]time.Duration
	lossy   map[[2]string]float64
	changed chan struct{} // closed and replaced at every change
	proxies []*linkProxy
	closers []func() // the datagram relays
	closed  bool
	wg      sync.WaitGroup
}

// NewLinks returns an empty set of links; pids names the running site
// processes.
func NewLinks(pids func() map[int]string) *Links {
	return &Links{pids: pids, cut: map[[2]string]bool{}, slow: map[[2]string]time.Duration{},
		lossy: map[[2]string]float64{}, changed: make(chan struct{})}
}

// Clients is the endpoint name of the workload's clients.
const Clients = "clients"

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Cut black-holes the link between a and b (on) or heals it: bytes on its
// open connections are held, new connections are held before they reach
// their target, until it heals.
func (ls *Links) Cut(a, b string, on bool) {
	ls.set(func() { ls.cut[pairOf(a, b)] = on })
}

// Slow adds d to every chunk crossing the link between a and b (0 heals).
func (ls *Links) Slow(a, b string, d time.Duration) {
	ls.set(func() { ls.slow[pairOf(a, b)] = d })
}

// Lossy stalls a fraction p of the chunks crossing the link for 200 ms, as
// a TCP retransmission after a lost segment would (0 heals).
func (ls *Links) Lossy(a, b string, p float64) {
	ls.set(func() { ls.lossy[pairOf(a, b)] = p })
}

// HealAll removes every fault.
func (ls *Links) HealAll() {
	ls.set(func() {
		clear(ls.cut)
		clear(ls.slow)
		clear(ls.lossy)
	})
}

func (ls *Links) set(f func()) {
	ls.mu.Lock()
	f()
	close(ls.changed)
	ls.changed = make(chan struct{})
	ls.mu.Unlock()
}

// state is the pair's faults and the channel closed at the next change.
func (ls *Links) state(p [2]string) (cut bool, slow time.Duration, lossy float64, changed <-chan struct{}, closed bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.cut[p], ls.slow[p], ls.lossy[p], ls.changed, ls.closed
}

// waitOpen blocks while the pair is cut; false once the links close.
func (ls *Links) waitOpen(p [2]string, done <-chan struct{}) bool {
	for {
		cut, _, _, ch, closed := ls.state(p)
		if closed {
			return false
		}
		if !cut {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// Listen starts a proxy on listen that forwards to target, the endpoint
// owner's service, and returns the address it listens on (listen's port
// may be 0).
func (ls *Links) Listen(owner, listen, target string) (string, error) {
	return ls.listen(owner, "", listen, target)
}

// ListenClients starts a proxy on listen that forwards to target, the
// site's MetaQ port or its ZooKeeper, for the workload's clients: its
// connections are the pair (Clients, site). It returns the address it
// listens on.
func (ls *Links) ListenClients(site, listen, target string) (string, error) {
	return ls.listen(site, Clients, listen, target)
}

// ListenSite starts the proxies of the layout's site: in front of its
// ZooKeeper for the sites (its own, and the others' site-view sessions),
// its replication listener, its gossip (TCP and UDP), its NATS gateway
// when the layout runs configsync, and its MetaQ port and ZooKeeper for
// the workload's clients.
func (ls *Links) ListenSite(l *Layout, s string) error {
	if _, err := ls.Listen("zk:"+s, l.ZKProxyAddr(s), l.ZKAddr(s)); err != nil {
		return err
	}
	if _, err := ls.Listen(s, l.LinkAddr(s), l.ReplAddr(s)); err != nil {
		return err
	}
	if _, err := ls.ListenClients(s, l.ClientAddr(s), l.MetaQAddr(s)); err != nil {
		return err
	}
	if _, err := ls.ListenClients(s, l.ClientZKAddr(s), l.ZKAddr(s)); err != nil {
		return err
	}
	if _, err := ls.Listen(s, l.GossipProxyAddr(s), l.GossipAddr(s)); err != nil {
		return err
	}
	if err := ls.ListenUDP(s, l.GossipProxyAddr(s), l.GossipAddr(s), l.siteOfGossipPort); err != nil {
		return err
	}
	if l.ConfigSync {
		if _, err := ls.Listen(s, l.addr(s, offNATSGatewayProxy), l.addr(s, offNATSGateway)); err != nil {
			return err
		}
	}
	return nil
}

func (ls *Links) listen(owner, dialer, listen, target string) (string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", fmt.Errorf("faultsched: link proxy for %s on %s: %w", owner, listen, err)
	}
	p := &linkProxy{ls: ls, owner: owner, dialer: dialer, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	ls.mu.Lock()
	ls.proxies = append(ls.proxies, p)
	ls.mu.Unlock()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		p.acceptLoop()
	}()
	return ln.Addr().String(), nil
}

// Close stops every proxy and closes their connections.
func (ls *Links) Close() {
	ls.mu.Lock()
	ls.closed = true
	close(ls.changed)
	ls.changed = make(chan struct{})
	ps, cs := ls.proxies, ls.closers
	ls.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
	for _, c := range cs {
		c()
	}
	ls.wg.Wait()
}

type linkProxy struct {
	ls     *Links
	owner  string
	dialer string // "": found from /proc for each connection
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  chan struct{}
	once  sync.Once
}

func (p *linkProxy) doneCh() chan struct{} {
	p.once.Do(func() { p.done = make(chan struct{}) })
	return p.done
}

func (p *linkProxy) close() {
	done := p.doneCh()
	p.mu.Lock()
	select {
	case <-done:
	default:
		close(done)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
}

func (p *linkProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.doneCh():
		return false
	default:
	}
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *linkProxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			c.Close()
			return
		}
		p.ls.wg.Add(1)
		go func() {
			defer p.ls.wg.Done()
			defer p.track(c, false)
			defer c.Close()
			p.serve(c)
		}()
	}
}

func (p *linkProxy) serve(c net.Conn) {
	dialer := p.dialer
	if dialer == "" {
		dialer = p.whoDialed(c)
	}
	pair := linkPair(dialer, p.owner)
	done := p.doneCh()
	if !p.ls.waitOpen(pair, done) {
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil {
		return // the owner is down: the dialer sees its connection closed
	}
	if !p.track(up, true) {
		up.Close()
		return
	}
	defer p.track(up, false)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(pair, c, up, done) }()
	go func() { defer wg.Done(); p.pipe(pair, up, c, done) }()
	wg.Wait()
}

// linkPair is the pair whose faults a connection from dialer to the
// owner's service crosses. A site's connection to another site's
// ZooKeeper ("zk:<other>") crosses the link between the two sites: the
// sessions a site holds with the other sites' ensembles (its site views,
// its master's mirrored registration, the generation a forced promotion
// reads) are cut, slowed and stalled with that link, so a cut between two
// sites is a partition of ZooKeeper too. A site's connection to its own
// ZooKeeper is the pair (site, "zk:<site>"), which zk-cut holds.
func linkPair(dialer, owner string) [2]string {
	if zkSite, ok := strings.CutPrefix(owner, "zk:"); ok && dialer != zkSite && slices.Contains(Sites, dialer) {
		return pairOf(dialer, zkSite)
	}
	return pairOf(dialer, owner)
}

// pipe copies src to dst chunk by chunk, holding each chunk while the pair
// is cut and delaying it while the pair is slow or lossy.
func (p *linkProxy) pipe(pair [2]string, src, dst net.Conn, done <-chan struct{}) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.ls.waitOpen(pair, done) {
				return
			}
			_, slow, lossy, _, _ := p.ls.state(pair)
			d := slow
			if lossy > 0 && rand.Float64() < lossy {
				d += 200 * time.Millisecond
			}
			if d > 0 {
				select {
				case <-time.After(d):
				case <-done:
					return
				}
			}
			if !p.ls.waitOpen(pair, done) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// whoDialed names the site whose process holds the other end of c, or ""
// (a client, or a process that exited).
func (p *linkProxy) whoDialed(c net.Conn) string {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok || !ok2 {
		return ""
	}
	inode, err := socketInode(ra.Port, la.Port)
	if err != nil {
		return ""
	}
	want := "socket:[" + inode + "]"
	for pid, site := range p.ls.pids() {
		fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && l == want {
				return site
			}
		}
	}
	return ""
}

// socketInode finds in /proc/net/tcp the inode of the socket whose local
// port is local and remote port remote.
func socketInode(local, remote int) (string, error) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			if portOf(fs[1]) == local && portOf(fs[2]) == remote {
				fh.Close()
				return fs[9], nil
			}
		}
		fh.Close()
	}
	return "", errors.New("faultsched: socket not found")
}

func portOf(hexAddr string) int {
	_, ps, ok := strings.Cut(hexAddr, ":")
	if !ok {
		return -1
	}
	v, err := strconv.ParseUint(ps, 16, 32)
	if err != nil {
		return -1
	}
	return int(v)
}
