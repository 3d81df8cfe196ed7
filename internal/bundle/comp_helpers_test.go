package bundle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/config"
	"metaq/internal/testutil"
)

// siteSpec describes one site bundle of a test deployment that shares one
// server.ini (the file configsync pushes) and differs by its overlay.
type siteSpec struct {
	name  string
	slave bool
	// slaveID for a slave site.
	slaveID int
	// masterAddr is the replication address a slave dials (masterAddress).
	masterAddr string
	// natsURL is the NATS url a slave uses; the master embeds NATS.
	natsURL string
	// natsListen is the embedded server's address on the master.
	natsListen string
	// join lists gossip seeds.
	join []string
	// gossipBind is host:port for gossip (127.0.0.1:0 when empty).
	gossipBind string
	// port is the MetaQ port (serverPort); 0 picks a free one at every
	// start.
	port int
	// extraOverlay is appended to the overlay (e.g. a [site] token).
	extraOverlay string
	// autoSync sets autoSyncMasterConfig=true on a slave.
	autoSync bool
	// slaveExtra is appended to a slave's async_slave.properties.
	slaveExtra string
	// noNATS leaves [nats] out of the overlay (no configsync agent when
	// the shared file has none either).
	noNATS bool
	// logger replaces the test logger.
	logger *slog.Logger
	// options, when set, changes the bundle's Options before it starts
	// (dialers of an emulated WAN, fault injection).
	options func(*Options)
	// metaqPort leaves [replication] listen out: a master serves the
	// replication stream on its MetaQ port, the default.
	metaqPort bool
}

// iniOption changes sharedINI's server.ini.
type iniOption func(*iniSpec)

type iniSpec struct {
	noConfigSync bool
}

// noConfigSync leaves the [nats] section out: no configsync, whose
// embedded NATS server lives in the master's bundle and would stop with
// it (tests that kill or stop the master).
func noConfigSync(s *iniSpec) { s.noConfigSync = true }

// sharedINI is the common server.ini of the test deployment: brokerId 0,
// ZooKeeper off unless zk is set, every extension section present so each
// component runs (configsync's too, unless noConfigSync), and the site's
// keys in site.ini.
func sharedINI(zk, root, topics string, opts ...iniOption) string {
	var spec iniSpec
	for _, o := range opts {
		o(&spec)
	}
	nats := "[nats]\nbucket=metaq_config\n\n"
	if spec.noConfigSync {
		nats = ""
	}
	zkKeys := "zk.zkEnable=false\nzk.zkConnect=127.0.0.1:1\n"
	if zk != "" {
		zkKeys = fmt.Sprintf("zk.zkConnect=%s\nzk.zkRoot=%s\nzk.zkSessionTimeoutMs=5000\nzk.zkConnectionTimeoutMs=10000\nzk.zkSyncTimeMs=100\n", zk, root)
	}
	return `;; shared by every site; site.ini holds what differs
[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576
updateConsumerOffsets=false

[zookeeper]
` + zkKeys + `
[site]
overlay=site.ini

[replication]
compression=zstd
stuckAfterMs=5000

[gossip]
probeIntervalMs=100
label=metaq-test

` + nats + topics
}

// pushKey signs the tests' configsync pushes; every test site trusts it.
var pushKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, ed25519.SeedSize))

// overlayINI is one site's site.ini.
func overlayINI(s siteSpec, dir string, port int) string {
	gb := s.gossipBind
	if gb == "" {
		gb = "127.0.0.1:0"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[system]\nhostName=127.0.0.1\nserverPort=%d\ndataPath=%s\n\n", port, filepath.Join(dir, "data"))
	fmt.Fprintf(&b, "[site]\nname=%s\ndashboardAddr=127.0.0.1:0\nadminAddr=127.0.0.1:0\n\n", s.name)
	if !s.metaqPort {
		fmt.Fprintf(&b, "[replication]\nlisten=127.0.0.1:0\n\n")
	}
	fmt.Fprintf(&b, "[gossip]\nbind=%s\n", gb)
	if len(s.join) > 0 {
		fmt.Fprintf(&b, "join=%s\n", strings.Join(s.join, ","))
	}
	if !s.noNATS {
		b.WriteString("\n[nats]\n")
		fmt.Fprintf(&b, "trustedKeys=%s\n", config.FormatPublicKey(pushKey.Public().(ed25519.PublicKey)))
		if s.slave {
			fmt.Fprintf(&b, "url=%s\n", s.natsURL)
		} else {
			fmt.Fprintf(&b, "embeddedListen=%s\n", s.natsListen)
		}
	}
	return mergeSections(b.String(), s.extraOverlay)
}

// mergeSections is base with the sections of extra merged in, each
// section written once: a section base has takes extra's keys (a key it
// already has takes extra's value, which config would have taken too: a
// later value wins), a new one is appended. A repeated section makes
// config warn ("section appears more than once") in every test's log.
// Keys before extra's first section go to base's last one, as they would
// in the two texts written one after the other; blank lines are dropped.
func mergeSections(base, extra string) string {
	type section struct {
		name  string
		lines []string
	}
	var secs []*section
	var cur *section
	add := func(text string) {
		for _, line := range strings.Split(text, "\n") {
			t := strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]"):
				name := strings.TrimSpace(t[1 : len(t)-1])
				cur = nil
				for _, s := range secs {
					if s.name == name {
						cur = s
					}
				}
				if cur == nil {
					cur = &section{name: name}
					secs = append(secs, cur)
				}
			case t == "" || cur == nil:
			default:
				key, _, isKey := strings.Cut(t, "=")
				key = strings.TrimSpace(key)
				isKey = isKey && !strings.HasPrefix(t, ";") && !strings.HasPrefix(t, "#")
				replaced := false
				for i, l := range cur.lines {
					if k, _, ok := strings.Cut(l, "="); isKey && ok && strings.TrimSpace(k) == key {
						cur.lines[i], replaced = t, true
					}
				}
				if !replaced {
					cur.lines = append(cur.lines, t)
				}
			}
		}
	}
	add(base)
	add(extra)
	var b strings.Builder
	for i, s := range secs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[%s]\n", s.name)
		for _, l := range s.lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// startSite writes a site's files under dir and starts its bundle.
