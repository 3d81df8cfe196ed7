package georeplicator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// site is one site of a failover test: a store, its identity, and either a
// Shipper (master) or a Receiver (slave).
type site struct {
	t     *testing.T
	k     storeKind
	name  string
	dir   string
	st    testStore
	id    *IdentityStore
	sh    *Shipper
	rc    *Receiver
	proxy *netproxy.Proxy // in front of sh: what the other sites dial
	fence atomic.Pointer[Fence]
	// master is where this site's receiver dials (a proxy's address).
	master atomic.Pointer[string]
	// onPromote, when set before follow, is the receiver's OnPromote.
	onPromote func(pos int64)
}

func newSite(t *testing.T, k storeKind, root, name string) *site {
	t.Helper()
	s := &site{t: t, k: k, name: name, dir: filepath.Join(root, name)}
	s.st = k.open(t, filepath.Join(s.dir, "store"))
	id, err := OpenIdentity(filepath.Join(s.dir, "replication.identity"))
	if err != nil {
		t.Fatal(err)
	}
	s.id = id
	t.Cleanup(func() {
		s.stopSlave()
		s.stopMaster()
		if s.proxy != nil {
			s.proxy.Close()
		}
		k.close(s.st)
	})
	return s
}

const (
	testKeepalive = 50 * time.Millisecond
	testLease     = 400 * time.Millisecond
)

// startMaster starts a Shipper at the site's identity; sites > 1 holds a lease.
func (s *site) startMaster(sites int, onFence func(*site, Fence)) {
	s.t.Helper()
	id := s.id.Get()
	sh, err := NewShipper(ShipperOptions{Listen: "127.0.0.1:0", BrokerID: 7, Source: s.st, Keepalive: testKeepalive,
		StuckAfter: time.Hour, FrameBytes: 16 << 10, LogID: id.LogID, Generation: id.Generation, PromotionEnds: id.Ends, History: id.History,
		Sites: sites, Lease: testLease, OnFence: func(f Fence) {
			s.fence.Store(&f)
			if onFence != nil {
				onFence(s, f)
			}
		}})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.sh = sh
	if s.proxy == nil {
		if s.proxy, err = netproxy.New(sh.Addr()); err != nil {
			s.t.Fatal(err)
		}
	} else {
		s.proxy.SetTarget(sh.Addr())
	}
}

func (s *site) stopMaster() {
	if s.sh != nil {
		s.sh.Close()
		s.sh = nil
		s.fence.Store(nil)
	}
}

// confirmed reports whether this site is a master that may acknowledge writes.
func (s *site) confirmed() bool {
	f := s.fence.Load()
	return f != nil && !f.Fenced
}

// follow makes the site a slave of m (through m's proxy).
func (s *site) follow(m *site) {
	s.t.Helper()
	addr := m.proxy.Addr()
	s.master.Store(&addr)
	if s.rc != nil {
		return
	}
	rc, err := NewReceiver(ReceiverOptions{Sink: s.st, BrokerID: 7, SlaveID: 1, Group: s.name, MaxDelay: 50 * time.Millisecond,
		Resolver: ResolverFunc(func(context.Context) (string, error) { return *s.master.Load(), nil }),
		Identity: s.id, CheckpointFile: filepath.Join(s.dir, "replication.checkpoint"), OnPromote: s.onPromote,
		CheckpointInterval: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := rc.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.rc = rc
}

func (s *site) stopSlave() {
	if s.rc != nil {
		s.rc.Close()
		s.rc = nil
	}
}

// promote makes a slave site master at the next generation.
func (s *site) promote(sites int, onFence func(*site, Fence)) {
	s.t.Helper()
	s.stopSlave()
	ends := map[string]int64{}
	for _, p := range s.st.Partitions() {
		ends[PartKey(p.Topic, p.Partition)] = p.Max
	}
	if err := s.id.Promote(s.id.Generation()+1, ends); err != nil {
		s.t.Fatal(err)
	}
	// As internal/bundle's promotion does: the checkpoint is a position in
	// the old master's log, which this log leaves.
	if err := os.Remove(filepath.Join(s.dir, "replication.checkpoint")); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.t.Fatal(err)
	}
	s.startMaster(sites, onFence)
}

// sameAs checks that every partition of m is byte-identical here.
func (s *site) sameAs(m *site) error {
	parts := m.st.Partitions()
	if len(parts) == 0 {
		return errors.New("master has no partitions")
	}
	for _, p := range parts {
		mlo, mhi, msum, _, err := partitionDigest(m.st, p.Topic, p.Partition)
		if err != nil {
			return fmt.Errorf("%s %s-%d: %v", m.name, p.Topic, p.Partition, err)
		}
		lo, hi, sum, _, err := partitionDigest(s.st, p.Topic, p.Partition)
		if err != nil {
			return fmt.Errorf("%s %s-%d: %v", s.name, p.Topic, p.Partition, err)
		}
		if lo != mlo || hi != mhi || sum != msum {
			return fmt.Errorf("%s-%d: %s [%d,%d) %s [%d,%d) same bytes %t", p.Topic, p.Partition, s.name, lo, hi, m.name, mlo, mhi, sum == msum)
		}
	}
	return nil
}

func putSome(t *testing.T, s *site, n int, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, p := range defaultParts() {
			s.k.put(t, s.st, p.Topic, p.Partition, [][]byte{fmt.Appendf(nil, "%s-%d-%s-%d", tag, i, p.Topic, p.Partition)})
		}
	}
}

