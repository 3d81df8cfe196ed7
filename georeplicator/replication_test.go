package georeplicator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

func TestReplicateConverges(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.load(200, defaultParts()) // backlog before the slave exists
		g.startMaster()
		g.startSlave()
		done := make(chan struct{})
		go func() { defer close(done); g.load(300, defaultParts()) }() // live load
		<-done
		// A topic that appears while the slave runs is created on it too.
		g.load(20, []pkey{{"brand-new", 3}})
		g.waitConverged(20 * time.Second)
		g.waitLagZero(10 * time.Second)

		st := g.rc.Status()
		if !st.Connected || st.Partitions != len(g.master.Partitions()) || st.LastError != "" {
			t.Fatalf("slave status %+v", st)
		}
		lag := g.sh.Lag()
		if len(lag) != 1 || lag[0].Group != "g1" || !lag[0].Connected || lag[0].Stuck || lag[0].Frames == 0 {
			t.Fatalf("lag %+v", lag)
		}
		if lag[0].WireBytes >= lag[0].RawBytes {
			t.Fatalf("zstd did not shrink log-like data: wire %d raw %d", lag[0].WireBytes, lag[0].RawBytes)
		}
		lines := g.sh.StatsLines()
		if len(lines) != 1+len(g.master.Partitions()) || !strings.HasPrefix(lines[0], "g1 slave_id 1 connected true") ||
			!strings.Contains(lines[1], "lag_bytes 0 lag_messages 0") {
			t.Fatalf("stats lines %q", lines)
		}
		if sl := g.rc.StatsLines(); !strings.Contains(strings.Join(sl, "\n"), "connected true") {
			t.Fatalf("slave stats %q", sl)
		}
	})
}

func TestCodecsConverge(t *testing.T) {
	for _, c := range []struct {
		mode  Mode
		delay time.Duration // one way, added by the proxy
		want  string
	}{
		{ModeNone, 0, "none"}, {ModeS2, 0, "s2"}, {ModeZstd, 0, "zstd"},
		// auto: a LAN round trip picks s2, a WAN one zstd. The LAN threshold is
		// raised so a busy test machine's loopback still counts as a LAN (a
		// smoothed loopback RTT of 46 ms was seen at load average 60), and
		// the WAN delay is well above it.
		{ModeAuto, 0, "s2"}, {ModeAuto, 200 * time.Millisecond, "zstd"},
	} {
		t.Run(fmt.Sprintf("%s/%v", c.mode, c.delay), func(t *testing.T) {
			g := newRig(t, kinds()[1])
			g.rcOpts.Compression = c.mode
			g.shOpts.AutoLANRTT = 250 * time.Millisecond
			g.startMaster()
			g.proxy.SetDelay(c.delay)
			g.startSlave()
			// Let the first RTT sample arrive: auto decides by it.
			testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
				if l := g.sh.Lag(); len(l) == 0 || l[0].RTT == 0 {
					return errors.New("no RTT sample yet")
				}
				return nil
			})
			g.load(300, defaultParts())
			g.waitConverged(20 * time.Second)
			l := g.sh.Lag()[0]
			if l.Mode != string(c.mode) || l.Codec != c.want {
				t.Fatalf("mode %q codec %q (rtt %v), want mode %q codec %q", l.Mode, l.Codec, l.RTT, c.mode, c.want)
			}
		})
	}
}

func TestCutMidFrame(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.startMaster()
		g.startSlave()
		for i := 0; i < 5; i++ {
			// Cut the master→slave stream a few KB into the next frame, and once
			// the slave→master direction (inside an ack).
			g.proxy.CutAfter(netproxy.Downstream, int64(3000+i*7919))
			if i == 2 {
				g.proxy.CutAfter(netproxy.Upstream, 50)
			}
			g.load(100, defaultParts())
			time.Sleep(30 * time.Millisecond)
		}
		g.waitConverged(20 * time.Second)
		if g.proxy.Cuts() == 0 || g.rc.Status().Reconnects == 0 {
			t.Fatalf("no cut happened: cuts %d reconnects %d", g.proxy.Cuts(), g.rc.Status().Reconnects)
		}
	})
}

