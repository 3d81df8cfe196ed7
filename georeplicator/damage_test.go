package georeplicator

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/store/storetest"
	"metaq/internal/testutil"
)

// readRecords reads a partition, skipping damaged ranges, and returns the
// bytes it serves by offset (runs between holes).
func servedRuns(s testStore, topic string, part int) (map[int64][]byte, error) {
	info, err := s.Partition(topic, part)
	if err != nil {
		return nil, err
	}
	out := map[int64][]byte{}
	start := info.Min
	for off := info.Min; off < info.Max; {
		b, err := s.Read(topic, part, off, 1<<20)
		var de *store.DamagedError
		if errors.As(err, &de) {
			start, off = de.Next, de.Next
			continue
		}
		if err != nil {
			return nil, err
		}
		out[start] = append(out[start], b...)
		off += int64(len(b))
	}
	return out, nil
}

// damageMasterChunk flips bytes in the payload of one data chunk in the
// master's first log segment and makes the next open scan the whole log.
func damageMasterChunk(t *testing.T, dir string) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	if len(segs) < 2 {
		t.Fatalf("want a sealed segment, have %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+64; i++ {
		b[i] ^= 0xFF
	}
	os.WriteFile(segs[0], b, 0o644)
	os.Remove(filepath.Join(dir, "checkpoint"))
}

// TestMasterDamageReplicates: the master lost a chunk to disk damage.
// A slave that already holds it keeps it and keeps replicating every
// partition; the master then repairs the range from the slave's copy. A
// slave that never had it continues past the lost records at the master's
// offsets. Nothing corrupt reaches a replica.
func TestMasterDamageReplicates(t *testing.T) {
	defer func(n int64) { fileSegmentBytes = n }(fileSegmentBytes)
	fileSegmentBytes = 32 << 10
	k := kinds()[0]
	for _, intact := range []bool{true, false} {
		t.Run(fmt.Sprint("slave holds the range=", intact), func(t *testing.T) {
			g := newRig(t, k)
			g.load(300, defaultParts())
			if intact {
				g.startMaster()
				g.startSlave()
				g.waitConverged(20 * time.Second)
				g.stopSlave(false)
				g.sh.Close()
				g.sh = nil
			}
			g.k.close(g.master)
			backup := t.TempDir() // the master's files before the damage
			testutil.CopyTree(t, filepath.Join(g.dir, "master"), backup)
			damageMasterChunk(t, filepath.Join(g.dir, "master"))
			g.master = g.k.open(t, filepath.Join(g.dir, "master"))
			ms := g.master.(*store.Store)
			dmg := ms.Damaged()
			if len(dmg) == 0 {
				t.Fatal("damage not found on the master")
			}
			g.startMaster()
			g.startSlave()
			g.load(200, defaultParts())
			// every partition: what the master serves, the slave serves at
			// the same offsets; the slave may hold more (the lost range).
			testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
				for _, mp := range g.master.Partitions() {
					sp, err := g.slave.Partition(mp.Topic, mp.Partition)
					if err != nil || sp.Max != mp.Max {
						return fmt.Errorf("%s-%d: slave %+v (%v), master max %d", mp.Topic, mp.Partition, sp, err, mp.Max)
					}
					mr, err := servedRuns(g.master, mp.Topic, mp.Partition)
					if err != nil {
						return err
					}
					sr, err := servedRuns(g.slave, mp.Topic, mp.Partition)
					if err != nil {
						return err
					}
					for off, run := range mr {
						if !containsAt(sr, off, run) {
							return fmt.Errorf("%s-%d: master run at %d (%d bytes) not on the slave", mp.Topic, mp.Partition, off, len(run))
						}
					}
				}
				return nil
			})
			if st := g.rc.Status(); len(st.Diverged) != 0 {
				t.Fatalf("diverged: %v", st.Diverged)
			}
			ss := g.slave.(*store.Store)
			if !intact {
				if d := ss.Damaged(); fmt.Sprint(d) != fmt.Sprint(dmg) {
					t.Fatalf("slave skipped %v, master lost %v", d, dmg)
				}
				if g.rc.Status().Skips == 0 {
					t.Fatal("no skip counted")
				}
				// The master is repaired (here from a backup of its files):
				// the replica takes the repaired records too.
				bk, err := store.Open(store.Options{Dir: backup})
				if err != nil {
					t.Fatal(err)
				}
				defer bk.Close()
				for _, d := range dmg {
					b, err := bk.Read(d.Topic, d.Partition, d.From, int(d.To-d.From))
					if err != nil || int64(len(b)) != d.To-d.From {
						t.Fatalf("read the backup: %d bytes, %v", len(b), err)
					}
					if err := ms.Repair(t.Context(), d.Topic, d.Partition, d.From, b); err != nil {
						t.Fatal(err)
					}
				}
				g.load(20, defaultParts())
				g.waitConverged(20 * time.Second)
				if d := ss.Damaged(); len(d) != 0 {
					t.Fatalf("replica still damaged after the master's repair: %v", d)
				}
				return
			}
			if d := ss.Damaged(); len(d) != 0 {
				t.Fatalf("the intact slave reports damage %v", d)
			}
			// repair the master from the slave's copy: fetched, verified,
			// written back byte-identically
			for _, d := range dmg {
				b, err := ss.Read(d.Topic, d.Partition, d.From, int(d.To-d.From))
				if err != nil || int64(len(b)) != d.To-d.From {
					t.Fatalf("read the range from the slave: %d bytes, %v", len(b), err)
				}
				if err := ms.Repair(t.Context(), d.Topic, d.Partition, d.From, b); err != nil {
					t.Fatal(err)
				}
			}
			if d := ms.Damaged(); len(d) != 0 {
				t.Fatalf("damage after repair: %v", d)
			}
			g.load(20, defaultParts())
			g.waitConverged(20 * time.Second)
		})
	}
}