// TestFollowNewMasterByPartitionEnds: after hf is promoted, gz (which
// followed bj's log) resumes on hf's log by its partition ends, with
// nothing duplicated or missing, although hf's log positions differ from
// bj's.
func TestFollowNewMasterByPartitionEnds(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		root := t.TempDir()
		bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
		// hf's log gets a partition of its own first, so its positions
		// cannot line up with bj's.
		k.put(t, hf.st, "hf-local", 0, [][]byte{make([]byte, 3000)})
		bj.startMaster(0, nil)
		putSome(t, bj, 40, "bj")
		hf.follow(bj)
		gz.follow(bj)
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
		// gz is behind hf when bj is lost: it missed the last records.
		gz.stopSlave()
		putSome(t, bj, 5, "bj-late")
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
		bj.stopMaster()

		hf.promote(0, nil)
		putSome(t, hf, 10, "hf")
		gz.follow(hf)
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return gz.sameAs(hf) })
		st := gz.rc.Status()
		if st.LastError != "" && !strings.Contains(st.LastError, "connection") && !strings.Contains(st.LastError, "refused") {
			t.Fatalf("gz replication error: %s", st.LastError)
		}
		if got := gz.id.Generation(); got != 1 {
			t.Fatalf("gz knows generation %d, want 1", got)
		}
		// gz's checkpoint now refers to hf's log.
		if _, lg, err := loadCheckpoint(filepath.Join(gz.dir, "replication.checkpoint")); err != nil || lg != hf.id.LogID() {
			testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
				if _, lg, err := loadCheckpoint(filepath.Join(gz.dir, "replication.checkpoint")); err != nil || lg != hf.id.LogID() {
					return fmt.Errorf("checkpoint log %q (%v), want hf's %q", lg, err, hf.id.LogID())
				}
				return nil
			})
		}
	})
}

