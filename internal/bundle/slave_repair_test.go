package bundle

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSlaveRepairsFromMaster: a byte flipped in a sealed segment of a slave
// site loses records there (quarantined, skipped by get); the master never
// ships that range again, so the slave fetches it from its master by itself
// and writes it back: afterwards it serves the master's bytes, and a
// consumer reading the partition from the slave's MetaQ port gets every
// record, with no range skipped (found by the fault schedules,
// internal/faultsched: a flipped byte at gz or hf stayed unserved).
func TestSlaveRepairsFromMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	defer func(d time.Duration) { repairInterval = d }(repairInterval)
	repairInterval = 50 * time.Millisecond
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}, overlays: map[string]string{"hf": "[system]\nmaxSegmentSize=4096\n"}})
	s.produce("bj", "orders", 150)
	wantFollowsByteIdentical(t, s.site("bj"), s.site("hf"), "orders")

	// Damage a record in hf's first segment, sealed since (the log rolled
	// past it), and make the restart scan the whole log.
	data := filepath.Join(s.dir, "hf", "data")
	s.kill("hf")
	segs, _ := filepath.Glob(filepath.Join(data, "log", "*.log"))
	if len(segs) < 2 {
		t.Fatalf("hf's log has %d segments, want a sealed one", len(segs))
	}
	raw, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, []byte("via-bj-"))
	if at < 0 {
		t.Fatal("no record in hf's first segment")
	}
	raw[at+4] ^= 0xFF
	if err := os.WriteFile(segs[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(data, "checkpoint"))
	s.restart("hf")
	hf := s.site("hf")
	if len(hf.Store.Damaged()) == 0 {
		t.Fatal("the flipped byte was not found at hf")
	}

	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if d := hf.Store.Degraded(); d != nil {
			return d
		}
		return nil
	})
	s.produce("bj", "orders", 5) // the slave goes on following after the repair
	wantFollowsByteIdentical(t, s.site("bj"), hf, "orders")
	st := mustComp[*repairComponent](t, hf).Status().(map[string]any)
	if st["repaired"].(int) == 0 || st["lastError"] != "" {
		t.Fatalf("hf's repair status %v, want a repair and no error", st)
	}

	// A consumer reading from hf gets every record: the whole partition,
	// in one run from offset 0, equal to the master's.
	for _, p := range hf.Store.Partitions() {
		if p.Topic != "orders" {
			continue
		}
		want := readPartition(t, s.site("bj").Store, "orders", p.Partition)
		pieces, err := fetchRange(t.Context(), hf.Broker.Addr().String(), "orders", p.Partition, 0, int64(len(want)))
		if err != nil {
			t.Fatalf("orders-%d read from hf: %v", p.Partition, err)
		}
		if len(pieces) != 1 || pieces[0].off != 0 || !bytes.Equal(pieces[0].records, want) {
			t.Fatalf("orders-%d read from hf: %d runs, not the master's %d bytes", p.Partition, len(pieces), len(want))
		}
	}
}
