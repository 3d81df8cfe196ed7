package bundle

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"metaq/georeplicator"
)

// TestFormerMasterRejoinsTwoGenerationsOn: bj, master of generation 0,
// acknowledges records gz never got (gz's link cut); bj is lost and gz is
// forced to generation 1; hf, which had bj's records, cuts them and follows
// gz; gz is lost in turn and hf is forced to generation 2 from gz's log.
// bj, restarted by its unit's command, rejoins hf: its log forked from
// hf's at gz's promotion, two generations back, so it cuts and saves aside
// its records from there (not from hf's own promotion ends, which are no
// record boundary in bj's log) and ends byte-identical to hf.
// Found by the fault schedules (internal/faultsched, seed 761491325): bj
// stopped at "partition orders-1 diverged from master at offset 851: the
// new master's end is not a record boundary here", for good.
func TestFormerMasterRejoinsTwoGenerationsOn(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 20)
	waitCaughtUp(t, s.site("bj"), s.site("gz"), "orders", 30*time.Second)
	s.cut("gz")
	// Acknowledged at bj and hf only: lost with gz's forced promotion,
	// which is why they are not among the fixture's acknowledged puts.
	produce(t, s.site("bj").Broker.Addr().String(), "orders", 6, "bj-only-record")
	waitCaughtUp(t, s.site("bj"), s.site("hf"), "orders", 30*time.Second)
	s.kill("bj")

	if rep := s.promote("gz", true); rep.Generation != 1 {
		t.Fatalf("gz promoted at generation %d, want 1", rep.Generation)
	}
	s.produce("gz", "orders", 8)
	waitCaughtUp(t, s.site("gz"), s.site("hf"), "orders", 30*time.Second)
	s.kill("gz")
	if rep := s.promote("hf", true); rep.Generation != 2 {
		t.Fatalf("hf promoted at generation %d, want 2", rep.Generation)
	}
	s.produce("hf", "orders", 5)

	s.restart("bj")
	s.produce("hf", "orders", 5)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("converged with %s as master, want hf", m)
	}
	// Each of bj and hf saved bj's six records aside where it cut them.
	for _, name := range []string{"bj", "hf"} {
		tails, err := georeplicator.ListTails(filepath.Join(s.dir, name, "data", "replication", "unreplicated"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range tails {
			data, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			n += bytes.Count(data, []byte("bj-only-record-"))
			if f.Records != bytes.Count(data, []byte("bj-only-record-")) {
				t.Fatalf("%s saved aside records that are not bj's lost ones: %+v", name, f)
			}
		}
		if n != 6 {
			t.Fatalf("%s saved aside %d of bj's 6 lost records: %+v", name, n, tails)
		}
	}
}