func startSite(t testing.TB, dir, shared string, s siteSpec) *Bundle {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := s.port
	if port == 0 {
		port = testutil.FreePort(t)
	}
	ini := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(ini, []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site.ini"), []byte(overlayINI(s, dir, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	log := s.logger
	if log == nil {
		// Named: a multi-site test's log interleaves its bundles' lines.
		log = testutil.Logger(t, slog.LevelInfo).With("bundle", s.name)
	}
	opts := Options{ConfigPath: ini, Logger: log, ListenAddr: "127.0.0.1:" + strconv.Itoa(port), AdminAddr: "127.0.0.1:0"}
	if s.slave {
		props := filepath.Join(dir, "async_slave.properties")
		p := fmt.Sprintf("slaveId=%d\nslaveGroup=meta-slave-group-%s\nslaveMaxDelayInMills=100\nautoSyncMasterConfig=%t\n", s.slaveID, s.name, s.autoSync)
		p += s.slaveExtra
		if s.masterAddr != "" {
			p += "masterAddress=" + s.masterAddr + "\n"
		}
		if err := os.WriteFile(props, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		opts.Mode, opts.PluginPath = ModeSlave, props
	}
	if s.options != nil {
		s.options(&opts)
	}
	return startBundle(t, opts)
}

func mustComp[T Component](t testing.TB, b *Bundle) T {
	t.Helper()
	c, ok := findComp[T](b)
	if !ok {
		var zero T
		t.Fatalf("bundle runs no %T component", zero)
	}
	return c
}

// produce sends n messages to topic through the Go client, statically
// pointed at addr (broker id 0). It returns the bodies that may be in the
// log more than once (produceWith).
func produce(t *testing.T, addr, topic string, n int, prefix string) map[string]bool {
	t.Helper()
	return produceWith(t, client.Config{Brokers: []string{addr}}, topic, n, prefix)
}

// sendTimeout bounds one put (finding the partition's master, writing, the
// broker's fsync and its answer): only a broker that stopped answering
// exceeds it. It bounds each send, not the batch: on a loaded machine every
// put is slower and a batch's total grows with n, which says nothing about
// whether the broker works. 30 s ran out at load 60 on a put's first
// connection to its master.
const sendTimeout = time.Minute

// testProducer returns a producer of a client of configuration cfg, and
// the function that closes both.
func testProducer(t testing.TB, cfg client.Config) (*client.Producer, func()) {
	t.Helper()
	if cfg.ZKConnectTimeout == 0 {
		// The client's 10 s for a first session ran out at load 40 with
		// the shared ZooKeeper busy.
		cfg.ZKConnectTimeout = sendTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	c, err := client.New(ctx, cfg)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.NewProducer(c)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	return p, func() {
		p.Close(context.Background())
		c.Close()
	}
}

// produceWith sends n messages to topic with a client of configuration cfg
// (static brokers or ZooKeeper), one after the other, each body
// <prefix>-<i>. It returns the bodies sent again after a master answered
// "stored here, but not acknowledged" (sendAcked): those, and only those,
// may be in the log more than once (checkBodies).
func produceWith(t *testing.T, cfg client.Config, topic string, n int, prefix string) map[string]bool {
	t.Helper()
	addr := fmt.Sprint(cfg.Brokers, cfg.ZKRoot)
	p, closeP := testProducer(t, cfg)
	defer closeP()
	repeated := map[string]bool{}
	for i := range n {
		body := fmt.Sprintf("%s-%d", prefix, i)
		_, stored, err := sendAckedStored(t, p, &client.Message{Topic: topic, Payload: []byte(body)})
		if err != nil {
			t.Fatalf("send %s #%d to %s: %v", topic, i, addr, err)
		}
		if stored > 0 {
			repeated[body] = true
		}
	}
	return repeated
}

// sentBodies lists the bodies produceWith sends with prefix and n.
func sentBodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// checkBodies checks that got, the bodies of a topic's records, holds each
// of want and nothing else, each once unless repeated names it (a put
// stored but not acknowledged, then sent again: produceWith).
func checkBodies(t testing.TB, what string, got, want []string, repeated map[string]bool) {
	t.Helper()
	count := map[string]int{}
	for _, b := range got {
		count[b]++
	}
	checkBodyCounts(t, what, count, want, repeated)
	for _, b := range want {
		delete(count, b)
	}
	for b, c := range count {
		t.Errorf("%s: %s (%d times) was never sent", what, b, c)
	}
}

// checkBodyCounts checks that each of want is counted at least once in
// count, and only once unless repeated names it.
func checkBodyCounts(t testing.TB, what string, count map[string]int, want []string, repeated map[string]bool) {
	t.Helper()
	for _, b := range want {
		if count[b] == 0 {
			t.Errorf("%s: %s is missing", what, b)
		}
		if count[b] > 1 && !repeated[b] {
			t.Errorf("%s: %s is there %d times, but it was stored once", what, b, count[b])
		}
	}
}

// countBodies counts each of bodies in the raw bytes of data (a store's
// partitions, saved-aside tails). No body may be a prefix of another, as
// none of sentBodies(prefix, n) is for n up to 10.
func countBodies(data [][]byte, bodies []string) map[string]int {
	out := map[string]int{}
	for _, d := range data {
		for _, b := range bodies {
			out[b] += bytes.Count(d, []byte(b))
		}
	}
	return out
}

// storedNotAcknowledged reports whether err is a master's answer "stored
// here, but not acknowledged": the put reached its log, but when the store
// answered the master could no longer confirm it was the master (its last
// confirmation of its generation in ZooKeeper was older than the bound, as
// on a machine so loaded that ZooKeeper's reads take seconds). Whether the
// record survives is unknown; it is not acknowledged.
func storedNotAcknowledged(err error) bool {
	return err != nil && strings.Contains(err.Error(), "stored here, but not acknowledged")
}

// maxResends bounds how often sendAcked sends a put again.
const maxResends = 10

// sendAcked sends m until a master acknowledges it, as a producer that
// retries does: a put answered "stored here, but not acknowledged"
// (storedNotAcknowledged) is sent again, so it may be in the log more than
// once, and so is one the client gave up on after its own retries of a
// refusal that says the put was not run (client.Retriable: a 503 from a
// master that has not confirmed its generation in ZooKeeper for seconds
// on a loaded machine), or one sent nowhere because ZooKeeper listed no
// partition yet (client.ErrNoPartition: a master registering late). Any other failure is returned at once. Each
// attempt is bounded by sendTimeout. Only the returned success is an
// acknowledgement.
func sendAcked(t testing.TB, p *client.Producer, m *client.Message) (client.SendResult, error) {
	t.Helper()
	r, _, err := sendAckedStored(t, p, m)
	return r, err
}

// sendAckedStored is sendAcked that also says how often m was sent again
// after an answer "stored here, but not acknowledged": when above 0, m
// may be in the log more than once.
func sendAckedStored(t testing.TB, p *client.Producer, m *client.Message) (client.SendResult, int, error) {
	t.Helper()
	stored := 0
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		r, err := p.Send(ctx, m)
		cancel()
		resend := storedNotAcknowledged(err) || client.Retriable(err) || errors.Is(err, client.ErrNoPartition)
		if err == nil || !resend || attempt == maxResends {
			return r, stored, err
		}
		if storedNotAcknowledged(err) {
			stored++
		}
		t.Logf("send %s to %s: %v; sending it again", m.Payload, m.Topic, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCaughtUp waits until slave's store has master's bytes of every
// partition of topic.
func waitCaughtUp(t testing.TB, master, slave *Bundle, topic string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, 20*time.Millisecond, func() error {
		for _, mp := range master.Store.Partitions() {
			if mp.Topic != topic {
				continue
			}
			sp, err := slave.Store.Partition(topic, mp.Partition)
			if err != nil {
				return err
			}
			if sp.Max != mp.Max {
				return fmt.Errorf("%s-%d: slave at %d, master at %d", topic, mp.Partition, sp.Max, mp.Max)
			}
		}
		return nil
	})
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := testutil.HTTPDo(t, "GET", url, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// statsOf returns one broker's `stats <item>` body.
func statsOf(b *Bundle, item string) string { return b.Broker.Stats(item) }

func statInt(b *Bundle, name string) int64 { return brokerStats(b)[name] }
