package faultsched

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
)

// encode lays out MetaQ records (20-byte header, body) as a site stores them.
func encode(bodies ...string) []byte {
	var out []byte
	for _, b := range bodies {
		h := make([]byte, 20)
		binary.BigEndian.PutUint32(h[0:], uint32(len(b)))
		binary.BigEndian.PutUint32(h[4:], crc32.ChecksumIEEE([]byte(b))&0x7FFFFFFF)
		out = append(append(out, h...), b...)
	}
	return out
}

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	slices.Sort(out)
	return out
}

// TestCheckerFindsWhatIsWrong: on a hand-made history and final state, the
// checker passes what is served or saved aside, and names each loss, a
// generation acknowledged at two sites, and a failure without a cause.
func TestCheckerFindsWhatIsWrong(t *testing.T) {
	log := encode("a1", "a2") // a1 at 0, a2 at 22
	runs := map[partKey][]run{{SyncTopic, 0}: {{0, log}}, {AsyncTopic, 0}: {{0, log}}}
	f := &Final{Master: "bj", Converged: true,
		Runs:  map[string]map[partKey][]run{"bj": runs, "hf": runs, "gz": runs},
		Aside: map[string]map[string]bool{"hf": {"saved": true}}}
	ok := func(topic, payload string, off int64, site string, gen int64) Op {
		return Op{Client: "raw-0", Site: site, Topic: topic, Payload: payload, Outcome: OutcomeOK, Offset: off, Gen: gen}
	}
	ops := []Op{
		ok(SyncTopic, "a1", 0, "bj", 0),
		ok(AsyncTopic, "a2", 22, "bj", 0),
		ok(AsyncTopic, "saved", 44, "bj", 0),                                        // saved aside at hf: fine
		ok(AsyncTopic, "gone", 66, "bj", 0),                                         // lost
		ok(SyncTopic, "saved", 22, "bj", 0),                                         // sync, only aside, no forced promotion
		ok(AsyncTopic, "a1", 22, "hf", 0),                                           // served at 0, acknowledged at 22; and hf in bj's generation
		ok(AsyncTopic, "a2", 22, "gz", 0),                                           // gz passed it on to bj (served where acknowledged): not a second master
		{Client: "go-bj", Topic: AsyncTopic, Payload: "x", Outcome: OutcomeRefused}, // no cause
		{Client: "go-bj", Topic: AsyncTopic, Payload: "y", Outcome: OutcomeUnknown},
	}
	faults := []FaultRecord{
		{Event: "promote hf", Kind: KindPromote, Command: true, Err: "exit status 1", Output: "promote: the master is alive"},
		{Event: "switchover bj gz", Kind: KindSwitchover, Command: true, Err: "exit status 1"},
	}
	vs, forced := Check(ops, faults, f)
	want := []string{VAckMoved, VAsyncAckLost, VOffsetConflict, VSyncAckLost, VTwoMastersInGen, VUnnamedFailure, VUnnamedFailure}
	slices.Sort(want)
	if got := kinds(vs); !slices.Equal(got, want) || forced != 0 {
		t.Fatalf("violations %v (forced %d), want %v:\n%+v", got, forced, want, vs)
	}

	// A forced promotion explains the synchronous put saved aside.
	faults = append(faults, FaultRecord{Event: "promote-force gz", Kind: KindPromoteForce, Command: true, Output: "promoted"})
	vs, forced = Check(ops, faults, f)
	if slices.Contains(kinds(vs), VSyncAckLost) || forced != 1 {
		t.Fatalf("after promote -force: violations %v, forced %d; want no %s and 1 forced", kinds(vs), forced, VSyncAckLost)
	}

	// A put gz's gateway answered for bj, cut and saved aside at bj when bj
	// rejoined after a failover, was bj's write: not a second master of
	// bj's generation (seed 5 of the fixed schedules once deploy/ forwarded
	// puts at every site). One gz saved aside itself was gz's.
	f4 := &Final{Master: "bj", Converged: true,
		Runs:  map[string]map[partKey][]run{"bj": runs, "hf": runs, "gz": runs},
		Aside: map[string]map[string]bool{"bj": {"forwarded": true}, "gz": {"own": true}}}
	vs, _ = Check([]Op{ok(AsyncTopic, "a1", 0, "bj", 0), ok(AsyncTopic, "forwarded", 44, "gz", 0)}, nil, f4)
	if slices.Contains(kinds(vs), VTwoMastersInGen) {
		t.Fatalf("a forwarded put saved aside at the master: %+v", vs)
	}
	vs, _ = Check([]Op{ok(AsyncTopic, "a1", 0, "bj", 0), ok(AsyncTopic, "own", 44, "gz", 0)}, nil, f4)
	if !slices.Contains(kinds(vs), VTwoMastersInGen) {
		t.Fatalf("gz's own record of bj's generation saved aside at gz: %+v, want %s", vs, VTwoMastersInGen)
	}

	// Sites that differ, skip a range, or have no master are named.
	f2 := &Final{Runs: map[string]map[partKey][]run{"bj": runs, "hf": {{SyncTopic, 0}: {{0, log[:22]}}}, "gz": runs},
		Holes: map[string][]string{"gz": {"orders-0 [22,44)"}}}
	f2.Diff = sameLogs(f2.Runs)
	if f2.Diff == "" {
		t.Fatal("sameLogs found no difference between bj and hf")
	}
	f2.StatusErrs = map[string]string{"gz": "context deadline exceeded"}
	vs, _ = Check(nil, nil, f2)
	want = []string{VDamageUnserved, VNoConvergence, VNoMaster}
	if got := kinds(vs); !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
	for _, v := range vs {
		if v.Kind == VNoMaster && !strings.Contains(v.Detail, "gz /status: context deadline exceeded") {
			t.Fatalf("no-master does not name the site whose /status failed: %q", v.Detail)
		}
	}
	// With no master, a put served by some site is not lost, one served by
	// none is.
	f3 := &Final{Runs: map[string]map[partKey][]run{"bj": {{AsyncTopic, 0}: {{0, log[:22]}}}, "hf": runs, "gz": runs}}
	f3.Diff = sameLogs(f3.Runs)
	vs, _ = Check([]Op{ok(AsyncTopic, "a2", 22, "hf", 1), ok(AsyncTopic, "nowhere", 44, "hf", 1)}, nil, f3)
	want = []string{VAsyncAckLost, VNoConvergence, VNoMaster}
	if got := kinds(vs); !slices.Equal(got, want) {
		t.Fatalf("no master: violations %v, want %v:\n%+v", got, want, vs)
	}
}
