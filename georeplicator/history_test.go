package georeplicator

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestForkEnds: where a site cuts each partition to follow a master, from
// the histories of both logs.
func TestForkEnds(t *testing.T) {
	e1 := Epoch{1, map[string]int64{"t-0": 100, "t-1": 50}}
	e2 := Epoch{2, map[string]int64{"t-0": 160, "t-1": 40, "t-2": 10}} // t-1: the promoted site was behind at generation 1
	e3 := Epoch{3, map[string]int64{"t-0": 90, "t-1": 70}}             // a forced promotion of a site behind the others
	ends := []partEnd{{"t", 0, 200}, {"t", 1, 80}, {"t", 2, 30}, {"t", 3, 5}}
	for _, c := range []struct {
		name          string
		master, slave []Epoch
		want          map[string]int64
	}{
		{"both follow the first master's log", nil, nil, map[string]int64{}},
		{"the first master rejoins the master of generation 1", []Epoch{e1}, nil,
			map[string]int64{"t-0": 100, "t-1": 50, "t-2": 0, "t-3": 0}},
		{"the first master rejoins generation 2, two generations on", []Epoch{e1, e2}, nil,
			map[string]int64{"t-0": 100, "t-1": 40, "t-2": 0, "t-3": 0}},
		{"the master of generation 1 rejoins generation 2", []Epoch{e1, e2}, []Epoch{e1},
			map[string]int64{"t-0": 160, "t-1": 40, "t-2": 10, "t-3": 0}},
		{"a slave of generation 2 follows it again", []Epoch{e1, e2}, []Epoch{e1, e2}, map[string]int64{}},
		{"the master of generation 3 (forked from 1) rejoins generation 2", []Epoch{e1, e2}, []Epoch{e1, e3},
			map[string]int64{"t-0": 90, "t-1": 40, "t-2": 0, "t-3": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := forkEnds(c.master, c.slave, ends); !maps.Equal(got, c.want) {
				t.Fatalf("forkEnds = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHistoryInHandshake: hello carries the generations of the slave's
// history and welcome the common generation (decoded as absent from an
// older peer), and a history frame decodes to the history encoded.
func TestHistoryInHandshake(t *testing.T) {
	for _, c := range []struct {
		has     bool
		lineage []uint64
	}{{false, nil}, {true, []uint64{}}, {true, []uint64{1, 4}}} {
		hb, err := decodeHello(hello{Version: protocolVersion, MasterLog: "x", Features: 3, HasLineage: c.has, Lineage: c.lineage}.encode())
		if err != nil || hb.HasLineage != c.has || hb.Features != 3 || c.has && !slices.Equal(hb.Lineage, c.lineage) {
			t.Fatalf("hello lineage %v %v: got %v %v %v", c.has, c.lineage, hb.HasLineage, hb.Lineage, err)
		}
		w, err := decodeWelcome(welcome{Version: protocolVersion, LogID: "y", Features: 3, HasCommon: c.has, Common: 4}.encode())
		if err != nil || w.HasCommon != c.has || w.Features != 3 || c.has && w.Common != 4 {
			t.Fatalf("welcome common %v: got %v %v %v", c.has, w.HasCommon, w.Common, err)
		}
	}
	h := []Epoch{{1, map[string]int64{"a-b-0": 10, "a-1": 7}}, {4, map[string]int64{}}}
	var e enc
	encodeHistory(&e, h)
	d := dec{b: e.b}
	if got := decodeHistory(&d); d.err != nil || !sameHistory(got, h) {
		t.Fatalf("history %+v decoded as %+v (%v)", h, got, d.err)
	}
}

// TestBoundHistory: a long history is merged down to maxEpochs, and the
// merged one never cuts a site above where the whole history does.
func TestBoundHistory(t *testing.T) {
	var h []Epoch
	for g := uint64(1); g <= maxEpochs+5; g++ {
		ends := map[string]int64{"t-0": int64(100 * g), "t-1": int64(1000 - 10*g)}
		if g == 3 {
			delete(ends, "t-1") // t-1 had no record at generation 3's promotion
		}
		h = append(h, Epoch{g, ends})
	}
	b := boundHistory(cloneHistory(h))
	if len(b) != maxEpochs || b[0].Generation != 6 || b[len(b)-1].Generation != maxEpochs+5 {
		t.Fatalf("bounded history: %d epochs, from %d to %d", len(b), b[0].Generation, b[len(b)-1].Generation)
	}
	ends := []partEnd{{"t", 0, 5000}, {"t", 1, 5000}}
	for _, lineage := range [][]uint64{nil, {1, 2}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6, 7, 8}} {
		slave := make([]Epoch, len(lineage))
		for i, g := range lineage {
			slave[i] = h[g-1]
		}
		whole, bounded := forkEnds(h, slave, ends), forkEnds(b, slave, ends)
		for k, v := range bounded {
			if w, ok := whole[k]; !ok || v > w {
				t.Fatalf("lineage %v, %s: cut at %d with the bounded history, %d (%t) with the whole", lineage, k, v, w, ok)
			}
		}
		for k := range whole {
			if _, ok := bounded[k]; !ok {
				t.Fatalf("lineage %v, %s: not cut with the bounded history", lineage, k)
			}
		}
	}
}

// TestRejoinTwoGenerationsBehind: bj (generation 0) held records gz never
// got when gz was promoted (generation 1); hf followed gz and was promoted
// in turn (generation 2) from gz's log, behind gz's last records. bj,
// rejoining hf, cuts where its log forked, at gz's promotion, not at hf's
// (which is no record boundary in bj's log), saves aside what it cuts and
// then holds hf's bytes; gz, rejoining hf, cuts at hf's promotion. Found by
// the fault schedules (internal/faultsched, seed 761491325): bj stopped at
// "the new master's end is not a record boundary here".
func TestRejoinTwoGenerationsBehind(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
	hf.stopSlave()
	gz.stopSlave()
	putSome(t, bj, 5, "bj-unreplicated") // acknowledged at bj only
	bj.stopMaster()

	gz.promote(0, nil) // generation 1
	putSome(t, gz, 6, "gz")
	hf.follow(gz)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(gz) })
	hf.stopSlave()
	putSome(t, gz, 3, "gz-unreplicated")
	gz.stopMaster()

	hf.promote(0, nil) // generation 2, from gz's log
	if g := hf.id.Generation(); g != 2 {
		t.Fatalf("hf at generation %d, want 2", g)
	}
	putSome(t, hf, 4, "hf")
	bj.follow(hf)
	gz.follow(hf)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		var errs []error
		for _, s := range []*site{bj, gz} {
			if err := s.sameAs(hf); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (%+v)", s.name, err, s.rc.Status()))
			}
		}
		return errors.Join(errs...)
	})
	for _, c := range []struct {
		s       *site
		records int
		tag     string
	}{{bj, 5, "bj-unreplicated-4-"}, {gz, 3, "gz-unreplicated-2-"}} {
		if got, want := c.s.rc.Status().Unreplicated, int64(c.records*len(defaultParts())); got != want {
			t.Fatalf("%s saved aside %d records, want %d", c.s.name, got, want)
		}
		tails, err := ListTails(filepath.Join(c.s.dir, "unreplicated"))
		if err != nil {
			t.Fatal(err)
		}
		if len(tails) != len(defaultParts()) {
			t.Fatalf("%s: %d tail files, want %d: %+v", c.s.name, len(tails), len(defaultParts()), tails)
		}
		for _, f := range tails {
			data, _ := os.ReadFile(f.Path)
			if f.Records != c.records || f.Generation != 2 || !bytes.Contains(data, []byte(c.tag+f.Topic)) {
				t.Fatalf("%s: tail %+v holds %q", c.s.name, f, data)
			}
		}
		// Following hf, its log has hf's history.
		if h := c.s.id.History(); !sameHistory(h, hf.id.History()) || len(h) != 2 {
			t.Fatalf("%s's history %+v, want hf's %+v", c.s.name, h, hf.id.History())
		}
	}
	putSome(t, hf, 2, "hf-after")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(bj.sameAs(hf), gz.sameAs(hf)) })
}