func TestCorruptFrameIsDroppedAndResent(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.rcOpts.Compression = ModeNone // flipped byte lands in payload with high probability either way
		g.startMaster()
		g.startSlave()
		g.load(50, defaultParts())
		g.waitConverged(10 * time.Second)
		// Flip one byte well inside the coming stream: a payload byte
		// (frames are up to 64 KiB, headers 32 bytes).
		g.proxy.FlipAfter(netproxy.Downstream, 20000)
		g.load(400, defaultParts())
		g.waitConverged(20 * time.Second)
		if g.proxy.Flips() != 1 {
			t.Fatalf("flips %d", g.proxy.Flips())
		}
		st := g.rc.Status()
		if st.Corrupt < 1 {
			t.Fatalf("corrupt frame not detected: %+v", st)
		}
		if st.Rewinds < 1 && st.Reconnects < 1 {
			t.Fatalf("corrupt frame not re-requested: %+v", st)
		}
	})
}

func TestMasterRestart(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.startMaster()
		g.startSlave()
		g.load(200, defaultParts())
		g.waitConverged(10 * time.Second)
		g.stopMaster(true)
		g.load(100, defaultParts()) // written while the master's replication is down

		// Progress survives the master's restart: before the slave is back,
		// the restarted master already knows it and how far behind it is.
		g.proxy.SetRefuse(true)
		g.startMaster()
		testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
			lag := g.sh.Lag()
			if len(lag) != 1 || lag[0].Connected || lag[0].Bytes == 0 || lag[0].Messages == 0 || lag[0].AppliedPos <= 0 {
				return fmt.Errorf("lag after restart %+v", lag)
			}
			return nil
		})
		g.proxy.SetRefuse(false)
		g.load(100, defaultParts())
		g.waitConverged(20 * time.Second)
		g.waitLagZero(10 * time.Second)
	})
}

func TestSlaveRestart(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.startMaster()
		g.startSlave()
		g.load(100, defaultParts())
		g.waitConverged(10 * time.Second)
		var cp int64
		testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
			var err error
			if cp, _, err = loadCheckpoint(g.rcOpts.CheckpointFile); err != nil || cp != g.rc.Status().AppliedPos {
				return fmt.Errorf("checkpoint %d, applied %d, %v", cp, g.rc.Status().AppliedPos, err)
			}
			return nil
		})
		g.load(200, defaultParts())
		g.waitConverged(10 * time.Second)
		g.stopSlave(true)
		// Pretend the slave crashed right after an old checkpoint: its store is
		// ahead of the cursor, so the master resends entries the slave has.
		if err := saveCheckpoint(g.rcOpts.CheckpointFile, cp, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		g.load(100, defaultParts())
		g.startSlave()
		g.load(100, defaultParts())
		g.waitConverged(20 * time.Second)
		if st := g.rc.Status(); st.Skipped == 0 {
			t.Fatalf("expected verified-and-skipped entries after restart, status %+v", st)
		}
	})
}

func TestSlaveRestartMidStream(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		g := newRig(t, k)
		g.startMaster()
		g.proxy.SetRate(400 << 10) // slow link so the stop lands mid-stream
		g.startSlave()
		g.load(600, defaultParts())
		time.Sleep(150 * time.Millisecond)
		g.stopSlave(true)
		g.proxy.SetRate(0)
		g.startSlave()
		g.waitConverged(20 * time.Second)
	})
}

