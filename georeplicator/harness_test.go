package georeplicator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// testStore is a store the replication suite runs on: the real file store
// or the in-memory one.
type testStore interface {
	LogSource
	LogSink
}

// storeKind opens a store in dir; reopen after close must find the same data
// (the memory kind keeps its instance per dir).
type storeKind struct {
	name  string
	open  func(t testing.TB, dir string) testStore
	close func(s testStore)
	// put appends messages the way the broker does.
	put func(t testing.TB, s testStore, topic string, part int, bodies [][]byte)
	// retain removes old log data so the log's first position moves up.
	retain func(t testing.TB, s testStore)
}

var memStores sync.Map // dir -> *memStore

// fileSegmentBytes is the file store's segment size: small in tests so
// segment rolls happen under replication; benchmarks use a realistic one.
var fileSegmentBytes int64 = 1 << 20

func kinds() []storeKind {
	return []storeKind{
		{
			name: "file",
			open: func(t testing.TB, dir string) testStore {
				s, err := store.Open(store.Options{Dir: dir, SegmentBytes: fileSegmentBytes})
				if err != nil {
					t.Fatalf("open store %s: %v", dir, err)
				}
				return s
			},
			close: func(s testStore) {
				if st, ok := s.(*store.Store); ok {
					st.Close()
				}
			},
			retain: func(t testing.TB, s testStore) {
				st := s.(*store.Store)
				topics := map[string]bool{}
				for _, p := range st.Partitions() {
					topics[p.Topic] = true
				}
				// Everything but each partition's newest (virtual) segment is
				// older than a millisecond an hour from now.
				for topic := range topics {
					st.SetPolicy(topic, store.Policy{MaxAge: time.Millisecond})
					if _, err := st.Retain(topic, time.Now().Add(time.Hour)); err != nil {
						t.Fatalf("retain %s: %v", topic, err)
					}
				}
			},
			put: func(t testing.TB, s testStore, topic string, part int, bodies [][]byte) {
				msgs := make([]store.Message, len(bodies))
				for i, b := range bodies {
					msgs[i] = store.Message{Body: b}
				}
				if _, err := s.(*store.Store).Append(context.Background(), topic, part, msgs); err != nil {
					t.Errorf("append %s-%d: %v", topic, part, err)
				}
			},
		},
		{
			name: "mem",
			open: func(t testing.TB, dir string) testStore {
				v, _ := memStores.LoadOrStore(dir, newMemStore())
				return v.(*memStore)
			},
			close: func(testStore) {},
			put: func(t testing.TB, s testStore, topic string, part int, bodies [][]byte) {
				var recs []byte
				for _, b := range bodies {
					recs = append(recs, makeRecord(rand.Int64(), b)...)
				}
				s.(*memStore).put(topic, part, recs)
			},
			retain: func(t testing.TB, s testStore) {
				m := s.(*memStore)
				_, d := m.LogBounds()
				m.truncate(d / 2)
			},
		},
	}
}

// forKinds runs a test on every store kind.
func forKinds(t *testing.T, f func(t *testing.T, k storeKind)) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// rig is a master store + Shipper and a slave store + Receiver joined
// through a netproxy.
type rig struct {
	t      testing.TB
	k      storeKind
	dir    string
	master testStore
	slave  testStore
	sh     *Shipper
	rc     *Receiver
	proxy  *netproxy.Proxy
	shOpts ShipperOptions
	rcOpts ReceiverOptions
	seq    int
	mu     sync.Mutex
	sent   map[pkey]int // messages put per partition
}

