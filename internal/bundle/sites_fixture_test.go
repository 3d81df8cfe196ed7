package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/registry"
	"metaq/broker/registry/zktest"
	"metaq/internal/netproxy"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// sitesSpec describes a test deployment of one brokerId over several
// sites: the first site is the master, the others its slave sites.
type sitesSpec struct {
	sites []string // default bj, hf, gz
	// deploy runs deploy/'s link settings: a shared secret, mutual TLS
	// with one CA (every site serves TLS and dials with its certificate),
	// zstd and a bandwidth cap.
	deploy bool
	// perSiteZK gives each site its own ZooKeeper ensemble (three test
	// servers; the test is skipped without them), as deploy/ does.
	perSiteZK bool
	// replication is added to the shared file's [replication] section.
	replication string
	// sessionTimeout is zk.zkSessionTimeoutMs (default the tests' 5 s;
	// deploy/ runs 30 s); probeInterval is [gossip] probeIntervalMs
	// (default the tests' 100 ms; deploy/ runs 1 s).
	sessionTimeout, probeInterval time.Duration
	// noGossip turns gossip off ([gossip] enable=false): sites learn of a
	// new master from ZooKeeper alone.
	noGossip bool
	// overlays is added to a site's overlay file, by site.
	overlays map[string]string
	// topics is added to the shared file after its orders topic (whole
	// [topic=...] sections).
	topics string
	// keepPorts gives each site fixed MetaQ and gossip ports, which a
	// restart keeps, as deploy/'s units do; otherwise every start picks
	// new ones (and a restarted site is reached through ZooKeeper only:
	// the links' proxies and the gossip seeds name the old ports).
	keepPorts bool
	// loggers replaces the test logger of the sites it names.
	loggers map[string]*slog.Logger
	// beforeStart runs before the first site starts, atStart once every
	// site started, before the fixture's first puts (a cold start's).
	beforeStart, atStart func(s *sites)
}

// sites is a running multi-site deployment with the operations failover
// tests need: cut and heal a slave site's link to the first master, cut
// a site's ZooKeeper or another site's ensemble, cut two sites' gossip, kill a bundle (as kill -9 does: its session is left
// to expire), restart one by its unit's command, promote, switch over,
// produce through a site's ZooKeeper, and wait for every site to converge.
type sites struct {
	t      testing.TB
	spec   sitesSpec
	dir    string
	shared string
	zkRoot string
	zks    map[string]string
	specs  map[string]siteSpec
	taps   map[string]*zktest.Tap
	links  map[string]*netproxy.Proxy // slave site -> its link to the first master

	mu sync.Mutex
	b  map[string]*Bundle // nil while killed
	// zkCut: ZooKeeper addresses the other sites cannot reach
	// (cutEnsemble); zkCutFrom: those one site cannot reach
	// (cutEnsembleFrom), by site and address; zkConns: each site's open
	// ZooKeeper connections.
	zkCut     map[string]bool
	zkCutFrom map[[2]string]bool
	zkConns   map[string][]zkConn
	// zkStall: ensembles (by address) one site's sessions reach but get
	// no answer from (stallEnsembleFrom), by site and address.
	zkStall map[[2]string]bool
	// replConns: each site's replication connections (replDialer).
	replConns map[string][]net.Conn
	// replCut: pairs of sites (gossipPair) whose replication links are
	// refused (cutReplication), whichever of the two is master.
	replCut map[[2]string]bool
	// gossipAddr: each started site's gossip address; gossipCut: pairs of
	// sites whose gossip is cut (cutGossip), by gossipPair.
	gossipAddr map[string]string
	gossipCut  map[[2]string]bool
	acked      map[string][]string
	serial     int
}