func containsAt(runs map[int64][]byte, off int64, want []byte) bool {
	for start, r := range runs {
		if off >= start && off+int64(len(want)) <= start+int64(len(r)) && bytes.Equal(r[off-start:off-start+int64(len(want))], want) {
			return true
		}
	}
	return false
}

// TestDivergenceIsPerPartition: a partition whose local bytes differ from
// the master's stops replicating; the others go on.
func TestDivergenceIsPerPartition(t *testing.T) {
	k := kinds()[0]
	g := newRig(t, k)
	g.slave = k.open(t, filepath.Join(g.dir, "slave-data", "store"))
	// the slave holds a record of its own where the master has another
	parts := defaultParts()
	bad := parts[0]
	g.put(bad.Topic, bad.Partition, []byte("the master's record"))
	if _, err := g.slave.AppendRaw(t.Context(), bad.Topic, bad.Partition, 0, makeRecord(1, []byte("a stray record here"))); err != nil {
		t.Fatal(err)
	}
	g.startMaster()
	g.startSlave()
	g.load(200, parts)
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, p := range parts[1:] {
			mp, _ := g.master.Partition(p.Topic, p.Partition)
			sp, err := g.slave.Partition(p.Topic, p.Partition)
			if err != nil || sp.Max != mp.Max {
				return fmt.Errorf("%s-%d: slave %d (%v), master %d", p.Topic, p.Partition, sp.Max, err, mp.Max)
			}
		}
		return nil
	})
	st := g.rc.Status()
	if len(st.Diverged) != 1 || !strings.Contains(st.Diverged[0], fmt.Sprintf("%s-%d", bad.Topic, bad.Partition)) {
		t.Fatalf("diverged: %v", st.Diverged)
	}
	if !slicesContains(g.rc.StatsLines(), "diverged_partitions 1") {
		t.Fatalf("stats: %v", g.rc.StatsLines())
	}
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestCheckBatchVerifiesRecordChecksums: an entry whose record fails its
// checksum never reaches the store; the frame is asked for again.
func TestCheckBatchVerifiesRecordChecksums(t *testing.T) {
	good := makeRecord(1, []byte("intact record"))
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0x01
	ok := batch{Entries: []store.LogEntry{{Topic: "t", Partition: 0, Records: good}}}
	if err := checkBatch(ok); err != nil {
		t.Fatal(err)
	}
	b := batch{Entries: []store.LogEntry{{Topic: "t", Partition: 0, Records: good}, {Topic: "t", Partition: 1, Records: bad}}}
	if err := checkBatch(b); !errors.Is(err, ErrCorruptFrame) || !strings.Contains(err.Error(), "t-1") {
		t.Fatalf("checkBatch with a bad record checksum: %v", err)
	}
}

// TestSlaveDiskFullResumes: a slave whose disk fills stops applying,
// loses nothing, and catches up by itself once there is room.
func TestSlaveDiskFullResumes(t *testing.T) {
	k := kinds()[0]
	g := newRig(t, k)
	ffs := &storetest.FullFS{}
	sl, err := store.Open(store.Options{Dir: filepath.Join(g.dir, "slave-data", "store"), FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	g.slave = sl
	g.startMaster()
	g.startSlave()
	g.load(100, defaultParts())
	g.waitConverged(20 * time.Second)
	ffs.Full.Store(true)
	g.load(100, defaultParts())
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if h := sl.Health(); !errors.Is(h, store.ErrNoSpace) {
			return fmt.Errorf("slave health %v", h)
		}
		return nil
	})
	ffs.Full.Store(false)
	g.waitConverged(20 * time.Second)
	if err := sl.Health(); err != nil {
		t.Fatalf("slave health after room was freed: %v", err)
	}
}
