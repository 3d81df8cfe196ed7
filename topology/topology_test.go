package topology

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

var testKey = []byte("0123456789abcdef")

// fakeLag is a LagSource whose groups the test sets.
type fakeLag struct {
	mu     sync.Mutex
	groups []georeplicator.GroupLag
}

func (f *fakeLag) Lag() []georeplicator.GroupLag {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]georeplicator.GroupLag, len(f.groups))
	for i, g := range f.groups {
		g.Partitions = append([]georeplicator.PartitionLag(nil), g.Partitions...)
		out[i] = g
	}
	return out
}

func (f *fakeLag) set(g []georeplicator.GroupLag) {
	f.mu.Lock()
	f.groups = g
	f.mu.Unlock()
}

// fakeHealth is a HealthSource the test flips.
type fakeHealth struct {
	mu sync.Mutex
	h  Health
}

func (f *fakeHealth) Health() Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

func (f *fakeHealth) set(h Health) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

type node struct {
	t      *Topology
	opts   Options
	health *fakeHealth
	lag    *fakeLag
}

// startNode starts one bundle's gossip on 127.0.0.1 with short intervals.
func startNode(t *testing.T, opts Options) *node {
	t.Helper()
	n := &node{health: &fakeHealth{h: Health{StorageOK: true, ReplicationOK: true}}, lag: &fakeLag{}}
	opts.Health, opts.Lag = n.health, n.lag
	opts.Key, opts.Label = testKey, "metaq-test"
	if opts.Timing == (Timing{}) {
		opts.Timing = FastTiming()
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = 50 * time.Millisecond
	}
	if opts.Bind == "" {
		opts.Bind = "127.0.0.1:0"
	}
	opts.Logger = testutil.Logger(t, slog.LevelInfo)
	n.opts = opts
	n.start(t)
	return n
}

func (n *node) start(t *testing.T) {
	t.Helper()
	tp, err := New(n.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.t = tp
	// Restart on the same address, as a restarted bundle does.
	n.opts.Bind = tp.Addr()
	t.Cleanup(func() { tp.close(false) })
}

// threeSites starts a master in bj and slaves in hf and sh for brokerId 1,
// all joined.
func threeSites(t *testing.T) (bj, hf, sh *node) {
	t.Helper()
	bj = startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123", ReplAddr: "127.0.0.1:18124"})
	hf = startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123", Join: []string{bj.t.Addr()}})
	sh = startNode(t, Options{Site: "sh", Role: RoleSlave, BrokerID: 1, SlaveID: 1, ServeURL: "meta://127.0.0.1:38123", Join: []string{bj.t.Addr()}})
	for _, n := range []*node{bj, hf, sh} {
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			return wantAlive(n.t, "bj-1-m", "hf-1-s0", "sh-1-s1")
		})
	}
	return bj, hf, sh
}

func wantAlive(tp *Topology, names ...string) error {
	ms := map[string]Member{}
	for _, m := range tp.Members() {
		ms[m.Name] = m
	}
	for _, n := range names {
		if m, ok := ms[n]; !ok || m.State != StateAlive {
			return fmt.Errorf("%s sees %s as %v (known %v)", tp.Name(), n, m.State, ok)
		}
	}
	return nil
}

