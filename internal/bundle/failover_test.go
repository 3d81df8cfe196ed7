package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/netproxy"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// failoverINI is the shared server.ini of these tests: topic orders with two
// partitions, gossip on, replication keys added.
func failoverINI(replication string) string { return failoverINIZK("", "", replication) }

func failoverINIZK(zk, root, replication string, opts ...iniOption) string {
	s := sharedINI(zk, root, "[topic=orders]\nnumPartitions=2\n", opts...)
	return strings.Replace(s, "[replication]\n", "[replication]\n"+replication, 1)
}

// TestPromoteSlaveSite: hf refuses to be promoted while bj is reachable;
// once bj is gone, `promote` makes hf master at generation 1 at run time (it
// takes puts at once), and gz, moved to hf, resumes on hf's log by its
// partition ends and holds hf's bytes.
func TestPromoteSlaveSite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL})

	produce(t, bj.Broker.Addr().String(), "orders", 100, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	ctx := context.Background()
	if _, err := hf.Promote(ctx, false); !errors.Is(err, ErrMasterReachable) {
		t.Fatalf("promote with bj reachable: %v, want ErrMasterReachable", err)
	}
	if code, body := testutil.HTTPDo(t, "POST", "http://"+hf.AdminAddr()+"/promote", ""); code != http.StatusConflict {
		t.Fatalf("POST /promote with bj reachable: %d %s", code, body)
	}
	bj.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := mustComp[*receiverComponent](t, hf).Receiver().Status(); st.Connected {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	code, body := testutil.HTTPDo(t, "POST", "http://"+hf.AdminAddr()+"/promote", "")
	var rep PromoteReport
	if err := json.Unmarshal(body, &rep); code != http.StatusOK || err != nil {
		t.Fatalf("POST /promote: %d %s (%v)", code, body, err)
	}
	if rep.Generation != 1 || rep.BehindBytes != 0 || rep.Ends["orders-0"]+rep.Ends["orders-1"] == 0 {
		t.Fatalf("promote report %+v", rep)
	}
	if _, err := hf.Promote(ctx, true); err == nil {
		t.Fatal("a second promotion succeeded")
	}
	produce(t, hf.Broker.Addr().String(), "orders", 50, "hf")

	// gz's link now leads to hf (its master address moved).
	toGZ.SetTarget(hf.promotedShipper().Addr())
	toGZ.CutAll()
	waitCaughtUp(t, hf, gz, "orders", 20*time.Second)
	for p := range 2 {
		hb, _ := hf.Store.Read("orders", p, 0, 1<<20)
		gb, _ := gz.Store.Read("orders", p, 0, 1<<20)
		if string(hb) != string(gb) {
			t.Fatalf("gz partition %d differs from hf", p)
		}
	}
	id, err := gz.identity()
	if err != nil {
		t.Fatal(err)
	}
	if g := id.Generation(); g != 1 {
		t.Fatalf("gz knows generation %d, want 1", g)
	}
}

// TestCutOffMasterRefusesPuts: with fenceSites=3, bj acknowledges puts only
// while a majority of the sites confirm it. Cut off from hf and gz (a black
// hole: nothing closes), it refuses puts with a retriable answer within the
// lease; hf, promoted, takes puts once gz follows it and the lease has run
// out; at no moment do both take puts.
func TestCutOffMasterRefusesPuts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("fenceSites=3\nleaseMs=500\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	if r := bj.Broker.WriteRefusal(); r == nil || !r.Retry {
		t.Fatalf("bj takes puts before any slave confirmed it: %+v", r)
	}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL})
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("bj refuses: %s", r.Reason)
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	var both atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if bj.Broker.WriteRefusal() == nil && hf.Broker.WriteRefusal() == nil {
				both.Store(true)
			}
		}
	}()
	for _, p := range []*netproxy.Proxy{toHF, toGZ} {
		p.SetRefuse(true)
		p.SetStall(true)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r == nil || !r.Retry || !strings.Contains(r.Reason, "fenced") {
			return fmt.Errorf("bj refusal %+v", r)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := mustComp[*receiverComponent](t, hf).Receiver().Status(); st.Connected {
			return errors.New("hf has not noticed that bj went silent")
		}
		return nil
	})
	if _, err := hf.Promote(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	toGZ.SetTarget(hf.promotedShipper().Addr())
	toGZ.SetStall(false)
	toGZ.SetRefuse(false)
	toGZ.CutAll()
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := hf.Broker.WriteRefusal(); r != nil {
			return fmt.Errorf("hf refuses: %s", r.Reason)
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	waitCaughtUp(t, hf, gz, "orders", 20*time.Second)
	close(stop)
	wg.Wait()
	if both.Load() {
		t.Fatal("bj and hf took puts at the same time")
	}
	if bj.Broker.WriteRefusal() == nil {
		t.Fatal("bj, still cut off, takes puts again")
	}
}

// TestPromoteSlaveSiteZooKeeper: with ZooKeeper on, the promoted site
// registers as master of the brokerId at generation 1, and a Go producer
// that follows ZooKeeper, started before bj was lost, sends to hf without
// a restart; the offsets hf assigns continue bj's.
func TestPromoteSlaveSiteZooKeeper(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://" + natsListen})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{ZKServers: []string{zk}, ZKRoot: zkRoot, ZKSyncTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := client.NewProducer(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	send := func(tag string, n int) []client.SendResult {
		var out []client.SendResult
		for i := range n {
			r, err := p.Send(ctx, &client.Message{Topic: "orders", Payload: []byte(fmt.Sprintf("%s-%d", tag, i))})
			if err != nil {
				t.Fatalf("send %s-%d: %v", tag, i, err)
			}
			out = append(out, r)
		}
		return out
	}
	send("bj", 20)
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	ends := map[int]int64{}
	for _, pi := range hf.Store.Partitions() {
		ends[pi.Partition] = pi.Max
	}
	bj.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Receiver().Status().Connected {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	rep, err := hf.Promote(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation != 1 {
		t.Fatalf("generation %d", rep.Generation)
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	if data, _, err := zc.Get(ctx, zkRoot+"/brokers/ids/0/master"); err != nil || string(data) != hf.Broker.URL() {
		t.Fatalf("ids/0/master = %q %v, want %s", data, err, hf.Broker.URL())
	}
	if g, err := zc.Generation(ctx, 0); err != nil || g != 1 {
		t.Fatalf("generation in ZooKeeper %d %v", g, err)
	}
	for _, r := range send("hf", 20) {
		if r.Offset < ends[r.Partition.Partition] {
			t.Fatalf("hf stored at %d in partition %d, below bj's end %d", r.Offset, r.Partition.Partition, ends[r.Partition.Partition])
		}
	}
}

// wantFollowsByteIdentical waits until follower holds leader's whole log
// of topic and checks both hold the same bytes in every partition.
func wantFollowsByteIdentical(t testing.TB, leader, follower *Bundle, topic string) {
	t.Helper()
	// Liveness bounds: on a loaded machine a replication link times out
	// and reconnects now and then, and a rejoining follower cuts and
	// saves its divergent tail before it catches up.
	waitCaughtUp(t, leader, follower, topic, 60*time.Second)
	// Equal ends are not equal bytes: a follower that has not cut a
	// diverged tail of the same length yet gets until the bound.
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, p := range leader.Store.Partitions() {
			if p.Topic != topic {
				continue
			}
			lb, _ := leader.Store.Read(topic, p.Partition, 0, 64<<20)
			fb, _ := follower.Store.Read(topic, p.Partition, 0, 64<<20)
			if len(lb) == 0 || string(lb) != string(fb) {
				return fmt.Errorf("%s-%d: the follower holds %d bytes, the leader %d, or they differ", topic, p.Partition, len(fb), len(lb))
			}
		}
		return nil
	})
}

// wantDemoted checks that a former master refuses puts for good (403)
// naming the new master and runs a receiver.
func wantDemoted(t *testing.T, old *Bundle, newMaster string) {
	t.Helper()
	r := old.Broker.WriteRefusal()
	if r == nil || r.Retry || !strings.Contains(r.Reason, newMaster) {
		t.Fatalf("the former master's write refusal %+v, want 403 naming %s", r, newMaster)
	}
	if old.demotedReceiver() == nil || old.promotedShipper() != nil || compOf[*shipperComponent](old).Shipper() != nil {
		t.Fatal("the former master does not run a receiver, or still ships")
	}
}

// TestSwitchover: `switchover -to hf` at bj stops puts at bj, waits until
// hf holds bj's whole durable log, and hands over: hf becomes master with
// every message bj acknowledged, bj becomes a slave of hf at run time
// (refusing puts with 403 naming hf) and follows it byte-identically, gz
// follows hf.
func TestSwitchover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL})
	produce(t, bj.Broker.Addr().String(), "orders", 200, "bj")
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, s := range []*Bundle{hf, gz} {
			if !mustComp[*receiverComponent](t, s).Receiver().Status().Connected {
				return errors.New("a slave is not connected yet")
			}
		}
		return nil
	})

	// Without ZooKeeper bj follows the address it is given: a proxy aimed
	// at hf's shipper once hf ships.
	toNewMaster := wanProxy(t, "127.0.0.1:1")
	start := time.Now()
	code, body := testutil.HTTPDo(t, "POST", "http://"+bj.AdminAddr()+"/switchover?to=hf&follow="+toNewMaster.Addr(), "")
	var rep SwitchoverReport
	if err := json.Unmarshal(body, &rep); code != http.StatusOK || err != nil {
		t.Fatalf("POST /switchover: %d %s (%v)", code, body, err)
	}
	if !strings.HasPrefix(rep.To, "meta-slave-group-hf/") || rep.Generation != 1 || !rep.Following {
		t.Fatalf("switchover report %+v", rep)
	}
	testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
		if hf.promotedShipper() == nil || hf.Broker.WriteRefusal() != nil {
			return errors.New("hf does not take puts yet")
		}
		return nil
	})
	t.Logf("writes stopped at bj for %s before the handover; hf took puts %s after the command", rep.WritesStopped, time.Since(start))
	wantDemoted(t, bj, "meta-slave-group-hf/")
	// The role machine owns the result of both transitions.
	if r := bj.Role(); r.Role != siterole.Slave || r.Generation != 1 || r.SlaveID != 1 {
		t.Fatalf("bj's role after the switchover: %v", r)
	}
	if r := hf.Role(); !r.IsMaster() || r.Generation != 1 {
		t.Fatalf("hf's role after the switchover: %v", r)
	}
	if r := gz.Role(); r.Role != siterole.Slave || r.SlaveID != 2 {
		t.Fatalf("gz's role: %v", r)
	}
	toNewMaster.SetTarget(hf.promotedShipper().Addr())
	for p := range 2 {
		bb, _ := bj.Store.Read("orders", p, 0, 1<<20)
		hb, _ := hf.Store.Read("orders", p, 0, 1<<20)
		if len(bb) == 0 || string(bb) != string(hb) {
			t.Fatalf("partition %d: hf holds %d bytes, bj %d", p, len(hb), len(bb))
		}
	}
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	toGZ.SetTarget(hf.promotedShipper().Addr())
	toGZ.CutAll()
	waitCaughtUp(t, hf, gz, "orders", 20*time.Second)
	wantFollowsByteIdentical(t, hf, bj, "orders")
	wantFollowsByteIdentical(t, hf, gz, "orders")
}

