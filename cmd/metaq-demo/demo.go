package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"metaq/broker/client"
	"metaq/configsync"
	"metaq/internal/bundle"
	"metaq/internal/freeport"
	"metaq/internal/netproxy"
	"metaq/topology"
)

// marker marks a folder as the demo's own, so it may be wiped at start.
const marker = ".metaq-demo"

// Topic names used by the tour.
const (
	sampleTopic = "orders"
	pushedTopic = "payments"
)

type sitePorts struct{ server, repl, admin, gossip, nats, dash int }

type site struct {
	name    string
	slave   bool
	slaveID int
	dir     string
	ports   sitePorts
	b       *bundle.Bundle
	log     *os.File
	// bjAddr is the MetaQ address producers and consumers in this site use
	// to reach bj: through the WAN proxy for hf and gz.
	bjAddr string
	// relay is the WAN proxy in front of the site's replication listener:
	// the address it advertises, so every replication link, also after a
	// failover, crosses the emulated WAN.
	relay *netproxy.Proxy
}

// demo is the running three-site deployment.
type demo struct {
	o       Options
	out     io.Writer
	dir     string
	sites   []*site // bj, hf, gz
	proxies []*netproxy.Proxy
	shared  []byte
	wg      sync.WaitGroup
	// master is the site that takes puts: bj until -failover moves it.
	master string
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

// startDemo writes the config sets and starts bj, the WAN proxies, then hf
// and gz. On error everything started is stopped again.
func startDemo(ctx context.Context, o Options, out io.Writer) (_ *demo, err error) {
	dir, err := prepareDir(o.Dir)
	if err != nil {
		return nil, err
	}
	d := &demo{o: o, out: out, dir: dir, master: "bj"}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	for i, name := range []string{"bj", "hf", "gz"} {
		s := &site{name: name, slave: i > 0, slaveID: i, dir: filepath.Join(dir, name)}
		if s.ports, err = portsFor(o.BasePort, i); err != nil {
			return nil, err
		}
		if s.relay, err = d.proxy("127.0.0.1:" + strconv.Itoa(s.ports.repl)); err != nil {
			return nil, err
		}
		d.sites = append(d.sites, s)
	}
	d.shared = []byte(sharedServerINI())
	d.printf("MetaQ three-site demo: bj (master), hf and gz (async slaves), %v one-way WAN between sites\n", o.WANDelay)
	d.printf("config sets, data and logs: %s\n\n", dir)

	bj := d.sites[0]
	if err := d.startSite(ctx, bj, "", ""); err != nil {
		return nil, err
	}
	for _, s := range d.sites[1:] {
		// Every link from a slave site to bj crosses the emulated WAN:
		// replication (bj's relay), NATS, and its clients' MetaQ connections.
		nats, err := d.proxy(hostPort(bj.b.NATSURL()))
		if err != nil {
			return nil, err
		}
		meta, err := d.proxy(bj.b.Broker.Addr().String())
		if err != nil {
			return nil, err
		}
		s.bjAddr = meta.Addr()
		if err := d.startSite(ctx, s, bj.relay.Addr(), "nats://"+nats.Addr()); err != nil {
			return nil, err
		}
	}
	bj.bjAddr = bj.b.Broker.Addr().String()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tROLE\tMETAQ\tDASHBOARD\tCONFIG")
	for _, s := range d.sites {
		role := roleName(s.slave, s.slaveID)
		fmt.Fprintf(tw, "%s\t%s\t%s\thttp://%s/\t%s\n", s.name, role, s.b.Broker.URL(), s.b.DashboardAddr(), filepath.Join(s.dir, "conf"))
	}
	tw.Flush()
	return d, nil
}

// asyncSlaveProperties is the async_slave.properties of the slave at site,
// replicating master at masterAddr across the emulated WAN.
func asyncSlaveProperties(site string, slaveID int, master, masterAddr string) string {
	return fmt.Sprintf(`# %s replicates %s (brokerId 0).
slaveId=%d
slaveGroup=meta-slave-group-%s
slaveMaxDelayInMills=200
autoSyncMasterConfig=false
# ZooKeeper is off: %s's replication address, across the emulated WAN.
masterAddress=%s
compression=zstd
`, site, master, slaveID, site, master, masterAddr)
}

// roleName is how the site tables name a bundle's role.
func roleName(slave bool, slaveID int) string {
	if slave {
		return "slave" + strconv.Itoa(slaveID)
	}
	return "master"
}

// prepareDir creates dir, or empties it when it is the demo's own folder
// from an earlier run; any other non-empty folder is refused.
func prepareDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("demo: %w", err)
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(abs, marker)); err != nil {
			return "", fmt.Errorf("demo: %s is not empty and was not made by metaq-demo; choose another -dir", abs)
		}
		if err := os.RemoveAll(abs); err != nil {
			return "", fmt.Errorf("demo: clean %s: %w", abs, err)
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	if err := os.WriteFile(filepath.Join(abs, marker), []byte("made by metaq-demo; removed at its next start\n"), 0o644); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	return abs, nil
}