func memberOf(tp *Topology, name string) (Member, bool) {
	for _, m := range tp.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func TestGossipJoinMetadataDownUp(t *testing.T) {
	bj, hf, sh := threeSites(t)
	events, cancel := bj.t.Subscribe(1024)
	defer cancel()

	// Metadata is visible everywhere, health and lag changes propagate.
	m, _ := memberOf(sh.t, "hf-1-s0")
	if m.Meta.Site != "hf" || m.Meta.Role != RoleSlave || m.Meta.BrokerID != 1 || m.Meta.SlaveID != 0 ||
		m.Meta.ServeURL != "meta://127.0.0.1:28123" || !m.Healthy() {
		t.Fatalf("sh sees hf as %+v", m)
	}
	hf.health.set(Health{StorageOK: false, ReplicationOK: true})
	bj.lag.set([]georeplicator.GroupLag{{Group: "g-hf", SlaveID: 0, Connected: true,
		Partitions: []georeplicator.PartitionLag{{Topic: "t", Partition: 0, Bytes: 300, Messages: 3, Behind: 2 * time.Second}}}})
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		m, _ := memberOf(sh.t, "hf-1-s0")
		if m.Meta.Health.StorageOK {
			return fmt.Errorf("sh still sees hf storage ok")
		}
		b, _ := memberOf(sh.t, "bj-1-m")
		if len(b.Meta.Lag) != 1 || b.Meta.Lag[0].Bytes != 300 || b.Meta.Lag[0].Messages != 3 {
			return fmt.Errorf("sh sees bj lag %+v", b.Meta.Lag)
		}
		return nil
	})
	hf.health.set(Health{StorageOK: true, ReplicationOK: true})

	// hf crashes: bj declares it (and its site) down within the detection time.
	detect := bj.t.DetectionTime()
	died := time.Now()
	hf.t.close(false)
	testutil.Eventually(t, detect+2*time.Second, 10*time.Millisecond, func() error {
		if m, _ := memberOf(bj.t, "hf-1-s0"); m.State != StateDown {
			return fmt.Errorf("hf is %v", m.State)
		}
		if s := bj.t.Sites()["hf"]; s != StateDown {
			return fmt.Errorf("site hf is %v", s)
		}
		return nil
	})
	t.Logf("hf down after %v (detection bound %v)", time.Since(died), detect)

	// hf returns at its address: up again everywhere.
	hf.start(t)
	for _, n := range []*Topology{bj.t, sh.t} {
		testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
			err := wantAlive(n, "hf-1-s0")
			if err != nil {
				err = fmt.Errorf("%w; members %+v", err, n.Members())
			}
			return err
		})
	}
	if _, err := hf.t.Join(context.Background(), bj.t.Addr()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error { return wantAlive(hf.t, "bj-1-m", "sh-1-s1") })

	// The event stream saw hf down and up again, with site events. Suspect
	// is not required here: with three members sh's probe may find hf
	// first, and bj then hears of it only by gossip (TestSuspectThenDown
	// asserts suspicion where bj is the only prober).
	seen := map[string]bool{}
	timeout := time.After(2 * time.Second)
	for !(seen["node-down"] && seen["site-down"] && seen["node-up"] && seen["site-up"]) {
		select {
		case ev := <-events:
			if ev.Site == "hf" {
				seen[ev.Kind.String()] = true
			}
		case <-timeout:
			t.Fatalf("events seen for hf: %v", seen)
		}
	}
	t.Logf("hf events at bj: %v", seen)
}