// TestRejoinCutsOwnGeneration: gz, promoted at generation 1 while behind,
// took writes no other site ever got; hf, which had more of bj's log, was
// promoted at generation 2 without knowing generation 1. gz rejoining hf
// cuts its own records where its generation started (hf, knowing nothing
// of it, cannot tell it where), saves them aside, connects again and then
// holds hf's bytes.
func TestRejoinCutsOwnGeneration(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
	gz.stopSlave()
	putSome(t, bj, 3, "bj-late") // hf has them, gz does not
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
	hf.stopSlave()
	bj.stopMaster()

	gz.promote(0, nil) // generation 1, behind
	putSome(t, gz, 2, "gz-own-record")
	gz.stopMaster()
	if _, err := hf.id.Observe(1); err != nil { // hf learns generation 1 exists, not its log
		t.Fatal(err)
	}
	hf.promote(0, nil) // generation 2, from bj's log
	putSome(t, hf, 4, "hf")
	gz.follow(hf)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := gz.sameAs(hf); err != nil {
			return fmt.Errorf("%w (%+v)", err, gz.rc.Status())
		}
		return nil
	})
	if got, want := gz.rc.Status().Unreplicated, int64(2*len(defaultParts())); got != want {
		t.Fatalf("gz saved aside %d records, want %d", got, want)
	}
	tails, err := ListTails(filepath.Join(gz.dir, "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tails {
		data, _ := os.ReadFile(f.Path)
		if f.Records != bytes.Count(data, []byte("gz-own-record-")) {
			t.Fatalf("gz saved aside more than its own records: %+v %q", f, data)
		}
	}
	if h := gz.id.History(); !sameHistory(h, hf.id.History()) {
		t.Fatalf("gz's history %+v, want hf's %+v", h, hf.id.History())
	}
}

