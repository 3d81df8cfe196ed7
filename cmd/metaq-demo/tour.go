package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"metaq/broker/client"
	"metaq/configsync"
	"metaq/topology"
)

// tourSites runs the tour's steps on one way of running the three sites:
// in this process (demo) or as servers in network namespaces (netnsDemo).
type tourSites interface {
	// produce sends n messages to topic through bj's master, from site's
	// network.
	produce(ctx context.Context, site, topic string, n int, from string) error
	// produceAtSite sends one message to topic at site's own bundle (its
	// write gateway when site is a slave site) and returns the answer.
	produceAtSite(ctx context.Context, site, topic, from string) (client.SendResult, error)
	// replicated waits until every slave holds bj's copy of topic (of the
	// given partitions) and returns its crc32 and size.
	replicated(ctx context.Context, topic string, partitions int) (sum uint32, size int64, err error)
	// consumeAtHF reads want messages with group demo-hf at hf, pinned to
	// hf's replica, and returns how many it read and the gets hf and bj
	// served meanwhile.
	consumeAtHF(ctx context.Context, want int) (read int, hfGets, bjGets int64, err error)
	// configsync connects a configsync client to bj's NATS.
	configsync(ctx context.Context) (*configsync.Client, func(), error)
	lagDoc(ctx context.Context) (topology.LagDocument, error)
	// words returns what the tour prints that differs between the ways.
	words() tourWords
	// footer prints where the dashboards are and how to reach a site.
	footer(w io.Writer)
}

type tourWords struct {
	producedFrom string // after "at bj", where the producer ran
	// replicated formats bytes, topic, crc32 and the time since the last
	// put after "hf and gz hold bj's ".
	replicated string
	routedBy   string
}

// runTour produces at bj, checks replication, consumes pinned at hf, pushes
// a new topic with configsync and prints the lag report.
func runTour(ctx context.Context, out io.Writer, s tourSites, messages int, shared []byte, dir string) error {
	printf := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	words := s.words()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	// 1. Produce at bj.
	start := time.Now()
	if err := s.produce(ctx, "bj", sampleTopic, messages, "bj"); err != nil {
		return err
	}
	printf("\n[1/5] produced %d messages to %s at bj%s in %v\n", messages, sampleTopic, words.producedFrom, time.Since(start).Round(time.Millisecond))

	// 2. Replication: every slave holds bj's records.
	start = time.Now()
	sum, size, err := s.replicated(ctx, sampleTopic, 4)
	if err != nil {
		return fmt.Errorf("demo: replication: %w", err)
	}
	printf("[2/5] replicated: hf and gz hold bj's "+words.replicated+"\n", size, sampleTopic, sum, time.Since(start).Round(time.Millisecond))

	// 3. Consume at hf, pinned to hf's replica by the router.
	n, hfGets, bjGets, err := s.consumeAtHF(ctx, messages)
	if err != nil {
		return err
	}
	printf("[3/5] consumer group demo-hf at hf (local-first, routed by %s) read %d messages; hf served %d gets, bj served %d gets\n",
		words.routedBy, n, hfGets, bjGets)

	// 4. configsync: push a new topic to every site.
	cs, closeCS, err := s.configsync(ctx)
	if err != nil {
		return fmt.Errorf("demo: configsync: %w", err)
	}
	defer closeCS()
	line, err := pushNewTopic(ctx, cs, shared)
	if err != nil {
		return err
	}
	printf("%s", line)
	// The pushed topic is forwarded at the slave sites (forwardPuts): a
	// producer there writes to its own site's bundle, whose write gateway
	// carries the put to bj and answers with bj's offset.
	start = time.Now()
	var answers []string
	for _, site := range []string{"bj", "hf", "gz"} {
		r, err := s.produceAtSite(ctx, site, pushedTopic, "from-"+site)
		if err != nil {
			return fmt.Errorf("demo: publish to %s at %s: %w", pushedTopic, site, err)
		}
		answers = append(answers, fmt.Sprintf("%s: %s-%d offset %d", site, pushedTopic, r.Partition.Partition, r.Offset))
	}
	printf("      a producer in each of bj, hf and gz published to %s at its own site in %v; hf's and gz's write gateways carried the puts to bj, which stored them (%s)\n",
		pushedTopic, time.Since(start).Round(time.Millisecond), strings.Join(answers, ", "))
	if _, _, err := s.replicated(ctx, pushedTopic, 2); err != nil {
		return fmt.Errorf("demo: replication of %s: %w", pushedTopic, err)
	}

	// 5. The lag report, as bj sees the pool.
	printSettledLag(ctx, out, func() (topology.LagDocument, error) { return s.lagDoc(ctx) })
	s.footer(out)
	printf("Config sets: %s/<site>/conf (server.ini shared, site.ini per site)\n", dir)
	return nil
}