// newSites starts the deployment spec describes, the master first, and
// waits until every slave site holds the master's log.
func newSites(t testing.TB, spec sitesSpec) *sites {
	t.Helper()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	if len(spec.sites) == 0 {
		spec.sites = []string{"bj", "hf", "gz"}
	}
	s := &sites{t: t, spec: spec, dir: t.TempDir(), zks: map[string]string{}, specs: map[string]siteSpec{},
		taps: map[string]*zktest.Tap{}, links: map[string]*netproxy.Proxy{}, b: map[string]*Bundle{}, acked: map[string][]string{},
		zkCut: map[string]bool{}, zkCutFrom: map[[2]string]bool{}, zkStall: map[[2]string]bool{}, zkConns: map[string][]zkConn{}, replConns: map[string][]net.Conn{}, replCut: map[[2]string]bool{},
		gossipAddr: map[string]string{}, gossipCut: map[[2]string]bool{}}
	for i, name := range spec.sites {
		s.zks[name] = zk
		if spec.perSiteZK && i > 0 {
			extra := []func(testing.TB) string{testutil.SecondZooKeeper, testutil.ThirdZooKeeper}
			if i > len(extra) {
				t.Fatalf("newSites: per-site ZooKeeper for %d sites; the tests have three servers", len(spec.sites))
			}
			s.zks[name] = extra[i-1](t)
		}
	}
	var all []string
	for _, z := range s.zks {
		all = append(all, z)
	}
	s.zkRoot = multiSiteRoot(t, all, spec.sites...)
	repl := spec.replication
	if spec.deploy {
		repl += "secretFile=repl.key\nbandwidthBytesPerSec=20000000\n"
		c, k := testutil.WriteCert(t, s.dir, "ca", true, nil, nil)
		for _, name := range spec.sites {
			testutil.WriteCert(t, s.dir, name, false, c, k)
		}
	}
	// Without configsync: its embedded NATS would stop with the master.
	s.shared = failoverINIZK(zk, s.zkRoot, repl, noConfigSync)
	s.shared += spec.topics
	if spec.sessionTimeout > 0 {
		s.shared = strings.Replace(s.shared, "zk.zkSessionTimeoutMs=5000", fmt.Sprintf("zk.zkSessionTimeoutMs=%d", spec.sessionTimeout.Milliseconds()), 1)
	}
	if spec.noGossip {
		s.shared = strings.Replace(s.shared, "[gossip]\n", "[gossip]\nenable=false\n", 1)
	}
	if spec.probeInterval > 0 {
		s.shared = strings.Replace(s.shared, "probeIntervalMs=100", fmt.Sprintf("probeIntervalMs=%d", spec.probeInterval.Milliseconds()), 1)
	}

	if spec.beforeStart != nil {
		spec.beforeStart(s)
	}
	master := spec.sites[0]
	s.specs[master] = s.siteSpecOf(master, 0, "")
	s.start(master)
	masterRepl := mustComp[*shipperComponent](t, s.b[master]).Addr()
	var join []string
	if !spec.noGossip {
		join = []string{mustComp[*topologyComponent](t, s.b[master]).Topology().Addr()}
	}
	for i, name := range spec.sites[1:] {
		link := wanProxy(t, masterRepl)
		s.links[name] = link
		ss := s.siteSpecOf(name, i+1, link.Addr())
		ss.join = join
		s.specs[name] = ss
		s.start(name)
	}
	if spec.atStart != nil {
		spec.atStart(s)
	}
	s.produce(master, "orders", 10)
	for _, name := range spec.sites[1:] {
		waitCaughtUp(t, s.b[master], s.b[name], "orders", 30*time.Second)
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		n := 0
		for _, g := range mustComp[*shipperComponent](t, s.b[master]).Shipper().Lag() {
			if g.Connected {
				n++
			}
		}
		if n != len(spec.sites)-1 {
			return fmt.Errorf("%d of %d slave sites are connected to %s", n, len(spec.sites)-1, master)
		}
		return nil
	})
	return s
}

// siteSpecOf is the siteSpec of a site; slaveID 0 is the master.
func (s *sites) siteSpecOf(name string, slaveID int, masterAddr string) siteSpec {
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	// The replication stream on the MetaQ port, as by default.
	ss := siteSpec{name: name, slave: slaveID > 0, slaveID: slaveID, masterAddr: masterAddr, noNATS: true, metaqPort: true}
	if s.spec.keepPorts {
		ss.port = testutil.FreePort(s.t)
		ss.gossipBind = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(s.t))
	}
	if s.zks[name] != s.zks[s.spec.sites[0]] {
		ss.extraOverlay += "[zookeeper]\nzk.zkConnect=" + s.zks[name] + "\n\n"
	}
	if s.spec.deploy {
		if err := os.WriteFile(filepath.Join(dir, "repl.key"), []byte("the-deployment-replication-key-1\n"), 0o600); err != nil {
			s.t.Fatal(err)
		}
		files := "tlsCert=" + filepath.Join(s.dir, name+".pem") + "\ntlsKey=" + filepath.Join(s.dir, name+".key") + "\ntlsCA=" + filepath.Join(s.dir, "ca.pem") + "\n"
		ss.extraOverlay += "[replication]\n" + files
		if ss.slave {
			ss.slaveExtra = "compression=zstd\nbandwidthBytesPerSec=20000000\n" + files
		}
	}
	ss.extraOverlay += s.spec.overlays[name]
	ss.logger = s.spec.loggers[name]
	s.mu.Lock()
	s.taps[name] = &zktest.Tap{}
	s.mu.Unlock()
	ss.options = func(o *Options) {
		o.ZooKeeperDialer = s.zkDialer(name)
		o.ReplicationDialer = s.replDialer(name)
		o.GossipDropTo = s.gossipDrop(name)
	}
	return ss
}