// portsFor gives site i its ports: base+10*i and the bundle convention
// (+1 replication, +2 admin, +3 gossip, +4 NATS, dashboard at -3), or free
// ports when base is 0.
func portsFor(base, i int) (sitePorts, error) {
	if base == 0 {
		ps, err := freeport.Pick(6)
		if err != nil {
			return sitePorts{}, fmt.Errorf("demo: %w", err)
		}
		return sitePorts{ps[0], ps[1], ps[2], ps[3], ps[4], ps[5]}, nil
	}
	s := base + 10*i
	if base < 1024 || s+4 > 65535 {
		return sitePorts{}, fmt.Errorf("demo: -base-port %d out of range", base)
	}
	return sitePorts{s, s + 1, s + 2, s + 3, s + 4, s - 3}, nil
}

func hostPort(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		return url[i+3:]
	}
	return url
}

func (d *demo) proxy(target string) (*netproxy.Proxy, error) {
	p, err := netproxy.New(target)
	if err != nil {
		return nil, fmt.Errorf("demo: WAN proxy: %w", err)
	}
	p.SetDelay(d.o.WANDelay)
	d.proxies = append(d.proxies, p)
	return p, nil
}

// sharedServerINI is the server.ini every site runs: the file configsync
// pushes. What differs per site is in its site.ini overlay.
func sharedServerINI() string {
	return `;; The server.ini shared by the three demo sites (bj, hf, gz); it is the file
;; configsync pushes. Each site's own keys (ports, data path, site name, how it
;; reaches bj) are in site.ini next to it, which a push never touches.
[system]
;; One broker id for the master and its slaves. The Go client's static broker
;; list (no ZooKeeper) numbers brokers from 0.
brokerId=0
numPartitions=4
;; 0 = group commit: a put is answered once it is fsynced.
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=67108864
maxTransferSize=1048576
deletePolicy=delete,24

[zookeeper]
;; One machine, no ZooKeeper: slaves find bj by masterAddress
;; (async_slave.properties) and clients use static broker lists.
zk.zkEnable=false
zk.zkConnect=127.0.0.1:2181

[site]
overlay=site.ini

[replication]
compression=zstd
stuckAfterMs=10000

[gossip]
;; Short probes: sites are found up or down within about a second.
probeIntervalMs=200
label=metaq-demo

[nats]
;; bj embeds the NATS server; hf and gz set url in their site.ini.
bucket=metaq_config

[topic=orders]
numPartitions=4
`
}

func (d *demo) overlay(s *site, natsURL string) string {
	p := s.ports
	var b strings.Builder
	fmt.Fprintf(&b, ";; Site overlay of %s: keys here override server.ini on this site only.\n", s.name)
	fmt.Fprintf(&b, "[system]\nhostName=127.0.0.1\nserverPort=%d\ndashboardHttpPort=%d\ndataPath=%s\n\n", p.server, p.dash, filepath.Join(s.dir, "data"))
	fmt.Fprintf(&b, "[site]\nname=%s\ndashboardAddr=127.0.0.1:%d\nadminAddr=127.0.0.1:%d\n\n", s.name, p.dash, p.admin)
	fmt.Fprintf(&b, "[replication]\nlisten=127.0.0.1:%d\n;; The other sites reach this listener across the emulated WAN.\nadvertise=%s\n", p.repl, s.relay.Addr())
	fmt.Fprintf(&b, ";; Master and slaves prove they hold this secret.\nsecretFile=replication.key\n\n")
	fmt.Fprintf(&b, "[gossip]\nbind=127.0.0.1:%d\n", p.gossip)
	// Every site names the others, so that any of them, restarted, finds
	// the pool again (bj first, so a slave started with it joins at once).
	var seeds []string
	for _, o := range d.sites {
		if o != s {
			seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(o.ports.gossip))
		}
	}
	fmt.Fprintf(&b, "join=%s\n", strings.Join(seeds, ","))
	fmt.Fprintf(&b, "\n[nats]\nembeddedListen=127.0.0.1:%d\ntrustedKeys=%s\n", p.nats, pushPublicKey())
	if natsURL != "" {
		fmt.Fprintf(&b, ";; bj's embedded NATS, across the WAN.\nurl=%s\n", natsURL)
	}
	return b.String()
}