// Tour runs the tour in this process.
func (d *demo) Tour(ctx context.Context) error {
	return runTour(ctx, d.out, d, d.o.Messages, d.shared, d.dir)
}

func (d *demo) produce(ctx context.Context, site, topic string, n int, from string) error {
	return produce(ctx, d.site(site).bjAddr, topic, n, from)
}

func (d *demo) produceAtSite(ctx context.Context, site, topic, from string) (client.SendResult, error) {
	return produceOne(ctx, d.site(site).b.Broker.Addr().String(), topic, from)
}

func (d *demo) replicated(ctx context.Context, topic string, _ int) (uint32, int64, error) {
	bj := d.site("bj")
	for _, s := range d.sites[1:] {
		if err := waitFor(ctx, 30*time.Second, func() error { return sameBytes(bj, s, topic) }); err != nil {
			return 0, 0, fmt.Errorf("to %s: %w", s.name, err)
		}
	}
	sum, size := checksum(bj, topic)
	return sum, size, nil
}

func (d *demo) consumeAtHF(ctx context.Context, want int) (int, int64, int64, error) {
	bj, hf := d.site("bj"), d.site("hf")
	if err := waitFor(ctx, 20*time.Second, func() error {
		addr, err := hf.b.Router().Route(ctx, client.RouteRequest{Topic: sampleTopic, BrokerID: 0, Site: "hf", Preference: client.LocalFirst})
		if err != nil {
			return err
		}
		if addr != hf.b.Broker.Addr().String() {
			return fmt.Errorf("router still sends hf's reads to %s", addr)
		}
		return nil
	}); err != nil {
		return 0, 0, 0, fmt.Errorf("demo: gossip: %w", err)
	}
	bjGets, hfGets := stat(bj, "cmd_get"), stat(hf, "cmd_get")
	n, err := consume(ctx, hf, want, filepath.Join(hf.dir, "consumer-offsets"))
	if err != nil {
		return 0, 0, 0, err
	}
	return n, stat(hf, "cmd_get") - hfGets, stat(bj, "cmd_get") - bjGets, nil
}

func (d *demo) configsync(ctx context.Context) (*configsync.Client, func(), error) {
	cs, err := configsync.NewClient(ctx, configsync.ClientOptions{URL: d.site("bj").b.NATSURL(), SigningKey: pushKey})
	if err != nil {
		return nil, nil, err
	}
	return cs, func() { cs.Close() }, nil
}

func (d *demo) lagDoc(ctx context.Context) (topology.LagDocument, error) {
	return d.site("bj").b.Topology().Document(ctx, nil), nil
}

func (d *demo) words() tourWords {
	return tourWords{
		replicated: "%d bytes of %s, byte for byte (crc32 %08x), %v after the last put",
		routedBy:   "gossip",
	}
}

func (d *demo) footer(w io.Writer) {
	fmt.Fprintf(w, "\nDashboards (page, /api/snapshot, /lag, /metrics):\n")
	for _, s := range d.sites {
		fmt.Fprintf(w, "  %s  http://%s/\n", s.name, s.b.DashboardAddr())
	}
}

// Tour runs the tour with each client inside the namespace of the site it
// belongs to.
func (n *netnsDemo) Tour(ctx context.Context) error {
	return runTour(ctx, n.out, n, n.o.Messages, n.shared, n.dir)
}