// TestSwitchoverZooKeeperNoLoss: a Go producer that follows ZooKeeper
// sends throughout `switchover -to hf`; every message it had acknowledged
// is at hf afterwards, it moves to hf without a restart, and the longest
// gap between two acknowledgements (the write downtime) is logged.
func TestSwitchoverZooKeeperNoLoss(t *testing.T) {
	t.Parallel()
	// With replication on a port of its own, and on the MetaQ port: the
	// promoted site serves it on its MetaQ port, the demoted one gives its
	// own back and follows.
	for _, metaqPort := range []bool{false, true} {
		t.Run(map[bool]string{false: "own port", true: "MetaQ port"}[metaqPort], func(t *testing.T) {
			testSwitchoverZooKeeperNoLoss(t, metaqPort)
		})
	}
}

func testSwitchoverZooKeeperNoLoss(t *testing.T, metaqPort bool) {
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen, metaqPort: metaqPort})
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://" + natsListen, metaqPort: metaqPort})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !mustComp[*receiverComponent](t, hf).Receiver().Status().Connected {
			return errors.New("hf not connected")
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{ZKServers: []string{zk}, ZKRoot: zkRoot, ZKSyncTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := client.NewProducer(cl, client.WithRetries(50), client.WithRetryBackoff(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	var (
		mu     sync.Mutex
		acked  []string
		maxGap time.Duration
		last   = time.Now()
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m := fmt.Sprintf("msg-%d", i)
			if _, err := p.Send(ctx, &client.Message{Topic: "orders", Payload: []byte(m)}); err != nil {
				continue // not acknowledged: may be lost
			}
			now := time.Now()
			mu.Lock()
			acked = append(acked, m)
			maxGap = max(maxGap, now.Sub(last))
			last = now
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond) // traffic before the switchover
	rep, err := bj.Switchover(ctx, "hf", "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) > 100*time.Millisecond || hf.Broker.WriteRefusal() != nil {
			return errors.New("no acknowledgements from hf yet")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // traffic after
	close(stop)
	<-done
	held := map[string]bool{}
	for part := range 2 {
		b, _ := hf.Store.Read("orders", part, 0, 64<<20)
		for len(b) > 0 {
			r, n, err := store.DecodeRecord(b)
			if err != nil {
				t.Fatalf("hf orders-%d: %v", part, err)
			}
			held[string(r.Body)] = true
			b = b[n:]
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range acked {
		if !held[m] {
			t.Fatalf("%s was acknowledged but is not at hf", m)
		}
	}
	t.Logf("%d messages acknowledged; writes stopped at bj for %s; longest gap between acknowledgements %s", len(acked), rep.WritesStopped, maxGap)
	if !rep.Following {
		t.Fatalf("switchover report %+v: bj does not follow hf", rep)
	}
	// bj found hf in ZooKeeper, registered as hf's former slaveId, and
	// holds hf's log byte for byte, including what hf took after.
	wantDemoted(t, bj, "meta-slave-group-hf/")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	if metaqPort {
		st, err := bj.SlaveStatus()
		if err != nil {
			t.Fatal(err)
		}
		if rs := st.(SlaveReport).Stream; rs == nil || rs.MasterAddr != addrString(hf.Broker) {
			t.Fatalf("bj follows %+v, want hf's MetaQ port %s", rs, addrString(hf.Broker))
		}
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		kids, err := zc.Children(context.Background(), zc.Paths().BrokerID(0))
		if err != nil {
			return err
		}
		if !slices.Contains(kids, "slave1") || !slices.Contains(kids, "master") {
			return fmt.Errorf("ids/0 holds %v, want master and slave1", kids)
		}
		return nil
	})
}

// TestMasterStepsDownOnZooKeeperGeneration: a master that finds a newer
// generation of its brokerId in ZooKeeper (another site was promoted)
// steps down and refuses puts.
func TestMasterStepsDownOnZooKeeperGeneration(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), failoverINIZK(zk, zkRoot, "leaseMs=400\n"), siteSpec{name: "bj", natsListen: natsListen})
	if r := bj.Broker.WriteRefusal(); r != nil {
		t.Fatalf("bj refuses puts at start: %s", r.Reason)
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	if _, err := zc.RaiseGeneration(context.Background(), 0, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r == nil || !strings.Contains(r.Reason, "no longer master") {
			return fmt.Errorf("bj refusal %+v", r)
		}
		return nil
	})
}

// TestDemoteCutsUnreplicatedTail: bj, cut off from hf, acknowledges
// records hf never gets; hf is promoted; bj, demoted at run time (no
// restart), cuts those records, saves them aside, and then follows hf
// byte-identically.
func TestDemoteCutsUnreplicatedTail(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	toHF := wanProxy(t, mustComp[*shipperComponent](t, bj).Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: "nats://" + natsListen})
	produce(t, bj.Broker.Addr().String(), "orders", 50, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)

	toHF.SetRefuse(true)
	toHF.CutAll()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mustComp[*receiverComponent](t, hf).Receiver().Status().Connected {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 30, "bj-unreplicated")
	if _, err := hf.Promote(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	produce(t, hf.Broker.Addr().String(), "orders", 10, "hf")

	toNewMaster := wanProxy(t, hf.promotedShipper().Addr())
	if err := bj.Demote(context.Background(), Demotion{SlaveID: 1, MasterAddress: toNewMaster.Addr(), NewMaster: "hf"}); err != nil {
		t.Fatal(err)
	}
	wantDemoted(t, bj, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	tails, err := georeplicator.ListTails(filepath.Join(root, "bj", "data", "replication", "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	saved := 0
	for _, f := range tails {
		saved += f.Records
	}
	if saved != 30 {
		t.Fatalf("bj saved %d records aside (%+v), want the 30 hf never got", saved, tails)
	}
}

// TestGossipFollowsNewMaster (ZooKeeper off): bj is cut off from the other
// sites' replication links but still gossips; hf is promoted with force.
// bj learns hf's newer generation by gossip and refuses puts (and rejoins
// as hf's slave, see TestRejoinAfterUnplannedFailover); gz, whose
// async_slave.properties still names bj, follows hf because gossip says
// hf is the master of the highest generation; hf no longer reports itself
// a slave.
func TestGossipFollowsNewMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := failoverINI("")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 50, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)
	if _, err := hf.SlaveStatus(); err != nil || !hf.slave.IsSlave() {
		t.Fatalf("hf before the promotion: slave-status %v, stats slave says slave %t", err, hf.slave.IsSlave())
	}

	for _, p := range []*netproxy.Proxy{toHF, toGZ} {
		p.SetRefuse(true)
		p.CutAll()
	}
	rep, err := hf.Promote(context.Background(), true)
	if err != nil || rep.Generation != 1 {
		t.Fatalf("promote: %+v %v", rep, err)
	}
	// Stepped down, bj refuses puts (retriable) and then, rejoining as
	// hf's slave by itself, refuses them for good naming hf.
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		if r := bj.Broker.WriteRefusal(); r == nil || !r.Retry && !strings.Contains(r.Reason, "site hf") {
			return fmt.Errorf("bj still takes puts (refusal %+v)", r)
		}
		return nil
	})
	if _, err := hf.SlaveStatus(); err == nil || hf.slave.IsSlave() {
		t.Fatalf("hf after the promotion: slave-status %v, stats slave says slave %t", err, hf.slave.IsSlave())
	}
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	wantFollowsByteIdentical(t, hf, gz, "orders")
}

// TestAutoFailover: with [replication] autoFailover=true, hf alone losing
// bj (its link cut, gz still connected, bj registered in ZooKeeper) is
// not promoted; once bj is gone, hf, the most caught-up slave site (gz,
// cut off earlier, is behind though its name sorts first), promotes itself
// and gz follows it; gz does not promote itself.
func TestAutoFailover(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "autoFailover=true\nautoFailoverAfterMs=500\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	bjShip := mustComp[*shipperComponent](t, bj)
	natsURL := "nats://" + natsListen
	toHF, toGZ := wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), natsURL: natsURL, join: seed})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), natsURL: natsURL, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 50, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	disconnect := func(p *netproxy.Proxy, s *Bundle) {
		p.SetRefuse(true)
		p.CutAll()
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			if mustComp[*receiverComponent](t, s).Connected() {
				return errors.New("still connected to bj")
			}
			return nil
		})
	}
	// hf alone cannot reach bj: no majority, and bj is in ZooKeeper.
	disconnect(toHF, hf)
	time.Sleep(2 * time.Second) // four times autoFailoverAfterMs
	if hf.promotedShipper() != nil {
		t.Fatal("hf promoted itself while bj was alive and reachable from gz")
	}
	toHF.SetRefuse(false)

	// gz falls behind, then bj is lost.
	disconnect(toGZ, gz)
	produce(t, bj.Broker.Addr().String(), "orders", 30, "bj-late")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	bj.Close()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if hf.promotedShipper() == nil || hf.Broker.WriteRefusal() != nil {
			return errors.New("hf is not master yet")
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	wantFollowsByteIdentical(t, hf, gz, "orders")
	if gz.promotedShipper() != nil {
		t.Fatal("gz promoted itself too")
	}
}