func newRig(t testing.TB, k storeKind) *rig {
	t.Helper()
	g := &rig{t: t, k: k, dir: t.TempDir(), sent: map[pkey]int{}}
	g.master = k.open(t, filepath.Join(g.dir, "master"))
	g.shOpts = ShipperOptions{Listen: "127.0.0.1:0", BrokerID: 7, Keepalive: 100 * time.Millisecond,
		StuckAfter: time.Hour, StateFile: filepath.Join(g.dir, "master-repl.json"), FrameBytes: 64 << 10}
	g.rcOpts = ReceiverOptions{BrokerID: 7, SlaveID: 1, Group: "g1", MaxDelay: 100 * time.Millisecond,
		CheckpointFile:     filepath.Join(g.dir, "slave-data", "repl.checkpoint"),
		CheckpointInterval: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	if os.Getenv("GR_DEBUG") != "" {
		l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		g.shOpts.Logger, g.rcOpts.Logger = l, l
	}
	t.Cleanup(g.closeAll)
	return g
}

func (g *rig) closeAll() {
	if g.rc != nil {
		g.rc.Close()
	}
	if g.sh != nil {
		g.sh.Close()
	}
	if g.proxy != nil {
		g.proxy.Close()
	}
	if g.slave != nil {
		g.k.close(g.slave)
	}
	if g.master != nil {
		g.k.close(g.master)
	}
}

func (g *rig) startMaster() {
	g.t.Helper()
	o := g.shOpts
	o.Source = g.master
	sh, err := NewShipper(o)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.sh = sh
	if g.shOpts.Listener != nil {
		return // a listener in another network namespace: no proxy
	}
	if g.proxy == nil {
		p, err := netproxy.New(sh.Addr())
		if err != nil {
			g.t.Fatal(err)
		}
		g.proxy = p
	} else {
		g.proxy.SetTarget(sh.Addr())
	}
}

func (g *rig) stopMaster(reopenStore bool) {
	g.t.Helper()
	g.sh.Close()
	g.sh = nil
	if reopenStore {
		g.k.close(g.master)
		g.master = g.k.open(g.t, filepath.Join(g.dir, "master"))
	}
}

func (g *rig) startSlave() {
	g.t.Helper()
	g.startSlaveAt(g.proxy.Addr())
}

// startSlaveAt starts the receiver against addr (bypassing the proxy).
func (g *rig) startSlaveAt(addr string) {
	g.t.Helper()
	if g.slave == nil {
		g.slave = g.k.open(g.t, filepath.Join(g.dir, "slave-data", "store"))
	}
	o := g.rcOpts
	o.Sink = g.slave
	o.Resolver = StaticResolver(addr)
	rc, err := NewReceiver(o)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := rc.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.rc = rc
}

func (g *rig) stopSlave(reopenStore bool) {
	g.t.Helper()
	if err := g.rc.Close(); err != nil {
		g.t.Fatalf("close receiver: %v", err)
	}
	g.rc = nil
	if reopenStore {
		g.k.close(g.slave)
		g.slave = g.k.open(g.t, filepath.Join(g.dir, "slave-data", "store"))
	}
}

// logLine is a log-like JSON message, the payload shape the WAN link carries.
func logLine(r *rand.Rand, seq int) []byte {
	levels := []string{"INFO", "INFO", "INFO", "WARN", "DEBUG", "ERROR"}
	svcs := []string{"order-api", "payment", "inventory", "gateway", "user-profile"}
	return fmt.Appendf(nil, `{"ts":"2026-11-29T23:%02d:%02d.%03dZ","level":"%s","svc":"%s","trace":"%016x","seq":%d,"msg":"processed request %d for user %d","latency_ms":%d,"status":%d}`,
		seq/60%60, seq%60, r.IntN(1000), levels[r.IntN(len(levels))], svcs[r.IntN(len(svcs))], r.Uint64(), seq, r.IntN(100000), r.IntN(5000), r.IntN(300), []int{200, 200, 200, 404, 500}[r.IntN(5)])
}

// put appends bodies to one partition and counts them.
func (g *rig) put(topic string, part int, bodies ...[]byte) {
	g.t.Helper()
	g.k.put(g.t, g.master, topic, part, bodies)
	g.mu.Lock()
	g.sent[pkey{topic, part}] += len(bodies)
	g.mu.Unlock()
}

// load puts n batches of 1..8 log-like messages over the given partitions.
func (g *rig) load(n int, parts []pkey) {
	g.t.Helper()
	r := rand.New(rand.NewPCG(uint64(g.seq), 42))
	for i := 0; i < n; i++ {
		k := parts[r.IntN(len(parts))]
		m := 1 + r.IntN(8)
		bodies := make([][]byte, m)
		for j := range bodies {
			g.seq++
			bodies[j] = logLine(r, g.seq)
		}
		g.k.put(g.t, g.master, k.Topic, k.Partition, bodies)
		g.mu.Lock()
		g.sent[k] += m
		g.mu.Unlock()
	}
}

func defaultParts() []pkey {
	return []pkey{{"orders", 0}, {"orders", 1}, {"logs", 0}, {"logs", 1}, {"logs", 2}, {"audit", 0}}
}

// partitionDigest reads a whole partition and returns its bounds, the
// SHA-256 of its bytes and its record ids.
func partitionDigest(s testStore, topic string, part int) (lo, hi int64, sum [32]byte, ids []int64, err error) {
	info, err := s.Partition(topic, part)
	if err != nil {
		return 0, 0, sum, nil, err
	}
	h := sha256.New()
	var all []byte
	for off := info.Min; off < info.Max; {
		// Stop at the Max read above: the store may grow meanwhile.
		b, err := s.Read(topic, part, off, int(min(1<<20, info.Max-off)))
		if err != nil {
			return 0, 0, sum, nil, err
		}
		h.Write(b)
		all = append(all, b...)
		off += int64(len(b))
	}
	for b := all; len(b) > 0; {
		if len(b) < recordHeaderLen {
			return 0, 0, sum, nil, fmt.Errorf("partial record header at the end of %s-%d", topic, part)
		}
		l := int(binary.BigEndian.Uint32(b))
		if recordHeaderLen+l > len(b) {
			return 0, 0, sum, nil, fmt.Errorf("partial record at the end of %s-%d", topic, part)
		}
		ids = append(ids, int64(binary.BigEndian.Uint64(b[8:])))
		b = b[recordHeaderLen+l:]
	}
	copy(sum[:], h.Sum(nil))
	return info.Min, info.Max, sum, ids, nil
}

// converged checks every master partition is byte-identical on the slave,
// with the same bounds, and that no record is duplicated or missing.
func (g *rig) converged() error {
	mparts := g.master.Partitions()
	if len(mparts) == 0 {
		return errors.New("master has no partitions")
	}
	for _, mp := range mparts {
		mmin, mmax, msum, mids, err := partitionDigest(g.master, mp.Topic, mp.Partition)
		if err != nil {
			return fmt.Errorf("master %s-%d: %v", mp.Topic, mp.Partition, err)
		}
		smin, smax, ssum, sids, err := partitionDigest(g.slave, mp.Topic, mp.Partition)
		if err != nil {
			return fmt.Errorf("slave %s-%d: %v", mp.Topic, mp.Partition, err)
		}
		if smin != mmin || smax != mmax {
			return fmt.Errorf("%s-%d: slave [%d,%d) master [%d,%d)", mp.Topic, mp.Partition, smin, smax, mmin, mmax)
		}
		if ssum != msum {
			return fmt.Errorf("%s-%d: bytes differ", mp.Topic, mp.Partition)
		}
		if len(sids) != len(mids) {
			return fmt.Errorf("%s-%d: %d records on slave, %d on master", mp.Topic, mp.Partition, len(sids), len(mids))
		}
		seen := map[int64]bool{}
		for _, id := range sids {
			if seen[id] {
				return fmt.Errorf("%s-%d: duplicate record id %d", mp.Topic, mp.Partition, id)
			}
			seen[id] = true
		}
		g.mu.Lock()
		want, ok := g.sent[pkey{mp.Topic, mp.Partition}]
		g.mu.Unlock()
		if ok && mmin == 0 && len(mids) != want {
			return fmt.Errorf("%s-%d: master has %d records, %d were put", mp.Topic, mp.Partition, len(mids), want)
		}
	}
	return nil
}

func (g *rig) waitConverged(timeout time.Duration) {
	g.t.Helper()
	testutil.Eventually(g.t, timeout, 20*time.Millisecond, func() error {
		err := g.converged()
		if err != nil && g.rc != nil {
			err = fmt.Errorf("%w (slave: %+v)", err, g.rc.Status())
		}
		return err
	})
}

// waitLagZero waits until the master reports the slave caught up.
func (g *rig) waitLagZero(timeout time.Duration) {
	g.t.Helper()
	testutil.Eventually(g.t, timeout, 20*time.Millisecond, func() error {
		for _, l := range g.sh.Lag() {
			if l.Bytes != 0 || l.Messages != 0 || l.LogBytes != 0 {
				return fmt.Errorf("lag %+v", l)
			}
		}
		return nil
	})
}