// startSite writes a site's config set and starts its bundle.
func (d *demo) startSite(ctx context.Context, s *site, masterAddr, natsURL string) error {
	conf := filepath.Join(s.dir, "conf")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ini := filepath.Join(conf, "server.ini")
	files := map[string]string{"server.ini": string(d.shared), "site.ini": d.overlay(s, natsURL)}
	if s.slave {
		files["async_slave.properties"] = asyncSlaveProperties(s.name, s.slaveID, "bj", masterAddr)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := writeReplicationKey(conf); err != nil {
		return err
	}
	lf, err := os.Create(filepath.Join(s.dir, "bundle.log"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	s.log = lf
	opts := bundle.Options{
		ConfigPath: ini,
		Logger:     slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(s.ports.server),
	}
	if s.slave {
		opts.Mode, opts.PluginPath = bundle.ModeSlave, filepath.Join(conf, "async_slave.properties")
	}
	b, err := bundle.New(opts)
	if err != nil {
		return fmt.Errorf("demo: site %s: %w", s.name, err)
	}
	// The bundles live until Close, not until ctx ends: Close stops them in
	// order (the broker would otherwise also react to ctx on its own).
	if err := b.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("demo: start site %s (is another demo or broker using its ports? try -base-port 0): %w", s.name, err)
	}
	s.b = b
	return nil
}

// Close stops the follow loop, the bundles (slaves first) and the proxies.
func (d *demo) Close() error {
	d.wg.Wait()
	var errs []error
	for i := len(d.sites) - 1; i >= 0; i-- {
		s := d.sites[i]
		if s.b != nil {
			if err := s.b.Close(); err != nil {
				errs = append(errs, fmt.Errorf("site %s: %w", s.name, err))
			}
		}
		if s.log != nil {
			s.log.Close()
		}
	}
	for _, p := range d.proxies {
		p.Close()
	}
	return errors.Join(errs...)
}

// Dir is the folder of the config sets, data and logs.
func (d *demo) Dir() string { return d.dir }

func (d *demo) site(name string) *site {
	for _, s := range d.sites {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Follow produces a trickle at the master and prints the lag every
// Options.Every until ctx ends.
func (d *demo) Follow(ctx context.Context) {
	master := d.site(d.master)
	addr := master.b.Broker.Addr().String()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = produce(pctx, addr, sampleTopic, 1, "tick-"+strconv.Itoa(i))
			cancel()
		}
	}()
	followLag(ctx, d.out, d.o.Every, func() (topology.LagDocument, error) { return master.b.Topology().Document(ctx, nil), nil })
}

// followLag prints a followLine of the document doc reads every period
// until ctx ends.
func followLag(ctx context.Context, w io.Writer, every time.Duration, doc func() (topology.LagDocument, error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := doc()
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(w, "%s  lag report: %v\n", time.Now().Format("15:04:05"), err)
			}
			continue
		}
		fmt.Fprintln(w, followLine(time.Now(), d))
	}
}

// followLine is one line of Follow's output: each site's state and each
// slave group's lag.
func followLine(now time.Time, doc topology.LagDocument) string {
	var rows []string
	for _, g := range doc.Groups {
		rows = append(rows, fmt.Sprintf("%s@%s %s %dB %dmsg %.1fs", g.SlaveGroup, g.Site, g.State, g.Bytes, g.Messages, g.SecondsBehind))
	}
	sites := make([]string, 0, len(doc.Sites))
	for s, st := range doc.Sites {
		sites = append(sites, s+":"+st)
	}
	sort.Strings(sites)
	return fmt.Sprintf("%s  sites %s  lag %s", now.Format("15:04:05"), strings.Join(sites, " "), strings.Join(rows, " | "))
}