// TestResumeOnMasterWhoseLogForked: hf follows gz (generation 1) and holds
// gz's last records, which bj, forced to generation 2 while behind, never
// got. gz rejoins bj: it cuts those records and takes bj's in their place,
// at the same offsets, in the same log (its log id does not change). gz is
// promoted again (generation 3) and hf reconnects to it with its checkpoint
// in gz's log: its position there no longer means what it did, so it is
// resumed by partition ends, cuts at bj's promotion (the newest generation
// both histories hold is 1), saves gz's old records aside and then holds
// gz's bytes. Found by the fault schedules (internal/faultsched, seed
// 900008): hf resumed by position, its partitions stopped as diverged, it
// took gz's history (generations 2 and 3) as its own although it held
// generation 1's records where they had been cut, and two promotions later
// two sites served different records at the same offsets with nothing cut.
func TestResumeOnMasterWhoseLogForked(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
	hf.stopSlave()
	gz.stopSlave()
	bj.stopMaster()

	gz.promote(0, nil) // generation 1
	putSome(t, gz, 4, "gz-both")
	hf.follow(gz)
	bj.follow(gz)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(gz), bj.sameAs(gz)) })
	bj.stopSlave()
	putSome(t, gz, 3, "gz-hf-only") // hf gets them, bj does not
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(gz) })
	hf.stopSlave() // hf keeps its checkpoint in gz's log
	gz.stopMaster()

	bj.promote(0, nil)              // generation 2 (forced: behind hf)
	putSome(t, bj, 5, "bj-gen2-xx") // as long as gz-hf-only: the same offsets
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := gz.sameAs(bj); err != nil {
			return fmt.Errorf("%w (%+v)", err, gz.rc.Status())
		}
		return nil
	})
	gz.stopSlave()
	bj.stopMaster()

	gz.promote(0, nil) // generation 3, gz's log id unchanged
	if g := gz.id.Generation(); g != 3 {
		t.Fatalf("gz at generation %d, want 3", g)
	}
	putSome(t, gz, 2, "gz-gen3")
	hf.follow(gz)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := hf.sameAs(gz); err != nil {
			return fmt.Errorf("%w (%+v)", err, hf.rc.Status())
		}
		return nil
	})
	if st := hf.rc.Status(); len(st.Diverged) > 0 {
		t.Fatalf("hf: partitions diverged: %v", st.Diverged)
	}
	if got, want := hf.rc.Status().Unreplicated, int64(3*len(defaultParts())); got != want {
		t.Fatalf("hf saved aside %d records, want %d", got, want)
	}
	tails, err := ListTails(filepath.Join(hf.dir, "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tails {
		data, _ := os.ReadFile(f.Path)
		if f.Records != 3 || !bytes.Contains(data, []byte("gz-hf-only-2-"+f.Topic)) {
			t.Fatalf("hf: tail %+v holds %q", f, data)
		}
	}
	if h := hf.id.History(); !sameHistory(h, gz.id.History()) || len(h) != 3 {
		t.Fatalf("hf's history %+v, want gz's %+v", h, gz.id.History())
	}
	putSome(t, gz, 2, "gz-after")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(gz) })
}

