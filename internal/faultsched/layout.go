package faultsched

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"metaq/internal/freeport"
)

// Sites are the three sites of the layout, the configured master first.
var Sites = []string{"bj", "hf", "gz"}

// Topics the workload writes: SyncTopic waits for one slave site
// (minSyncSites=1), the others are asynchronous.
const (
	SyncTopic     = "chaos-sync"
	AsyncTopic    = "orders"
	AsyncTopic2   = "chaos-async"
	syncParts     = 2
	asyncParts    = 8
	async2Parts   = 2
	layoutPortMax = 20 // ports per site, as local-three-sites.sh lays them out
)

// Port offsets within a site's block; the script's own, plus the proxies'.
const (
	offZK          = 0
	offNATS        = 1 // the site's NATS server (configsync), when run
	offNATSCluster = 2
	offNATSGateway = 3
	offZKProxy     = 4 // the harness's proxy to the site's ZooKeeper
	offLink        = 5 // the harness's proxy in front of the replication listener
	offAdmin       = 6 // the admin endpoint on TCP (the script leaves it on a unix socket)
	offClient      = 7 // the harness's proxy in front of the MetaQ port, for the workload's connections
	offGossipProxy = 8 // the harness's proxy (TCP and UDP) in front of the site's gossip
	// offNATSGatewayProxy is the harness's proxy in front of the site's
	// NATS gateway, when run.
	offNATSGatewayProxy = 9
	offMetaQ            = 10
	offRepl             = 11
	offGossip           = 12
	// offClientZK is the harness's proxy in front of the site's
	// ZooKeeper for the workload's Go client (past the script's offsets
	// of <site>-2, which the harness does not start).
	offClientZK = 18
)

// Layout is the deploy/ layout of three sites under Dir, with ports from
// Base (site i uses Base+20*i .. +19).
type Layout struct {
	Dir   string
	Base  int
	Token string
	// ConfigSync says the sites run configsync's agents against a NATS
	// server per site (joined by gateways, as deploy/nats has it), which
	// the cluster starts.
	ConfigSync bool
}

func (l *Layout) port(site string, off int) int {
	for i, s := range Sites {
		if s == site {
			return l.Base + layoutPortMax*i + off
		}
	}
	panic("faultsched: no site " + site)
}

func (l *Layout) addr(site string, off int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.port(site, off)))
}

// ZKAddr is the site's ZooKeeper itself; the sites reach it through
// ZKProxyAddr (the site's own bundle in its zk.zkConnect, the other sites'
// bundles as the ensemble it gossips), the workload's Go client through
// ClientZKAddr.
func (l *Layout) ZKAddr(site string) string       { return l.addr(site, offZK) }
func (l *Layout) ZKProxyAddr(site string) string  { return l.addr(site, offZKProxy) }
func (l *Layout) ClientZKAddr(site string) string { return l.addr(site, offClientZK) }

// MetaQAddr is the site's MetaQ port.
func (l *Layout) MetaQAddr(site string) string { return l.addr(site, offMetaQ) }

// ClientAddr is the proxy in front of the site's MetaQ port that the
// workload's clients dial instead (a client-cut black-holes it).
func (l *Layout) ClientAddr(site string) string { return l.addr(site, offClient) }

// ReplAddr is the site's replication listener; LinkAddr the proxy other
// sites dial instead (the site advertises it).
func (l *Layout) ReplAddr(site string) string { return l.addr(site, offRepl) }
func (l *Layout) LinkAddr(site string) string { return l.addr(site, offLink) }

// GossipAddr is the site's gossip socket (memberlist's TCP and UDP);
// GossipProxyAddr the proxy other sites reach it through, which it
// advertises.
func (l *Layout) GossipAddr(site string) string      { return l.addr(site, offGossip) }
func (l *Layout) GossipProxyAddr(site string) string { return l.addr(site, offGossipProxy) }