func (n *netnsDemo) produce(ctx context.Context, site, topic string, count int, from string) error {
	var pr produceResult
	return n.step(ctx, n.site(site).ns, stepRequest{Op: "produce", Addr: n.site("bj").metaqAddr(), Topic: topic, N: count, From: from}, &pr)
}

func (n *netnsDemo) produceAtSite(ctx context.Context, site, topic, from string) (client.SendResult, error) {
	var pr produceResult
	err := n.step(ctx, n.site(site).ns, stepRequest{Op: "produce-one", Addr: n.site(site).metaqAddr(), Topic: topic, From: from}, &pr)
	return client.SendResult{Partition: client.Partition{Partition: pr.Partition}, Offset: pr.Offset}, err
}

// replicated compares every copy record for record at the same offsets,
// reading each from bj's namespace across the WAN.
func (n *netnsDemo) replicated(ctx context.Context, topic string, partitions int) (uint32, int64, error) {
	var cr compareResult
	if err := n.step(ctx, n.site("bj").ns, stepRequest{Op: "compare", Addrs: n.addrs(), Topic: topic, N: partitions, Timeout: 30 * time.Second}, &cr); err != nil {
		return 0, 0, err
	}
	return cr.Sum, cr.Bytes, nil
}

func (n *netnsDemo) consumeAtHF(ctx context.Context, want int) (int, int64, int64, error) {
	bj, hf := n.site("bj"), n.site("hf")
	bjGets, hfGets := n.stat(ctx, bj, "cmd_get"), n.stat(ctx, hf, "cmd_get")
	var cons consumeResult
	if err := n.step(ctx, hf.ns, stepRequest{Op: "consume", Addr: bj.metaqAddr(), Local: hf.metaqAddr(), Site: "hf", Topic: sampleTopic,
		N: want, Partitions: 4, RouteURL: fmt.Sprintf("http://127.0.0.1:%d/lag", nsDashPort),
		OffsetFile: filepath.Join(hf.dir, "consumer-offsets"), Timeout: 60 * time.Second}, &cons); err != nil {
		return 0, 0, 0, err
	}
	return cons.Read, n.stat(ctx, hf, "cmd_get") - hfGets, n.stat(ctx, bj, "cmd_get") - bjGets, nil
}

// configsync connects over the demo's NATS, dialled inside bj.
func (n *netnsDemo) configsync(ctx context.Context) (*configsync.Client, func(), error) {
	bj := n.site("bj")
	nc, err := nats.Connect("nats://"+net.JoinHostPort(bj.ip, strconv.Itoa(nsNATSPort)), nats.SetCustomDialer(natsDialer{ns: bj.ns}),
		nats.Name("metaq-demo"), nats.Timeout(10*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect NATS: %w", err)
	}
	cs, err := configsync.NewClient(ctx, configsync.ClientOptions{Conn: nc, SigningKey: pushKey})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return cs, func() { cs.Close(); nc.Close() }, nil
}

func (n *netnsDemo) words() tourWords {
	return tourWords{
		producedFrom: " (from inside " + n.site("bj").ns + ")",
		replicated: "%d bytes of %s, record for record at the same offsets (crc32 %08x); confirmed %v after the last put, " +
			"reading each copy from bj's namespace across the WAN",
		routedBy: "hf's view of the gossip pool",
	}
}

func (n *netnsDemo) footer(w io.Writer) {
	fmt.Fprintf(w, "\nDashboards (page, /api/snapshot, /lag, /metrics), forwarded from each namespace's 127.0.0.1:%d:\n", nsDashPort)
	for _, s := range n.sites {
		fmt.Fprintf(w, "  %s  http://%s/\n", s.name, s.fwd.Addr())
	}
	fmt.Fprintf(w, "Inside a site: ip netns exec %sbj <command>  (bj 198.18.0.1, hf 198.18.0.2, gz 198.18.0.3, MetaQ port %d)\n", n.prefix, nsServerPort)
}