// replDialer is site name's replication dialer (its receiver's connections
// to a master), which records them for dropReplication.
func (s *sites) replDialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if other := s.replCutTo(name, addr); other != "" {
			return nil, fmt.Errorf("sites: %s's replication link to %s (%s) is cut", name, other, addr)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.replConns[name] = append(s.replConns[name], c)
		s.mu.Unlock()
		return c, nil
	}
}

// replCutTo is the site cut from name (cutReplication) whose MetaQ port
// (the replication stream's, as the fixture runs it) addr names, "" when
// none is.
func (s *sites) replCutTo(name, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, b := range s.b {
		if b == nil || other == name || !s.replCut[gossipPair(name, other)] {
			continue
		}
		if _, p, err := net.SplitHostPort(b.Broker.Addr().String()); err == nil && p == port {
			return other
		}
	}
	return ""
}

// cutReplication refuses the replication links between sites a and b,
// either way, and drops both sites' open ones (they reconnect to a master
// they are not cut from); healReplication lets them through again.
func (s *sites) cutReplication(a, b string) {
	s.mu.Lock()
	s.replCut[gossipPair(a, b)] = true
	s.mu.Unlock()
	s.dropReplication(a)
	s.dropReplication(b)
}

func (s *sites) healReplication(a, b string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.replCut, gossipPair(a, b))
}

// dropReplication closes site name's open replication connections: its
// receiver finds its master again and reconnects.
func (s *sites) dropReplication(name string) {
	s.mu.Lock()
	conns := s.replConns[name]
	s.replConns[name] = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type zkConn struct {
	addr string
	c    net.Conn
}

// zkDialer is site name's ZooKeeper dialer: through its tap (kill, cutZK),
// refusing the ensembles cutEnsemble cut off from the other sites.
func (s *sites) zkDialer(name string) func(network, addr string, timeout time.Duration) (net.Conn, error) {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		s.mu.Lock()
		cut := s.zkCut[addr] && s.zks[name] != addr || s.zkCutFrom[[2]string{name, addr}]
		s.mu.Unlock()
		if cut {
			return nil, fmt.Errorf("sites: %s cannot reach ZooKeeper %s (cut)", name, addr)
		}
		c, err := s.tapOf(name).Dial(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		c = &stallConn{Conn: c, closed: make(chan struct{}), stalled: func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.zkStall[[2]string{name, addr}]
		}}
		s.mu.Lock()
		s.zkConns[name] = append(s.zkConns[name], zkConn{addr: addr, c: c})
		s.mu.Unlock()
		return c, nil
	}
}

// stallConn is a ZooKeeper connection that delivers nothing to its
// client while stalled (requests go out, answers wait): an ensemble that
// stopped answering without closing anything.
type stallConn struct {
	net.Conn
	stalled   func() bool
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *stallConn) Read(p []byte) (int, error) {
	for c.stalled() {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
	return c.Conn.Read(p)
}

func (c *stallConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// stallEnsembleFrom makes site's ensemble stop answering site from's
// sessions (they stay connected: their requests wait); unstallEnsembles
// lets every answer through again.
func (s *sites) stallEnsembleFrom(site, from string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zkStall[[2]string{from, s.zks[site]}] = true
}

func (s *sites) unstallEnsembles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.zkStall)
}