// printSettledLag is the tour's last step: it waits up to 20s for the lag
// report read by doc to settle, then prints it as `metaq lag` does.
func printSettledLag(ctx context.Context, w io.Writer, doc func() (topology.LagDocument, error)) {
	var last topology.LagDocument
	if err := waitFor(ctx, 20*time.Second, func() error {
		d, err := doc()
		if err != nil {
			return err
		}
		last = d
		return lagSettled(d)
	}); err != nil {
		fmt.Fprintf(w, "      (lag not settled: %v)\n", err)
	}
	fmt.Fprintf(w, "[5/5] lag report at bj:\n\n")
	printLag(w, last)
}

// printLag prints the slave-group table as `metaq lag` does.
func printLag(w io.Writer, doc topology.LagDocument) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLAVE GROUP\tSITE\tBROKER\tPARTITIONS\tBYTES\tMESSAGES\tSECONDS BEHIND\tSTATE")
	if len(doc.Groups) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t\t\t")
	}
	for _, g := range doc.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s\n", g.SlaveGroup, g.Site, g.BrokerID, g.Partitions, g.Bytes, g.Messages, g.SecondsBehind, g.State)
	}
	tw.Flush()
}

func produce(ctx context.Context, addr, topic string, n int, from string) error {
	c, err := client.New(ctx, client.Config{Brokers: []string{addr}})
	if err != nil {
		return fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	p, err := client.NewProducer(c)
	if err != nil {
		return fmt.Errorf("demo: producer: %w", err)
	}
	defer p.Close(context.Background())
	for i := range n {
		body := fmt.Sprintf(`{"order":%d,"from":%q,"amount":%d.%02d,"ts":%q}`, i, from, 10+i%90, i%100, time.Now().UTC().Format(time.RFC3339Nano))
		if _, err := p.Send(ctx, &client.Message{Topic: topic, Payload: []byte(body)}); err != nil {
			return fmt.Errorf("demo: send to %s at %s: %w", topic, addr, err)
		}
	}
	return nil
}

// produceOne sends one message to topic at the broker at addr, which
// stores it or, at a slave site, forwards it to the master.
func produceOne(ctx context.Context, addr, topic, from string) (client.SendResult, error) {
	c, err := client.New(ctx, client.Config{Brokers: []string{addr}})
	if err != nil {
		return client.SendResult{}, fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	p, err := client.NewProducer(c)
	if err != nil {
		return client.SendResult{}, fmt.Errorf("demo: producer: %w", err)
	}
	defer p.Close(context.Background())
	body := fmt.Sprintf(`{"from":%q,"ts":%q}`, from, time.Now().UTC().Format(time.RFC3339Nano))
	r, err := p.Send(ctx, &client.Message{Topic: topic, Payload: []byte(body)})
	if err != nil {
		return r, fmt.Errorf("demo: send to %s at %s: %w", topic, addr, err)
	}
	return r, nil
}

// consume reads want messages of the sample topic at hf with a local-first
// consumer routed by hf's gossip view, and returns how many it read.
func consume(ctx context.Context, hf *site, want int, offsets string) (int, error) {
	c, err := client.New(ctx, client.Config{Brokers: []string{hf.bjAddr}})
	if err != nil {
		return 0, fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	var parts []client.Partition
	for p := range hf.b.Config().System.NumPartitions {
		parts = append(parts, client.Partition{BrokerID: 0, Partition: p})
	}
	if tc, ok := hf.b.Config().TopicFor(sampleTopic); ok {
		parts = parts[:0]
		for p := range tc.NumPartitions {
			parts = append(parts, client.Partition{BrokerID: 0, Partition: p})
		}
	}
	cons, err := client.NewConsumer(c, "demo-hf", client.WithPartitions(parts...), client.WithSite("hf"),
		client.WithReadPreference(client.LocalFirst), client.WithRouter(hf.b.Router()),
		client.WithStart(client.StartEarliest()), client.WithOffsetFile(offsets))
	if err != nil {
		return 0, fmt.Errorf("demo: consumer: %w", err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	if err := cons.Subscribe(sampleTopic, func(_ context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Payload)] = true
		if len(seen) == want {
			close(done)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if err := cons.Start(ctx); err != nil {
		return 0, fmt.Errorf("demo: consumer: %w", err)
	}
	defer cons.Close(context.Background())
	select {
	case <-done:
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < want {
		return len(seen), fmt.Errorf("demo: consumer at hf read %d of %d messages", len(seen), want)
	}
	return len(seen), nil
}

// sameBytes compares one topic's partitions on ref (the master) and s.
func sameBytes(ref, s *site, topic string) error {
	found := false
	for _, mp := range ref.b.Store.Partitions() {
		if mp.Topic != topic {
			continue
		}
		found = true
		sp, err := s.b.Store.Partition(topic, mp.Partition)
		if err != nil {
			return fmt.Errorf("%s-%d not on %s yet", topic, mp.Partition, s.name)
		}
		if sp.Max != mp.Max {
			return fmt.Errorf("%s-%d: %s at %d, %s at %d", topic, mp.Partition, s.name, sp.Max, ref.name, mp.Max)
		}
	}
	if !found {
		return fmt.Errorf("%s has no partition of %s", ref.name, topic)
	}
	a, _ := checksum(ref, topic)
	b, _ := checksum(s, topic)
	if a != b {
		return fmt.Errorf("%s: checksums differ between %s and %s", topic, ref.name, s.name)
	}
	return nil
}

// checksum is the CRC32 of every partition's bytes of topic, in order.
func checksum(s *site, topic string) (uint32, int64) {
	parts := s.b.Store.Partitions()
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	h := crc32.NewIEEE()
	var n int64
	for _, p := range parts {
		if p.Topic != topic {
			continue
		}
		for off := p.Min; off < p.Max; {
			data, err := s.b.Store.Read(topic, p.Partition, off, 1<<20)
			if err != nil || len(data) == 0 {
				break
			}
			h.Write(data)
			off += int64(len(data))
			n += int64(len(data))
		}
	}
	return h.Sum32(), n
}

func stat(s *site, name string) int64 {
	for _, l := range strings.Split(s.b.Broker.Stats(""), "\r\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == name {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// waitFor retries fn every 50 ms until it returns nil, timeout passes or
// ctx ends, and returns fn's last error.
func waitFor(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pushNewTopic publishes shared plus a [topic=pushedTopic] section to the
// three sites and returns the tour's step-4 line with each site's answer.
func pushNewTopic(ctx context.Context, cs *configsync.Client, shared []byte) (string, error) {
	// forwardPuts: producers at the slave sites write through their own
	// site's write gateway (tour step 4).
	newINI := append(append([]byte{}, shared...), []byte("\n[topic="+pushedTopic+"]\nnumPartitions=2\nforwardPuts=true\n")...)
	start := time.Now()
	rep, err := cs.Push(ctx, configsync.PushOptions{File: "server.ini", Data: newINI, Sites: []string{"bj", "hf", "gz"}, Timeout: 15 * time.Second})
	if err != nil {
		return "", fmt.Errorf("demo: configsync push: %w", err)
	}
	took := time.Since(start)
	var parts []string
	for _, s := range rep.Sites {
		r := rep.Results[s]
		if r.OK {
			parts = append(parts, fmt.Sprintf("%s ok (topics added: %s)", s, strings.Join(r.TopicsAdded, ",")))
		} else {
			parts = append(parts, fmt.Sprintf("%s FAILED: %s", s, r.Error))
		}
	}
	return fmt.Sprintf("[4/5] configsync pushed version %d adding topic %s in %v: %s\n", rep.Version, pushedTopic, took.Round(time.Millisecond), strings.Join(parts, "; ")), nil
}

// lagSettled is nil once the lag report lists both slave groups, caught up.
func lagSettled(doc topology.LagDocument) error {
	if len(doc.Groups) < 2 {
		return fmt.Errorf("lag report has %d slave groups", len(doc.Groups))
	}
	for _, g := range doc.Groups {
		if g.State != topology.LagOK || g.Bytes != 0 {
			return fmt.Errorf("%s is %s, %d bytes behind", g.SlaveGroup, g.State, g.Bytes)
		}
	}
	return nil
}