// TestCutOffMasterStopsAcknowledging: bj, cut off from hf and gz but alive,
// loses its lease and is fenced; hf, promoted, is confirmed only after bj's
// lease ran out; at no moment are both confirmed.
func TestCutOffMasterStopsAcknowledging(t *testing.T) {
	k := kinds()[1] // the lease does not depend on the store
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	var (
		mu          sync.Mutex
		overlaps    []string
		promotedAt  time.Time
		confirmedAt time.Time // hf's first confirmation
	)
	sites := []*site{bj, hf, gz}
	check := func(s *site, f Fence) {
		if f.Fenced {
			return
		}
		if s == hf {
			mu.Lock()
			if confirmedAt.IsZero() {
				confirmedAt = time.Now()
			}
			mu.Unlock()
		}
		for _, o := range sites {
			if o != s && o.confirmed() {
				mu.Lock()
				overlaps = append(overlaps, fmt.Sprintf("%s confirmed while %s is", s.name, o.name))
				mu.Unlock()
			}
		}
	}
	bj.startMaster(3, check)
	hf.follow(bj)
	gz.follow(bj)
	putSome(t, bj, 5, "bj")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !bj.confirmed() {
			return fmt.Errorf("bj not confirmed: %+v", bj.sh.Fence())
		}
		return nil
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // watches for two confirmed masters between callbacks
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if bj.confirmed() && hf.confirmed() {
				mu.Lock()
				overlaps = append(overlaps, "bj and hf confirmed together")
				mu.Unlock()
			}
		}
	}()
	// Cut bj off: nothing reaches it or leaves it any more (a black hole,
	// so it notices only by the lease), but it runs on. gz moves to hf at
	// once, while bj still counts gz's last ack.
	bj.proxy.SetRefuse(true)
	bj.proxy.SetStall(true)
	mu.Lock()
	promotedAt = time.Now()
	mu.Unlock()
	hf.promote(3, check)
	gz.stopSlave()
	gz.follow(hf)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if bj.confirmed() {
			return errors.New("bj still confirmed")
		}
		if !hf.confirmed() {
			return fmt.Errorf("hf not confirmed: %+v", hf.sh.Fence())
		}
		return nil
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("two masters confirmed at once: %v", overlaps)
	}
	// The promoted master waits out the lease bj may still hold (bj
	// counts acks up to the moment it was cut off, shortly before).
	if d := confirmedAt.Sub(promotedAt); d < testLease {
		t.Fatalf("hf confirmed %s after its promotion, before a lease (%s) passed", d, testLease)
	}
	if f := bj.sh.Fence(); !f.Fenced || f.SteppedDown {
		t.Fatalf("bj fence %+v, want a lost lease", f)
	}
}

// TestMasterStepsDownOnNewerGeneration: a slave that knows a newer
// generation than its master's is refused and the master steps down for
// good; gossip or ZooKeeper do the same through ObserveGeneration.
func TestMasterStepsDownOnNewerGeneration(t *testing.T) {
	k := kinds()[1]
	root := t.TempDir()
	bj, hf := newSite(t, k, root, "bj"), newSite(t, k, root, "hf")
	if _, err := hf.id.Observe(2); err != nil {
		t.Fatal(err)
	}
	var fences atomic.Int32
	bj.startMaster(0, func(*site, Fence) { fences.Add(1) })
	putSome(t, bj, 2, "bj")
	hf.follow(bj)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if f := bj.sh.Fence(); !f.SteppedDown || f.Newer != 2 {
			return fmt.Errorf("bj fence %+v", f)
		}
		if st := hf.rc.Status(); !strings.Contains(st.LastError, "older than the slave's 2") {
			return fmt.Errorf("hf error %q", st.LastError)
		}
		return nil
	})
	if len(hf.st.Partitions()) != 0 {
		t.Fatal("hf applied data from a stale master")
	}
	bj.sh.ObserveGeneration(3, "gossip") // a step-down is final: no second report
	if n := fences.Load(); n != 1 {
		t.Fatalf("%d fence reports, want 1", n)
	}
	// A slave that knows generation 2 does not follow a master of generation 1.
	gz := newSite(t, k, root, "gz")
	gz.id.Promote(1, nil)
	gz.startMaster(0, nil)
	hf.stopSlave()
	hf.follow(gz)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if st := hf.rc.Status(); !strings.Contains(st.LastError, "older than the slave's 2") {
			return fmt.Errorf("hf error %q", st.LastError)
		}
		return nil
	})
}

// TestFailbackCutsUnreplicatedTail: bj stored records hf never got, then
// hf was promoted and took writes of its own at the same offsets. bj,
// rejoining as a slave of hf, saves those records aside, cuts them (for
// good: they do not come back when its store reopens), and then holds
// exactly hf's bytes.
func TestFailbackCutsUnreplicatedTail(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf := newSite(t, k, root, "bj"), newSite(t, k, root, "hf")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
	hf.stopSlave()
	putSome(t, bj, 5, "bj-unreplicated") // acknowledged at bj only
	bj.stopMaster()

	hf.promote(0, nil)
	putSome(t, hf, 7, "hf")
	bj.follow(hf)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := bj.sameAs(hf); err != nil {
			return fmt.Errorf("%w (bj: %+v)", err, bj.rc.Status())
		}
		return nil
	})
	if got, want := bj.rc.Status().Unreplicated, int64(5*len(defaultParts())); got != want {
		t.Fatalf("%d records saved aside, want %d", got, want)
	}
	tails, err := ListTails(filepath.Join(bj.dir, "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tails) != len(defaultParts()) {
		t.Fatalf("%d tail files, want %d: %+v", len(tails), len(defaultParts()), tails)
	}
	for _, f := range tails {
		data, _ := os.ReadFile(f.Path)
		if f.Records != 5 || f.Generation != 1 || !bytes.Contains(data, []byte("bj-unreplicated-4-"+f.Topic)) {
			t.Fatalf("tail %+v holds %q", f, data)
		}
	}
	bj.stopSlave()
	k.close(bj.st)
	bj.st = k.open(t, filepath.Join(bj.dir, "store"))
	if err := bj.sameAs(hf); err != nil {
		t.Fatalf("after reopening bj's store: %v", err)
	}
}