// TestRejoinSameLogAfterFork: hf holds the tail of bj's generation-0 log
// that gz, promoted at generation 1, never had; bj rejoined gz (cutting
// that tail) and was promoted again at generation 2, serving the same log
// ID as before with gz's records at the offsets it cut. hf, whose
// checkpoint names bj's log, must not resume by log position (its tail
// would then differ from the records shipped at the same offsets, and the
// partitions stop as diverged): it cuts and saves aside that tail, and then
// holds bj's bytes (fault schedule seed 900014).
func TestRejoinSameLogAfterFork(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
	gz.stopSlave()
	putSome(t, bj, 3, "bj-late") // hf has them, gz does not
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
	hf.stopSlave()
	bj.stopMaster()

	gz.promote(0, nil) // generation 1, without bj's late records
	putSome(t, gz, 4, "gz")
	bj.follow(gz) // cuts its late records, takes gz's at their offsets
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return bj.sameAs(gz) })
	bj.stopSlave()
	gz.stopMaster()

	bj.promote(0, nil) // generation 2, bj's log ID again
	if g := bj.id.Generation(); g != 2 {
		t.Fatalf("bj at generation %d, want 2", g)
	}
	putSome(t, bj, 2, "bj-gen2")
	hf.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := hf.sameAs(bj); err != nil {
			return fmt.Errorf("%w (%+v)", err, hf.rc.Status())
		}
		return nil
	})
	if got, want := hf.rc.Status().Unreplicated, int64(3*len(defaultParts())); got != want {
		t.Fatalf("hf saved aside %d records, want %d", got, want)
	}
	tails, err := ListTails(filepath.Join(hf.dir, "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tails) != len(defaultParts()) {
		t.Fatalf("hf: %d tail files, want %d: %+v", len(tails), len(defaultParts()), tails)
	}
	for _, f := range tails {
		data, _ := os.ReadFile(f.Path)
		if f.Records != 3 || !bytes.Contains(data, []byte("bj-late-2-"+f.Topic)) {
			t.Fatalf("hf: tail %+v holds %q", f, data)
		}
	}
	putSome(t, bj, 2, "bj-after")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
}

// TestFollowForcedMasterThatKeptASupersededTail: bj (generation 0) held a
// record per partition gz never got when gz was promoted (generation 1); hf
// had it, cut it when it followed gz and took gz's records, longer ones, at
// the same offsets. bj, demoted without ever reaching gz, was forced to
// generation 2 from its own log, that record included. gz and hf rejoining
// bj cut where their logs forked from bj's, at gz's promotion (their own
// generation after the one both hold), not at bj's promotion end (inside
// one of gz's records), save gz's records aside and then hold bj's bytes.
// Found by the fault schedules (internal/faultsched, seed 942056): the
// slaves cut at the master's end first and stopped at "the new master's
// end is not a record boundary here", for good.
func TestFollowForcedMasterThatKeptASupersededTail(t *testing.T) {
	k := kinds()[0] // the file store: the cut is the store's
	root := t.TempDir()
	bj, hf, gz := newSite(t, k, root, "bj"), newSite(t, k, root, "hf"), newSite(t, k, root, "gz")
	bj.startMaster(0, nil)
	putSome(t, bj, 20, "bj")
	hf.follow(bj)
	gz.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return errors.Join(hf.sameAs(bj), gz.sameAs(bj)) })
	gz.stopSlave()
	putSome(t, bj, 1, "t") // hf has it, gz does not
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(bj) })
	hf.stopSlave()
	bj.stopMaster()

	gz.promote(0, nil) // generation 1, without bj's last record
	putSome(t, gz, 3, "generation-one-at-gz")
	hf.follow(gz)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return hf.sameAs(gz) })
	hf.stopSlave()
	gz.stopMaster()

	if _, err := bj.id.Observe(1); err != nil { // bj rejoined as a slave of 1, never reached gz
		t.Fatal(err)
	}
	bj.promote(0, nil) // forced: generation 2, from its own log
	if g := bj.id.Generation(); g != 2 {
		t.Fatalf("bj at generation %d, want 2", g)
	}
	putSome(t, bj, 2, "bj-generation-two")
	gz.follow(bj)
	hf.follow(bj)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		var errs []error
		for _, s := range []*site{gz, hf} {
			if err := s.sameAs(bj); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (%+v)", s.name, err, s.rc.Status()))
			}
		}
		return errors.Join(errs...)
	})
	for _, s := range []*site{gz, hf} {
		tails, err := ListTails(filepath.Join(s.dir, "unreplicated"))
		if err != nil {
			t.Fatal(err)
		}
		saved := 0
		for _, f := range tails {
			if f.Generation != 2 {
				continue
			}
			data, _ := os.ReadFile(f.Path)
			if n := bytes.Count(data, []byte("generation-one-at-gz-")); n != f.Records {
				t.Fatalf("%s: tail %+v holds other records than generation 1's: %q", s.name, f, data)
			}
			saved += f.Records
		}
		if want := 3 * len(defaultParts()); saved != want {
			t.Fatalf("%s saved aside %d of generation 1's records when it followed bj, want %d: %+v", s.name, saved, want, tails)
		}
		if h := s.id.History(); !sameHistory(h, bj.id.History()) {
			t.Fatalf("%s's history %+v, want bj's %+v", s.name, h, bj.id.History())
		}
	}
}