func TestSlaveStartsEmptyAfterRetention(t *testing.T) {
	forKinds(t, func(t *testing.T, k storeKind) {
		// Small segments so retention has whole segments to remove.
		defer func(n int64) { fileSegmentBytes = n }(fileSegmentBytes)
		fileSegmentBytes = 16 << 10
		g := newRig(t, k)
		g.load(400, defaultParts())
		k.retain(t, g.master)
		first, _ := g.master.LogBounds()
		if first == 0 {
			t.Fatal("retention did not move the log start")
		}
		g.startMaster()
		g.startSlave()
		g.load(100, defaultParts())
		g.waitConverged(20 * time.Second)
		for _, mp := range g.master.Partitions() {
			sp, _ := g.slave.Partition(mp.Topic, mp.Partition)
			if sp.Min != mp.Min {
				t.Fatalf("%s-%d: slave min %d, master min %d", mp.Topic, mp.Partition, sp.Min, mp.Min)
			}
		}
	})
}

func TestSlaveBehindRetentionRestartsAtFirst(t *testing.T) {
	k := kinds()[1]
	g := newRig(t, k)
	g.startMaster()
	g.startSlave()
	g.load(100, defaultParts())
	g.waitConverged(10 * time.Second)
	g.stopSlave(false)
	g.load(400, defaultParts())
	// Retention removes more than the slave has: its position is gone.
	m := g.master.(*memStore)
	_, d := m.LogBounds()
	m.truncate(d - 1000)
	g.startSlave()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := g.rc.Status(); !st.Truncated || st.LastError == "" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// Partitions whose data was cut out can not continue without a gap: the
	// slave must report divergence, never write around the hole.
	if e := g.rc.Status().LastError; !strings.Contains(e, "diverged") || !strings.Contains(e, "gap") {
		t.Fatalf("expected a gap error, got %q", g.rc.Status().LastError)
	}
}

func TestLagStuckAndRecovery(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.shOpts.StuckAfter = 300 * time.Millisecond
	g.startMaster()
	g.startSlave()
	g.load(50, defaultParts())
	g.waitConverged(10 * time.Second)
	g.waitLagZero(5 * time.Second)
	g.proxy.SetRefuse(true)
	g.proxy.CutAll()
	// Equal-size messages so the message count is exact.
	body := make([]byte, 100)
	for i := 0; i < 10; i++ {
		g.put("orders", 0, body, body, body)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		l := g.sh.Lag()[0]
		var p PartitionLag
		for _, x := range l.Partitions {
			if x.Topic == "orders" && x.Partition == 0 {
				p = x
			}
		}
		if l.Connected || !l.Stuck || !p.Stuck || p.Messages != 30 || p.Bytes != 30*120 || p.Behind < 300*time.Millisecond {
			return fmt.Errorf("group %+v partition %+v", l, p)
		}
		return nil
	})
	g.proxy.SetRefuse(false)
	g.waitConverged(10 * time.Second)
	g.waitLagZero(5 * time.Second)
	if l := g.sh.Lag()[0]; l.Stuck || l.Behind != 0 {
		t.Fatalf("still stuck after catching up: %+v", l)
	}
}

func TestAutoSyncMasterConfig(t *testing.T) {
	g := newRig(t, kinds()[1])
	ini := []byte("[system]\nbrokerId=7\n;; comment kept byte for byte\n[topic=orders]\nnumPartitions=2\n")
	g.shOpts.ConfigBytes = func() ([]byte, error) { return ini, nil }
	var mu sync.Mutex
	var got [][]byte
	g.rcOpts.AutoSyncMasterConfig = true
	g.rcOpts.OnMasterConfig = func(ctx context.Context, b []byte) error {
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		return nil
	}
	g.startMaster()
	g.startSlave()
	g.load(10, defaultParts())
	g.waitConverged(10 * time.Second)
	g.proxy.CutAll() // every (re)connect fetches the config again, as MetaQ does
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 2 {
			return fmt.Errorf("%d config deliveries", len(got))
		}
		for _, b := range got {
			if string(b) != string(ini) {
				return fmt.Errorf("config %q", b)
			}
		}
		return nil
	})
}

