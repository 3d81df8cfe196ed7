package bundle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// dialGate is a site's outbound replication link: while cut, every dial
// fails as a partitioned network would.
type dialGate struct{ cut atomic.Bool }

func (g *dialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.cut.Load() {
		return nil, fmt.Errorf("dial %s: link cut by the test", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// putLoop sends puts to addr one after the other until stopped and keeps
// the payloads the broker acknowledged.
type putLoop struct {
	mu    sync.Mutex
	acked []string
	// storedUnacked are puts answered "stored here, but not acknowledged":
	// written to the log as the write check passed, then refused because
	// the check no longer passed when the store answered.
	storedUnacked []string
	stop          chan struct{}
	done          chan struct{}
}

func startPutLoop(t *testing.T, addr, topic string) *putLoop {
	t.Helper()
	l := &putLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		var c *metaConn
		defer func() {
			if c != nil {
				c.Close()
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			if c == nil {
				var err error
				if c, err = dialMeta(addr); err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			m := fmt.Sprintf("loop-%d", i)
			if _, _, err := c.put(topic, i%2, []byte(m)); err != nil {
				if strings.Contains(err.Error(), "stored here, but not acknowledged") {
					l.mu.Lock()
					l.storedUnacked = append(l.storedUnacked, m)
					l.mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond) // refused (or cut): not acknowledged
				continue
			}
			l.mu.Lock()
			l.acked = append(l.acked, m)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.halt)
	return l
}

func (l *putLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *putLoop) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// payloads decodes the bodies of every record of topic's partitions in s.
func payloads(t *testing.T, s *store.Store, topic string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range s.Partitions() {
		if p.Topic != topic {
			continue
		}
		b, err := s.Read(topic, p.Partition, 0, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 {
			r, n, err := store.DecodeRecord(b)
			if err != nil {
				t.Fatalf("%s-%d: %v", topic, p.Partition, err)
			}
			out[string(r.Body)] = true
			b = b[n:]
		}
	}
	return out
}

// TestRejoinAfterUnplannedFailover (ZooKeeper off: gossip): bj, the master
// with fenceSites=3, is cut off from hf and gz while a producer writes to
// it; it stops acknowledging once its lease runs out. hf is promoted; bj
// learns the newer generation by gossip, steps down and, with no command
// and no restart, demotes itself; once its link to hf heals it cuts what
// hf never had, saves it under replication/unreplicated, and then holds
// hf's log byte for byte.
func TestRejoinAfterUnplannedFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	rejoinAfterFailover(t, "")
}

// TestRejoinAfterUnplannedFailoverZooKeeper is the same with ZooKeeper on:
// bj learns the newer generation there, gives up its master node at once
// (so hf can register) and finds hf's replication address there.
func TestRejoinAfterUnplannedFailoverZooKeeper(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	rejoinAfterFailover(t, zk)
}

func rejoinAfterFailover(t *testing.T, zk string) {
	root := t.TempDir()
	zkRoot := ""
	if zk != "" {
		zkRoot = multiSiteRoot(t, []string{zk})
	}
	shared := failoverINIZK(zk, zkRoot, "fenceSites=3\nleaseMs=1500\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bjLink := &dialGate{}
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen,
		options: func(o *Options) { o.ReplicationDialer = bjLink.dial }})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL, join: seed})
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("bj refuses: %s", r.Reason)
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	var both atomic.Bool
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if bj.Broker.WriteRefusal() == nil && hf.Broker.WriteRefusal() == nil {
				both.Store(true)
			}
		}
	}()
	defer func() { close(stopWatch); <-watchDone }()

	loop := startPutLoop(t, bj.Broker.Addr().String(), "orders")
	// The first put bj acknowledged, not loop-0: on a loaded machine bj's
	// lease lapses now and then (fewer than a majority of sites confirm it
	// within leaseMs) and the loop's first puts may be refused, never to
	// be sent again.
	testutil.Eventually(t, 60*time.Second, 5*time.Millisecond, func() error {
		loop.mu.Lock()
		var first string
		if len(loop.acked) > 0 {
			first = loop.acked[0]
		}
		loop.mu.Unlock()
		if first == "" || !payloads(t, hf.Store, "orders")[first] {
			return errors.New("hf holds none of the producer's acknowledged messages yet")
		}
		return nil
	})
	// bj is cut off from the other sites: its streams stall, and it cannot
	// dial out either.
	bjLink.cut.Store(true)
	for _, p := range []*netproxy.Proxy{toHF, toGZ} {
		p.SetRefuse(true)
		p.SetStall(true)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r == nil || !r.Retry {
			return fmt.Errorf("bj refusal %+v", r)
		}
		return nil
	})
	ackedAtFence := loop.count()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Receiver().Status().Connected {
			return errors.New("hf has not noticed that bj went silent")
		}
		return nil
	})
	// -force: gz, cut at the same moment, may hold a few records more than
	// hf (a plain promote then names gz); whatever only gz holds is cut
	// there and saved aside when it follows hf.
	rep, err := hf.Promote(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	// gz finds hf by gossip; with gz, hf holds a majority.
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if r := hf.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("hf refuses: %s", r.Reason)
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")

	// bj stepped down and demoted itself, but cannot reach hf yet.
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if bj.demotedReceiver() == nil {
			return errors.New("bj has not demoted itself")
		}
		return nil
	})
	if r := bj.demotedReceiver().Receiver(); r != nil && r.Status().Connected {
		t.Fatal("bj reached hf through a cut link")
	}
	bjLink.cut.Store(false)
	wantFollowsByteIdentical(t, hf, bj, "orders")
	wantFollowsByteIdentical(t, hf, gz, "orders")
	if r := bj.Broker.WriteRefusal(); r == nil || r.Retry {
		t.Fatalf("bj as hf's slave: refusal %+v, want a final one", r)
	}
	if zk != "" {
		// ZooKeeper names hf the master and holds bj as a slave.
		zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
		ctx := context.Background()
		data, _, err := zc.Get(ctx, zc.Paths().BrokerID(0)+"/master")
		if err != nil || string(data) != hf.Broker.URL() {
			t.Fatalf("ids/0/master = %q %v, want hf's %s", data, err, hf.Broker.URL())
		}
		slaveID := bj.SlaveConfig().SlaveID
		if ok, _, err := zc.Exists(ctx, zc.Paths().Broker(0, slaveID)); err != nil || !ok {
			t.Fatalf("bj is not registered as slave %d: %v", slaveID, err)
		}
	}
	loop.halt()
	if n := loop.count(); n > ackedAtFence+1 {
		t.Fatalf("bj acknowledged %d puts after it was fenced (a put in flight may finish: at most 1)", n-ackedAtFence)
	}
	if both.Load() {
		t.Fatal("bj and hf took puts at the same time")
	}

	// What bj acknowledged and hf never got is saved aside on bj, and
	// nothing else is.
	atHF := payloads(t, hf.Store, "orders")
	var missing []string
	for _, m := range loop.acked {
		if !atHF[m] {
			missing = append(missing, m)
		}
	}
	tails, err := georeplicator.ListTails(filepath.Join(root, "bj", "data", "replication", "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]bool{}
	for _, f := range tails {
		if f.Generation != rep.Generation {
			t.Errorf("tail %s names generation %d, want %d", f.Path, f.Generation, rep.Generation)
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			r, n, err := store.DecodeRecord(data)
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			saved[string(r.Body)] = true
			data = data[n:]
		}
	}
	if len(missing) == 0 {
		t.Fatal("bj acknowledged nothing that hf lacks: the test made no divergent tail")
	}
	for _, m := range missing {
		if !saved[m] {
			t.Fatalf("%s was acknowledged by bj, is not at hf, and is not saved aside", m)
		}
	}
	// Besides those, only puts that bj stored and then refused to
	// acknowledge (the fence came while they were on their way to the
	// store) may be in its divergent tail.
	mayBeSaved := map[string]bool{}
	for _, m := range missing {
		mayBeSaved[m] = true
	}
	for _, m := range loop.storedUnacked {
		mayBeSaved[m] = true
	}
	for m := range saved {
		if !mayBeSaved[m] {
			t.Fatalf("bj saved %s aside: neither acknowledged by bj nor answered as stored but not acknowledged (%d saved, %d acknowledged that hf lacks, %d stored but not acknowledged)",
				m, len(saved), len(missing), len(loop.storedUnacked))
		}
	}
	t.Logf("bj acknowledged %d puts in the loop, %d of them hf never got, all saved aside in %d files (%d saved; %d puts stored but not acknowledged)", len(loop.acked), len(missing), len(tails), len(saved), len(loop.storedUnacked))
}

// TestSwitchoverWithoutFollowRejoinsByGossip (ZooKeeper off): `switchover
// -to hf` without -follow leaves bj with no address to follow at first;
// gossip then names hf's replication address and bj becomes its slave by
// itself, holding hf's log byte for byte.
func TestSwitchoverWithoutFollowRejoinsByGossip(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: "nats://" + natsListen, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := bj.Switchover(ctx, "hf", "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Following {
		t.Fatalf("switchover report %+v: bj followed without an address", rep)
	}
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if bj.demotedReceiver() == nil || hf.Broker.WriteRefusal() != nil {
			return errors.New("bj has not rejoined as hf's slave, or hf takes no puts yet")
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	if r := bj.Broker.WriteRefusal(); r == nil || r.Retry || !strings.Contains(r.Reason, "site hf") {
		t.Fatalf("bj's refusal %+v, want a final one naming hf", r)
	}
}