// TestHandover: bj, its writes stopped, waits until hf holds its whole
// durable log and hands mastership over; hf becomes master at generation
// 1 with exactly bj's bytes, and gz follows hf by partition ends.
func TestHandover(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		root := t.TempDir()
		bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
		bj.startMaster(0, nil)
		putSome(t, bj, 30, "bj")
		var promoted sync.WaitGroup
		var handedAt atomic.Int64
		hf.onPromote = func(pos int64) {
			promoted.Add(1) // before handedAt: the test waits once it sees handedAt
			handedAt.Store(pos)
			go func() { // waited on below
				defer promoted.Done()
				hf.promote(0, nil)
			}()
		}
		hf.follow(bj)
		gz.follow(bj)
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
		if _, err := bj.sh.Handover(context.Background(), func(g string, _ int) bool { return g == "nobody" },
			func() (int64, error) { return 0, nil }); err == nil {
			t.Fatal("handover to no slave succeeded")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		name, err := bj.sh.Handover(ctx, func(g string, _ int) bool { return g == "hf" }, func() (int64, error) {
			_, d := bj.st.LogBounds()
			return d, nil
		})
		if err != nil || !strings.HasPrefix(name, "hf/") {
			t.Fatalf("handover: %q %v", name, err)
		}
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
			if handedAt.Load() == 0 {
				return errors.New("hf not told to take over yet")
			}
			return nil
		})
		promoted.Wait()
		if g := hf.id.Generation(); g != 1 {
			t.Fatalf("hf at generation %d", g)
		}
		if _, d := bj.st.LogBounds(); handedAt.Load() != d {
			t.Fatalf("handed over at %d, bj's durable end is %d", handedAt.Load(), d)
		}
		if err := hf.sameAs(bj); err != nil {
			t.Fatalf("hf after the handover: %v", err)
		}
		bj.stopMaster()
		gz.follow(hf)
		putSome(t, hf, 3, "hf")
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return gz.sameAs(hf) })
	})
}

// TestHandoverRefusedWithDivergedPartition: hf holds a record of its own in
// one partition, which therefore stopped replicating as diverged; its log
// position still reaches bj's end (the others went on). Told to take over,
// it refuses, says why, and bj's records stay where they are. Found by the
// fault schedules (internal/faultsched, seed 900008): hf took over in a
// switchover with partitions diverged and behind, and the old master's
// acknowledged records there were lost to the new generation.
func TestHandoverRefusedWithDivergedPartition(t *testing.T) {
	k := kinds()[0]
	root := t.TempDir()
	bj, hf := newSite(t, k, root, "bj"), newSite(t, k, root, "hf")
	parts := defaultParts()
	bad := parts[0]
	if _, err := hf.st.(*store.Store).AppendRaw(t.Context(), bad.Topic, bad.Partition, 0, makeRecord(1, []byte("a stray record here"))); err != nil {
		t.Fatal(err)
	}
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	var promoted atomic.Bool
	hf.onPromote = func(int64) { promoted.Store(true) }
	hf.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, end := bj.st.LogBounds()
		if st := hf.rc.Status(); len(st.Diverged) != 1 || st.AppliedPos < end {
			return fmt.Errorf("hf: diverged %v, applied %d", st.Diverged, st.AppliedPos)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := bj.sh.Handover(ctx, func(g string, _ int) bool { return g == "hf" }, func() (int64, error) {
		_, d := bj.st.LogBounds()
		return d, nil
	}); err != nil {
		t.Fatalf("handover: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if promoted.Load() {
			return nil // reported below
		}
		if e := hf.rc.Status().LastError; !strings.Contains(e, "refused the mastership") || !strings.Contains(e, fmt.Sprintf("%s-%d", bad.Topic, bad.Partition)) {
			return fmt.Errorf("hf's last error: %q", e)
		}
		return nil
	})
	if promoted.Load() {
		t.Fatal("hf took mastership over with a diverged partition")
	}
}