// cutEnsemble cuts every other site off from site's ZooKeeper ensemble
// (site itself still reaches it): what a cut-off site's ensemble misses
// stays missing until healEnsemble.
func (s *sites) cutEnsemble(site string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := s.zks[site]
	s.zkCut[addr] = true
	for name, conns := range s.zkConns {
		if s.zks[name] == addr {
			continue
		}
		for _, zc := range conns {
			if zc.addr == addr {
				zc.c.Close()
			}
		}
	}
}

func (s *sites) healEnsemble(site string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.zkCut, s.zks[site])
}

// cutEnsembleFrom cuts site from's sessions off from site's ensemble (the
// other sites still reach it); healEnsembles undoes every cut.
func (s *sites) cutEnsembleFrom(site, from string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := s.zks[site]
	s.zkCutFrom[[2]string{from, addr}] = true
	for _, zc := range s.zkConns[from] {
		if zc.addr == addr {
			zc.c.Close()
		}
	}
}

// healEnsembles lets every site reach every ensemble again.
func (s *sites) healEnsembles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.zkCut)
	clear(s.zkCutFrom)
}

// gossipPair is the key of two sites in gossipCut.
func gossipPair(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// gossipDrop is site name's GossipDropTo: gossip to a site cutGossip cut
// it off from is dropped.
func (s *sites) gossipDrop(name string) func(addr string) bool {
	return func(addr string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for other, a := range s.gossipAddr {
			if a == addr && other != name {
				return s.gossipCut[gossipPair(name, other)]
			}
		}
		return false
	}
}

// cutGossip cuts the gossip between sites a and b both ways (each
// declares the other down after gossip's failure detection);
// healGossip lets it through again (gossip's rejoin loop brings them
// together).
func (s *sites) cutGossip(a, b string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gossipCut[gossipPair(a, b)] = true
}

func (s *sites) healGossip(a, b string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.gossipCut, gossipPair(a, b))
}

func (s *sites) tapOf(name string) *zktest.Tap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taps[name]
}

func (s *sites) start(name string) {
	s.t.Helper()
	b := startSite(s.t, filepath.Join(s.dir, name), s.shared, s.specs[name])
	var gossip string
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		gossip = tc.Topology().Addr()
	}
	s.mu.Lock()
	s.b[name] = b
	s.gossipAddr[name] = gossip
	s.mu.Unlock()
}

// site is the running bundle of a site; the test fails when it is killed.
func (s *sites) site(name string) *Bundle {
	s.t.Helper()
	s.mu.Lock()
	b := s.b[name]
	s.mu.Unlock()
	if b == nil {
		s.t.Fatalf("site %s is not running", name)
	}
	return b
}