// siteOfGossipPort names the site whose gossip socket has port p, or "".
func (l *Layout) siteOfGossipPort(p int) string {
	for _, s := range Sites {
		if l.port(s, offGossip) == p {
			return s
		}
	}
	return ""
}

// AdminAddr is the site's admin endpoint.
func (l *Layout) AdminAddr(site string) string { return l.addr(site, offAdmin) }

// Conf is the site's configuration directory; SiteDir its root.
func (l *Layout) Conf(site string) string    { return filepath.Join(l.SiteDir(site), "conf") }
func (l *Layout) SiteDir(site string) string { return filepath.Join(l.Dir, site+"-1") }

// DataDir is the site's dataPath.
func (l *Layout) DataDir(site string) string { return filepath.Join(l.SiteDir(site), "data") }

// NATSAddr is the site's NATS server (configsync).
func (l *Layout) NATSAddr(site string) string { return l.addr(site, offNATS) }

// Agent is the name the site's configsync agent reports under.
func (l *Layout) Agent(site string) string { return site + "-1" }

// PushKey is the key configsync pushes are signed with (every site trusts it).
func (l *Layout) PushKey() string { return filepath.Join(l.Dir, "push.key") }

// ZKDir is where the site's ZooKeeper keeps its files.
func (l *Layout) ZKDir(site string) string { return filepath.Join(l.Dir, "zk-"+site) }

// LayoutOptions are the timeouts the schedule's sites run with: the
// deploy/ defaults (30 s sessions) are for production, not for a schedule
// of seconds.
type LayoutOptions struct {
	SessionTimeoutMs int // zk.zkSessionTimeoutMs, default 4000
	SyncTimeMs       int // zk.zkSyncTimeMs, default 200
	// ConfigSync keeps deploy/'s [nats] sections: the sites' configsync
	// agents run, against NATS servers the cluster starts. Without it
	// they are dropped and nothing of configsync runs.
	ConfigSync bool
}