// TestFailbackCutsDamagedTail: bj's unreplicated tail holds a range bj lost
// to disk damage. Rejoining hf, bj saves aside every readable run of the
// tail (each in a file of its own, at its offsets), cuts the tail with the
// lost range in it, and then follows hf; before, the cut stopped at the
// damaged range and bj followed no master for good (fault schedule seed
// 900014: bj's chaos-async-0 [4592,4621)).
func TestFailbackCutsDamagedTail(t *testing.T) {
	defer func(n int64) { fileSegmentBytes = n }(fileSegmentBytes)
	fileSegmentBytes = 8 << 10
	k := kinds()[0] // the file store: the cut and the damage are the store's
	root := t.TempDir()
	bj, hf := newSite(t, k, root, "bj"), newSite(t, k, root, "hf")
	bj.startMaster(0, nil)
	putSome(t, bj, 2, "bj")
	hf.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
	hf.stopSlave()
	putSome(t, bj, 200, "bj-unreplicated") // acknowledged at bj only
	bj.stopMaster()

	// A sealed segment of the tail (every segment after the first holds
	// only records hf never had) is damaged.
	k.close(bj.st)
	storeDir := filepath.Join(bj.dir, "store")
	segs, _ := filepath.Glob(filepath.Join(storeDir, "log", "*.log"))
	if len(segs) < 4 {
		t.Fatalf("want several segments, have %v", segs)
	}
	b, err := os.ReadFile(segs[2])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+64; i++ {
		b[i] ^= 0xFF
	}
	if err := os.WriteFile(segs[2], b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(storeDir, "checkpoint"))
	bj.st = k.open(t, storeDir)

	hf.promote(0, nil)
	ends := map[pkey]int64{}
	for _, p := range hf.st.Partitions() {
		ends[pkey{p.Topic, p.Partition}] = p.Max
	}
	// What bj serves beyond hf's ends, by offset, read around the damage.
	want := map[pkey]map[int64][]byte{}
	lost := 0
	for _, p := range bj.st.Partitions() {
		k := pkey{p.Topic, p.Partition}
		runs, err := servedRuns(bj.st, p.Topic, p.Partition)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = map[int64][]byte{}
		for off, run := range runs {
			if off < ends[k] {
				if off+int64(len(run)) <= ends[k] {
					continue
				}
				run, off = run[ends[k]-off:], ends[k]
			}
			want[k][off] = run
		}
		if len(runs) > 1 {
			lost++
		}
	}
	if lost == 0 {
		t.Fatal("no damaged range in bj's tail")
	}
	putSome(t, hf, 3, "hf")
	bj.follow(hf)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := bj.sameAs(hf); err != nil {
			return fmt.Errorf("%w (bj: %+v)", err, bj.rc.Status())
		}
		return nil
	})
	tails, err := ListTails(filepath.Join(bj.dir, "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[pkey]map[int64][]byte{}
	for _, f := range tails {
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		k := pkey{f.Topic, f.Partition}
		if got[k] == nil {
			got[k] = map[int64][]byte{}
		}
		if f.To != f.From+int64(len(data)) || f.Generation != 1 {
			t.Fatalf("tail %+v holds %d bytes", f, len(data))
		}
		got[k][f.From] = data
	}
	for k, runs := range want {
		for off, run := range runs {
			if !bytes.Equal(got[k][off], run) {
				t.Fatalf("%s-%d: the run bj served at %d (%d bytes) is not saved aside at that offset: %d bytes", k.Topic, k.Partition, off, len(run), len(got[k][off]))
			}
		}
		if len(got[k]) != len(runs) {
			t.Fatalf("%s-%d: %d tail files, want %d", k.Topic, k.Partition, len(got[k]), len(runs))
		}
	}
}