func TestRefusesOtherBroker(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.rcOpts.BrokerID = 8
	g.startMaster()
	g.startSlave()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if e := g.rc.Status().LastError; !strings.Contains(e, "brokerId 8 differs") {
			return fmt.Errorf("last error %q", e)
		}
		return nil
	})
}

func TestBandwidthCap(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.shOpts.BandwidthBytesPerSec = 1 << 20
	g.rcOpts.Compression = ModeNone
	body := make([]byte, 1000)
	for i := 0; i < 1500; i++ { // ~1.5 MB
		g.put("bulk", 0, body)
	}
	g.startMaster()
	start := time.Now()
	g.startSlave()
	g.waitConverged(20 * time.Second)
	// The token bucket starts full with one frame, so ~1.5 MB at 1 MB/s
	// cannot take much under 1.3 s.
	if el := time.Since(start); el < 1200*time.Millisecond {
		t.Fatalf("cap not applied: 1.5 MB in %v", el)
	}
}

func TestReceiverCloseIdempotentAndStops(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.startMaster()
	g.startSlave()
	g.load(10, defaultParts())
	g.waitConverged(5 * time.Second)
	if err := g.rc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.rc.Close(); err != nil {
		t.Fatal(err)
	}
	if g.rc.Status().Running {
		t.Fatal("running after Close")
	}
	if _, err := os.Stat(g.rcOpts.CheckpointFile); err != nil {
		t.Fatalf("no checkpoint after close: %v", err)
	}
	g.rc = nil
	if err := g.sh.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.sh.Close(); err != nil {
		t.Fatal(err)
	}
	g.sh = nil
	if _, err := os.Stat(g.shOpts.StateFile); err != nil {
		t.Fatalf("no state file after close: %v", err)
	}
}

func TestSilentLinkIsDetected(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.startMaster()
	g.startSlave()
	g.load(20, defaultParts())
	g.waitConverged(5 * time.Second)
	before := g.rc.Status().Reconnects
	// The link goes silent without closing: only keepalives notice.
	g.proxy.SetStall(true)
	g.load(20, defaultParts())
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if st := g.rc.Status(); st.Reconnects == before || !strings.Contains(st.LastError, "timeout") {
			return fmt.Errorf("silent link not detected: %+v", st)
		}
		return nil
	})
	g.proxy.CutAll() // drop the stalled connections; new ones flow again
	g.proxy.SetStall(false)
	g.waitConverged(10 * time.Second)
}

// TestWindowKeepsManyFramesInFlight checks the flow control: over a slow link
// the master keeps several frames unacknowledged (streaming, not one request
// per batch) but never more than the slave's window.
func TestWindowKeepsManyFramesInFlight(t *testing.T) {
	g := newRig(t, kinds()[1])
	g.rcOpts.Compression = ModeNone // wire bytes ≈ log bytes, so log positions measure the window
	g.rcOpts.Window = minWindow
	body := make([]byte, 1000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for i := 0; i < 10000; i++ { // ~10 MB
		g.put("bulk", i%3, body)
	}
	g.startMaster()
	g.proxy.SetRate(4 << 20)
	g.startSlave()
	var maxInFlight int64
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		l := g.sh.Lag()
		if len(l) == 0 {
			return errors.New("no slave yet")
		}
		if d := l[0].SentPos - l[0].AppliedPos; d > maxInFlight {
			maxInFlight = d
		}
		return g.converged()
	})
	frame := int64(g.shOpts.FrameBytes)
	if maxInFlight < 4*frame {
		t.Fatalf("at most %d bytes in flight: the master waits for acks instead of streaming", maxInFlight)
	}
	if limit := int64(minWindow)*11/10 + 2*frame; maxInFlight > limit {
		t.Fatalf("%d bytes in flight, window is %d", maxInFlight, minWindow)
	}
	t.Logf("max in flight %d bytes (window %d, frame %d)", maxInFlight, minWindow, frame)
}