func TestWrongKeyOrLabelCannotJoin(t *testing.T) {
	a := startNode(t, Options{Site: "bj", BrokerID: 1, ServeURL: "meta://127.0.0.1:1"})
	opts := Options{Site: "hf", Role: RoleSlave, BrokerID: 1, ServeURL: "meta://127.0.0.1:2", Bind: "127.0.0.1:0",
		Key: []byte("fedcba9876543210"), Label: "metaq-test", Timing: FastTiming()}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.close(false)
	if _, err := b.Join(context.Background(), a.t.Addr()); err == nil {
		t.Fatal("join with the wrong key succeeded")
	}
	opts.Key, opts.Label = testKey, "other-env"
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.close(false)
	if _, err := c.Join(context.Background(), a.t.Addr()); err == nil {
		t.Fatal("join with another label succeeded")
	}
	// Positive control: the same options with a's key and label join, so
	// the refusals above come from the key and the label.
	opts.Key, opts.Label = testKey, "metaq-test"
	opts.Site, opts.SlaveID = "sh", 1
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.close(false)
	if n, err := d.Join(context.Background(), a.t.Addr()); err != nil || n != 1 {
		t.Fatalf("join with the right key and label: %d %v", n, err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error { return wantAlive(a.t, "sh-1-s1") })
	for _, m := range a.t.Members() {
		if m.Meta.Site == "hf" {
			t.Fatalf("a refused member is in the pool: %+v", m)
		}
	}
}

// viewRecorder records which node applied which site's view last.
type viewRecorder struct {
	mu   sync.Mutex
	last map[string]string         // site -> node
	tgts map[string]map[int]string // site -> last targets
}

func (v *viewRecorder) writer(node string) func(site string) (ViewWriter, error) {
	return func(site string) (ViewWriter, error) {
		return ViewWriterFunc(func(ctx context.Context, targets map[int]string) error {
			v.mu.Lock()
			v.last[site], v.tgts[site] = node, targets
			v.mu.Unlock()
			return nil
		}), nil
	}
}

func (v *viewRecorder) get(site string) (string, map[int]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last[site], v.tgts[site]
}

// TestRunViewsKeeper: every bundle runs RunViews; each site's view is
// written by its own bundle while it is alive, by the pool's first alive
// member while the site is down, and the targets follow the site's health.
func TestRunViewsKeeper(t *testing.T) {
	bj, hf, sh := threeSites(t)
	bj.lag.set([]georeplicator.GroupLag{
		{Group: "g-hf", SlaveID: 0, Connected: true, Partitions: []georeplicator.PartitionLag{{Topic: "t"}}},
		{Group: "g-sh", SlaveID: 1, Connected: true, Partitions: []georeplicator.PartitionLag{{Topic: "t"}}},
	})
	rec := &viewRecorder{last: map[string]string{}, tgts: map[string]map[int]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, n := range []*node{bj, hf, sh} {
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			n.t.RunViews(ctx, rec.writer(n.t.Name()), []string{"gz"}, ViewOptions{Resync: 50 * time.Millisecond})
		}(n)
	}
	want := func(site, node string, target string) func() error {
		return func() error {
			got, tg := rec.get(site)
			if got != node || tg[1] != target {
				return fmt.Errorf("view %s written by %q with %v, want %q with %s", site, got, tg, node, target)
			}
			return nil
		}
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, want("hf", "hf-1-s0", "meta://127.0.0.1:28123"))
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, want("sh", "sh-1-s1", "meta://127.0.0.1:38123"))
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, want("bj", "bj-1-m", "meta://127.0.0.1:18123"))
	// gz has no bundle: the pool's first alive member keeps it, pointing at the master.
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, want("gz", "bj-1-m", "meta://127.0.0.1:18123"))

	hf.t.close(false)
	testutil.Eventually(t, bj.t.DetectionTime()+5*time.Second, 20*time.Millisecond, want("hf", "bj-1-m", "meta://127.0.0.1:18123"))
}

// TestSuspectThenDown stops a member without leaving (its listeners close,
// so it answers no probe) in a pool of two, where the survivor is the only
// prober: the survivor must deliver NodeSuspect and SiteSuspect for it, and
// only then NodeDown and SiteDown.
func TestSuspectThenDown(t *testing.T) {
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123", Join: []string{bj.t.Addr()}})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return wantAlive(bj.t, "bj-1-m", "hf-1-s0") })
	events, cancel := bj.t.Subscribe(1024)
	defer cancel()

	hf.t.close(false)
	var order []string
	timeout := time.After(bj.t.DetectionTime() + 5*time.Second)
	for len(order) == 0 || order[len(order)-1] != "site-down" {
		select {
		case ev := <-events:
			if ev.Site != "hf" {
				continue
			}
			if len(order) == 0 && (ev.Kind == NodeUp || ev.Kind == SiteUp) {
				// hf's join, delivered after Subscribe when the event
				// queue runs behind (it does while logs are written).
				continue
			}
			order = append(order, ev.Kind.String())
			if ev.Kind == NodeSuspect {
				if ev.Member.Name != "hf-1-s0" || ev.Member.State != StateSuspect {
					t.Fatalf("suspect event for %+v", ev.Member)
				}
			}
		case <-timeout:
			t.Fatalf("events for hf: %v", order)
		}
	}
	want := []string{"node-suspect", "site-suspect", "node-down", "site-down"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("events for hf %v, want %v", order, want)
	}
	if m, _ := memberOf(bj.t, "hf-1-s0"); m.State != StateDown {
		t.Fatalf("hf finally %v", m.State)
	}
}