// WriteLayout runs deploy/local-three-sites.sh layout (secrets, mutual
// TLS certificates, server.ini and every site's overlay) under dir with
// the commands in bin, then points each site's ZooKeeper and replication
// addresses at the harness's proxies, drops configsync's NATS unless
// o.ConfigSync, and adds the workload's topics.
func WriteLayout(ctx context.Context, repo, bin, dir string, o LayoutOptions) (*Layout, error) {
	if o.SessionTimeoutMs == 0 {
		o.SessionTimeoutMs = 4000
	}
	if o.SyncTimeMs == 0 {
		o.SyncTimeMs = 200
	}
	base, err := freeBase()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "deploy", "local-three-sites.sh"), "layout", dir)
	cmd.Env = append(os.Environ(), "METAQ_BIN="+bin, "METAQ_PORT_BASE="+strconv.Itoa(base))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("faultsched: local-three-sites.sh layout %s: %w\n%s", dir, err, out)
	}
	l := &Layout{Dir: dir, Base: base, ConfigSync: o.ConfigSync}
	keepNATS := func(b []byte) []byte {
		if o.ConfigSync {
			return b
		}
		return dropSection(b, "nats")
	}
	tok, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return nil, fmt.Errorf("faultsched: layout token: %w", err)
	}
	l.Token = strings.TrimSpace(string(tok))
	topics := fmt.Sprintf("\n[topic=%s]\nnumPartitions=%d\nminSyncSites=1\n\n[topic=%s]\nnumPartitions=%d\n",
		SyncTopic, syncParts, AsyncTopic2, async2Parts)
	for _, s := range Sites {
		conf := l.Conf(s)
		if err := editFile(filepath.Join(conf, "server.ini"), func(b []byte) []byte {
			b = setINI(b, "zookeeper", "zk.zkSessionTimeoutMs", strconv.Itoa(o.SessionTimeoutMs))
			b = setINI(b, "zookeeper", "zk.zkSyncTimeMs", strconv.Itoa(o.SyncTimeMs))
			b = setINI(b, "zookeeper", "zk.zkConnectionTimeoutMs", strconv.Itoa(o.SessionTimeoutMs))
			b = setINI(b, "replication", "stuckAfterMs", "3000")
			// Small segments, so that a schedule has sealed ones to damage.
			b = setINI(b, "system", "maxSegmentSize", "65536")
			return append(keepNATS(b), topics...)
		}); err != nil {
			return nil, err
		}
		if err := editFile(filepath.Join(conf, "site.ini"), func(b []byte) []byte {
			b = setINI(b, "zookeeper", "zk.zkConnect", l.ZKProxyAddr(s))
			b = setINI(b, "replication", "advertise", l.LinkAddr(s))
			b = setINI(b, "site", "adminAddr", l.AdminAddr(s))
			// Gossip goes through the proxies too: a cut between two
			// sites is a partition, not a broken replication link beside
			// a healthy gossip one.
			b = setINI(b, "gossip", "advertise", l.GossipProxyAddr(s))
			var join []string
			for _, o := range Sites {
				join = append(join, l.GossipProxyAddr(o))
			}
			b = setINI(b, "gossip", "join", strings.Join(join, ","))
			return keepNATS(b)
		}); err != nil {
			return nil, err
		}
		if s != Sites[0] {
			if err := editFile(filepath.Join(conf, "async_slave.properties"), func(b []byte) []byte {
				return setProp(b, "masterAddress", l.LinkAddr(Sites[0]))
			}); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func editFile(path string, f func([]byte) []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("faultsched: edit %s: %w", path, err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		return fmt.Errorf("faultsched: edit %s: %w", path, err)
	}
	return nil
}

// setINI sets key in [section], replacing its line or adding one after the
// section's header (a section that is missing is appended).
func setINI(b []byte, section, key, value string) []byte {
	lines := strings.Split(string(b), "\n")
	in, at := false, -1
	for i, ln := range lines {
		t := strings.TrimSpace(ln)
		if strings.HasPrefix(t, "[") {
			in = t == "["+section+"]"
			if in {
				at = i
			}
			continue
		}
		if in {
			if k, _, ok := strings.Cut(t, "="); ok && strings.TrimSpace(k) == key {
				lines[i] = key + "=" + value
				return []byte(strings.Join(lines, "\n"))
			}
		}
	}
	if at < 0 {
		return append(b, []byte("\n["+section+"]\n"+key+"="+value+"\n")...)
	}
	lines = append(lines[:at+1], append([]string{key + "=" + value}, lines[at+1:]...)...)
	return []byte(strings.Join(lines, "\n"))
}

// dropSection removes [section] and its keys.
func dropSection(b []byte, section string) []byte {
	var out []string
	in := false
	for _, ln := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(ln)
		if strings.HasPrefix(t, "[") {
			in = t == "["+section+"]"
		}
		if !in {
			out = append(out, ln)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// setProp sets key=value in a properties file.
func setProp(b []byte, key, value string) []byte {
	lines := bytes.Split(b, []byte("\n"))
	for i, ln := range lines {
		if k, _, ok := bytes.Cut(ln, []byte("=")); ok && string(bytes.TrimSpace(k)) == key {
			lines[i] = []byte(key + "=" + value)
			return bytes.Join(lines, []byte("\n"))
		}
	}
	return append(b, []byte("\n"+key+"="+value+"\n")...)
}

// The harness's blocks come from a range of their own, below the one
// internal/freeport picks single ports from: the tests running beside it
// lease ports all over that one, leaving no stretch of 60.
const (
	blockLow  = 10000
	blockHigh = 19999
)

// freeBase finds a base whose three blocks of ports nothing listens on
// (TCP or UDP: gossip uses both), leased through internal/freeport so that
// other runs of the harness at the same time do not pick them.
func freeBase() (int, error) {
	base, err := freeport.ConsecutiveIn(layoutPortMax*len(Sites), blockLow, blockHigh)
	if err != nil {
		return 0, fmt.Errorf("faultsched: %w", err)
	}
	return base, nil
}