// running lists the sites whose bundle runs.
func (s *sites) running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.spec.sites {
		if s.b[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// master is the running site that is master (promoted or configured) and
// takes puts; "" when none is.
func (s *sites) master() string {
	for _, n := range s.running() {
		b := s.site(n)
		if b.Role().Role == siterole.Master && b.runningShipper() != nil && b.Broker.WriteRefusal() == nil {
			return n
		}
	}
	return ""
}

// kill stops a site as kill -9 would: its ZooKeeper connection goes dead
// first, so its session and ephemeral nodes stay until they expire.
func (s *sites) kill(name string) {
	s.t.Helper()
	b := s.site(name)
	killBundle(b, s.tapOf(name))
	s.mu.Lock()
	s.b[name] = nil
	s.taps[name] = &zktest.Tap{}
	s.mu.Unlock()
}

// stop stops a site as its unit's stop does: its ZooKeeper session is
// closed and its ephemeral nodes go at once.
func (s *sites) stop(name string) {
	s.t.Helper()
	b := s.site(name)
	if err := b.Close(); err != nil {
		s.t.Logf("stop %s: %v", name, err)
	}
	s.mu.Lock()
	s.b[name] = nil
	s.mu.Unlock()
}

// restart starts a killed site again with its unit's unchanged command:
// the same files, the role it was configured with.
func (s *sites) restart(name string) {
	s.t.Helper()
	s.start(name)
}

// cut refuses a slave site's link to the first master and drops its open
// connections; heal lets it through again.
func (s *sites) cut(name string) {
	s.t.Helper()
	p := s.links[name]
	if p == nil {
		s.t.Fatalf("cut: %s has no link to the first master", name)
	}
	p.SetRefuse(true)
	p.CutAll()
}

func (s *sites) heal(name string) {
	s.t.Helper()
	if p := s.links[name]; p != nil {
		p.SetRefuse(false)
	}
}

// cutZK blocks a site's connection to its ZooKeeper; healZK unblocks it.
func (s *sites) cutZK(name string)  { s.tapOf(name).Block() }
func (s *sites) healZK(name string) { s.tapOf(name).Unblock() }

// promote promotes a slave site at run time.
func (s *sites) promote(name string, force bool) PromoteReport {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := s.site(name).Promote(ctx, force)
	if err != nil {
		s.t.Fatalf("promote %s (force %t): %v", name, force, err)
	}
	return rep
}

// promoteHalfWay runs a forced promotion of the slave site name that fails
// after it started shipping: master's ZooKeeper connection is blocked
// first (its session, and its master node, stay), so the promotion waits
// for the master node; then name's own ZooKeeper is cut. It returns the
// promotion's error with both connections still cut (healZK undoes it).
func (s *sites) promoteHalfWay(name, master string) error {
	s.t.Helper()
	s.cutZK(master)
	b := s.site(name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := b.Promote(ctx, true)
		errc <- err
	}()
	testutil.Eventually(s.t, 20*time.Second, 5*time.Millisecond, func() error {
		if b.promotedShipper() == nil {
			return fmt.Errorf("%s has not started shipping yet", name)
		}
		return nil
	})
	s.cutZK(name)
	select {
	case err := <-errc:
		if err == nil {
			s.t.Fatalf("%s's promotion succeeded with its ZooKeeper cut while waiting for the master node", name)
		}
		return err
	case <-time.After(30 * time.Second):
		s.t.Fatalf("%s's promotion did not return after its ZooKeeper was cut", name)
		return nil
	}
}

// steppedDown waits until the site name is no longer master.
func (s *sites) steppedDown(name string) {
	s.t.Helper()
	testutil.Eventually(s.t, 20*time.Second, 20*time.Millisecond, func() error {
		if r := s.site(name).Role(); r.IsMaster() {
			return fmt.Errorf("%s: %v", name, r)
		}
		return nil
	})
}

// switchover hands mastership from the master at from to the slave site to.
func (s *sites) switchover(from, to string) SwitchoverReport {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := s.site(from).Switchover(ctx, to, "")
	if err != nil {
		s.t.Fatalf("switchover %s -> %s: %v", from, to, err)
	}
	return rep
}

// produce sends n puts to topic with a Go client that finds the master
// through site's ZooKeeper ensemble (each until it is acknowledged:
// sendAcked), and records each acknowledged one.
func (s *sites) produce(site, topic string, n int) {
	s.t.Helper()
	cfg := client.Config{ZKServers: []string{s.zks[site]}, ZKRoot: s.zkRoot, ZKSyncTime: 200 * time.Millisecond}
	p, closeP := testProducer(s.t, cfg)
	defer closeP()
	for range n {
		s.mu.Lock()
		s.serial++
		payload := fmt.Sprintf("via-%s-%d", site, s.serial)
		s.mu.Unlock()
		if _, err := sendAcked(s.t, p, &client.Message{Topic: topic, Payload: []byte(payload)}); err != nil {
			s.t.Fatalf("send %s through %s's ZooKeeper: %v", payload, site, err)
		}
		s.mu.Lock()
		s.acked[topic] = append(s.acked[topic], payload)
		s.mu.Unlock()
	}
}

// converged waits until one running site is master, every other running
// site follows it byte for byte, and the master serves every put this
// fixture had acknowledged; it returns the master.
func (s *sites) converged(topic string) string {
	s.t.Helper()
	var m string
	testutil.Eventually(s.t, 60*time.Second, 50*time.Millisecond, func() error {
		if m = s.master(); m == "" {
			return fmt.Errorf("no running site is a master taking puts (running: %v)", s.running())
		}
		return nil
	})
	for _, n := range s.running() {
		if n != m {
			wantFollowsByteIdentical(s.t, s.site(m), s.site(n), topic)
		}
	}
	served := map[string]bool{}
	for _, p := range s.site(m).Store.Partitions() {
		if p.Topic != topic {
			continue
		}
		data, _ := s.site(m).Store.Read(topic, p.Partition, 0, 256<<20)
		recs, err := decodeRecords(data, 0)
		if err != nil {
			s.t.Fatalf("%s-%d at %s: %v", topic, p.Partition, m, err)
		}
		for _, r := range recs {
			served[string(r.payload)] = true
		}
	}
	s.mu.Lock()
	acked := slices.Clone(s.acked[topic])
	s.mu.Unlock()
	var missing []string
	for _, a := range acked {
		if !served[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		s.t.Fatalf("master %s does not serve %d of %d acknowledged puts to %s, e.g. %v", m, len(missing), len(acked), topic, missing[:min(5, len(missing))])
	}
	return m
}

// waitMasterGone waits until the killed master's node is gone from every
// site's ensemble (its sessions expired: promote refuses while a live
// session holds it) and no running site follows it any more, each with
// nothing a sibling holds beyond it (a promotion without -force would be
// refused).
func (s *sites) waitMasterGone(master string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	regs := s.ensembleClients()
	testutil.Eventually(s.t, 30*time.Second, 50*time.Millisecond, func() error {
		for name, zc := range regs {
			if held, _, err := zc.Exists(ctx, zc.Paths().Broker(0, -1)); err != nil || held {
				return fmt.Errorf("%s's master node is still in %s's ensemble (%v)", master, name, err)
			}
		}
		for _, n := range s.running() {
			b := s.site(n)
			if b.receiver().Connected() {
				return fmt.Errorf("%s still follows %s", n, master)
			}
			if why := b.siblingAhead(b.appliedPos()); why != "" {
				return fmt.Errorf("%s: %s", n, why)
			}
		}
		return nil
	})
}

// ensembleClients is a registry client to every site's ensemble, by site.
func (s *sites) ensembleClients() map[string]*registry.Registry {
	s.t.Helper()
	regs := map[string]*registry.Registry{}
	for _, name := range s.spec.sites {
		regs[name] = zkClient(s.t, &testEnv{zk: s.zks[name], root: s.zkRoot})
	}
	return regs
}

// testRaise is a raise of a brokerId's generation that a test wrote into
// one site's ensemble as another site's promotion would (raiseIn).
type testRaise struct {
	s        *sites
	reg      *registry.Registry
	ensemble string
	brokerID int
	gen      uint64
	token    string
	prev     registry.Raiser // the raiser node before, which giveBack restores
}

// raiseIn raises brokerID's generation from from to from+1 in site
// ensemble's ZooKeeper, by compare-and-set, naming site by as its raiser,
// as a promotion of by that won there would.
func (s *sites) raiseIn(ensemble, by string, brokerID int, from uint64) *testRaise {
	s.t.Helper()
	reg := zkClient(s.t, &testEnv{zk: s.zks[ensemble], root: s.zkRoot})
	token, err := registry.NewRaiseToken()
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gen := from + 1
	prev, err := reg.RaiseGenerationFromToAs(ctx, brokerID, from, gen, registry.Raiser{Generation: gen, Site: by, Token: token})
	if err != nil {
		s.t.Fatalf("raise generation %d in %s's ensemble as %s's: %v", gen, ensemble, by, err)
	}
	return &testRaise{s: s, reg: reg, ensemble: ensemble, brokerID: brokerID, gen: gen, token: token, prev: prev}
}

// giveBack sets the raise back (registry.UndoRaise), as a promotion that
// won short of what it needed does.
func (r *testRaise) giveBack() {
	r.s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	undone, err := r.reg.UndoRaise(ctx, r.brokerID, r.gen, r.token, r.prev)
	if err != nil || !undone {
		r.s.t.Fatalf("give back generation %d in %s's ensemble: undone %v, %v", r.gen, r.ensemble, undone, err)
	}
}

// reachesAllEnsembles waits until each of names holds a session to every
// other site's ensemble.
func (s *sites) reachesAllEnsembles(names ...string) {
	s.t.Helper()
	testutil.Eventually(s.t, 20*time.Second, 50*time.Millisecond, func() error {
		for _, n := range names {
			st := mustComp[*topologyComponent](s.t, s.site(n)).siteViews().status()
			for _, other := range s.spec.sites {
				if e, ok := st[other]; other != n && (!ok || !e.Connected) {
					return fmt.Errorf("%s holds no session to %s's ensemble yet (%+v)", n, other, st)
				}
			}
		}
		return nil
	})
}