// Start returns only once the bundle sees itself: a report or route asked for
// right after Start must not find an empty pool.
func TestStartSeesItself(t *testing.T) {
	for i := 0; i < 20; i++ {
		n := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
		if err := wantAlive(n.t, "bj-1-m"); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		n.t.Close()
	}
}

// TestSubscribeAfterChange: a subscriber gets the events of changes made
// after it subscribed, not of one already in the member table when it
// subscribed (else "see the table, then follow the events" reads a member
// arriving twice). bj's event goroutine is held between recording hf's
// arrival and delivering its event; the test subscribes in that gap, then
// makes hf change its metadata: the first hf event it gets is that update.
func TestSubscribeAfterChange(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123",
		OnEvent: func(ev Event) {
			if ev.Site == "hf" && ev.Kind == NodeUp {
				once.Do(func() {
					close(held)
					<-release
				})
			}
		}})
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Join: []string{bj.t.Addr()}})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("bj never saw hf arrive")
	}
	if err := wantAlive(bj.t, "hf-1-s0"); err != nil {
		close(release)
		t.Fatal(err)
	}
	events, cancel := bj.t.Subscribe(64)
	defer cancel()
	close(release)

	hf.health.set(Health{StorageOK: false, ReplicationOK: true})
	hf.t.Refresh()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Site != "hf" {
				continue
			}
			if ev.Kind != NodeUpdate || ev.Member.Meta.Health.StorageOK {
				t.Fatalf("first event for hf after subscribing: %v, want its metadata update", ev.Kind)
			}
			return
		case <-deadline:
			t.Fatal("no event for hf's metadata update")
		}
	}
}

// TestMetadataChangedDuringStartIsGossiped: metadata that changes while
// memberlist.Create runs, after it read NodeMeta and before Start hands the
// memberlist to the refresh loop, still reaches the peers. The refresh loop
// then stores the new copy but has no memberlist to announce it with; the
// test puts hf in that state (new health stored, memberlist announcing the
// old) and lets the loop run: bj must see the new health.
func TestMetadataChangedDuringStartIsGossiped(t *testing.T) {
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Join: []string{bj.t.Addr()}})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return wantAlive(bj.t, "hf-1-s0") })

	hf.health.set(Health{StorageOK: true, ReplicationOK: false})
	b, err := EncodeMeta(hf.t.computeMeta())
	if err != nil {
		t.Fatal(err)
	}
	hf.t.meta.Store(&b) // what the loop stored while it had no memberlist
	hf.t.Refresh()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if m, _ := memberOf(bj.t, "hf-1-s0"); m.Meta.Health.ReplicationOK {
			return fmt.Errorf("bj still sees hf's replication ok")
		}
		return nil
	})
}

// TestAddrWhileMetadataChanges: Addr is read (the bundle logs and serves it)
// while the refresh loop gossips changed metadata with UpdateNode, which
// rewrites memberlist's local node; under -race this must stay quiet.
func TestAddrWhileMetadataChanges(t *testing.T) {
	n := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	want := n.t.Addr()
	if want == "" {
		t.Fatal("Addr is empty after Start")
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ok := false
		for {
			select {
			case <-done:
				return
			default:
			}
			ok = !ok
			n.health.set(Health{StorageOK: ok, ReplicationOK: true})
			n.t.Refresh()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	updates := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && updates < 20 {
		if got := n.t.Addr(); got != want {
			t.Fatalf("Addr changed from %s to %s", want, got)
		}
		if m, ok := memberOf(n.t, "bj-1-m"); ok && !m.Meta.Health.StorageOK {
			updates++
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	if updates == 0 {
		t.Fatal("the metadata never changed: the test did not exercise UpdateNode")
	}
}
