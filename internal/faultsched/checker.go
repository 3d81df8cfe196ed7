package faultsched

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Violation kinds.
const (
	VSyncAckLost        = "sync-ack-lost"        // an acknowledged put to the synchronous topic is not served
	VAsyncAckLost       = "async-ack-lost"       // an acknowledged asynchronous put is neither served at its offset nor saved aside
	VAckMoved           = "ack-moved"            // an acknowledged put is served, but not at the offset it was acknowledged with
	VOffsetConflict     = "offset-two-records"   // two acknowledged puts with different records at one partition and offset, neither saved aside
	VNoConvergence      = "no-convergence"       // the sites do not serve identical bytes within the bound after the last fault
	VNoMaster           = "no-master"            // no site is master after every fault healed
	VUnreadable         = "unreadable"           // a site's log could not be read at the end (a damaged record, an error answer)
	VUnnamedFailure     = "unnamed-failure"      // a command or put failed without naming its cause
	VUnexpectedExit     = "unexpected-exit"      // a site's process exited without being killed
	VSiteNotStarting    = "site-did-not-answer"  // a site did not answer its admin endpoint after the heal
	VTwoMastersInGen    = "two-sites-one-gen"    // two sites acknowledged puts in the same generation
	VTwoMasters         = "two-masters"          // two sites report mode master after the heal
	VStacksDumped       = "stacks-dumped"        // a site that did not answer was made to print its goroutines
	VDamageUnserved     = "damage-not-repaired"  // a site skips a range of a partition (lost to damage) after the heal
	VConfigNotConverged = "config-not-converged" // a site does not run the last server.ini published by configsync after the heal
)

// Violation is one finding of the checker.
type Violation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// partKey names a topic's partition.
type partKey struct {
	Topic string
	Part  int
}

func (k partKey) String() string { return fmt.Sprintf("%s-%d", k.Topic, k.Part) }

// Final is what the sites serve once every fault is healed: each site's
// partitions as read with get from the start, and the records each site
// saved aside (its data directory's replication/unreplicated files).
type Final struct {
	Master     string                       // the site that is master, "" when none is
	Runs       map[string]map[partKey][]run // site -> partition -> runs of records served
	ReadErrs   map[string]string            // site -> why its log could not be read whole
	Holes      map[string][]string          // site -> ranges it skips (damaged, not repaired)
	Aside      map[string]map[string]bool   // site -> payloads saved aside
	Converged  bool                         // every site serves identical bytes
	ConvergeT  time.Duration                // from the heal to identical bytes
	Diff       string                       // when not converged: how the sites differ
	Exits      []string                     // site processes that exited without a kill
	NoAnswer   []string                     // sites that did not answer /status after the heal
	StatusErrs map[string]string            // sites whose /status failed when the master was looked for
	served     map[string]map[partKey]map[int64][]byte
}

// Check returns the violations the history and the final state show, and
// the acknowledged puts to the synchronous topic that a forced promotion
// explains: `promote -force` is the operator's choice to lose what only
// the old master and its followers hold (saved aside when they rejoin), so
// once one was issued, a synchronous put that is saved aside is counted,
// not reported. A synchronous put lost without a forced promotion, or not
// saved aside anywhere, is a violation.
func Check(ops []Op, faults []FaultRecord, f *Final) (vs []Violation, forcedLoss int) {
	forced := false
	for _, r := range faults {
		if r.Kind == KindPromoteForce {
			forced = true
		}
	}
	add := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	if f.Master == "" {
		add(VNoMaster, "no site reports mode master after the heal%s", statusErrs(f.StatusErrs))
	}
	if !f.Converged {
		add(VNoConvergence, "%s", f.Diff)
	}
	for _, s := range Sites {
		if e := f.ReadErrs[s]; e != "" {
			add(VUnreadable, "%s: %s", s, e)
		}
		for _, h := range f.Holes[s] {
			add(VDamageUnserved, "%s skips %s", s, h)
		}
	}
	for _, e := range f.Exits {
		add(VUnexpectedExit, "%s", e)
	}
	for _, s := range f.NoAnswer {
		add(VSiteNotStarting, "%s", s)
	}
	ref := f.Master
	if ref == "" {
		ref = Sites[0]
	}
	served := f.recordsOf(ref)
	where := map[string]string{} // payload -> "partition@offset" anywhere in ref's log
	for k, m := range served {
		for off, body := range m {
			where[string(body)] = fmt.Sprintf("%s@%d", k, off)
		}
	}
	aside := func(payload string) string {
		for _, s := range Sites {
			if f.Aside[s][payload] {
				return s
			}
		}
		return ""
	}
	// Raw puts name their site and, when it did not change around the
	// put, the site's generation: one generation has one master. A site
	// that is not the master also answers puts it passes on to the master
	// (held puts a master forwards to the one it hands over to, puts a
	// slave's gateway forwards): those records are in the master's log at
	// the offsets acknowledged, so two sites whose acknowledgements of one
	// generation are all served where acknowledged wrote one log, and only
	// a pair of which one is not (cut, saved aside, lost) is reported.
	servedAt := func(op Op) bool {
		got, ok := served[partKey{op.Topic, op.Partition}][op.Offset]
		return ok && string(got) == op.Payload
	}
	genSite := map[int64]Op{}
	reported := map[string]bool{}
	for _, op := range ops {
		if op.Outcome != OutcomeOK || op.Gen < 0 {
			continue
		}
		prev, ok := genSite[op.Gen]
		if !ok {
			genSite[op.Gen] = op
			continue
		}
		if prev.Site != op.Site && servedAt(prev) && servedAt(op) {
			continue
		}
		// A record saved aside was written by the site whose log held it:
		// a put a slave site's gateway answered for the master, cut when
		// that master rejoined after a failover (an asynchronous put's
		// documented loss window), is the master's write, not the
		// gateway's.
		if writerOf(prev, servedAt, aside) == writerOf(op, servedAt, aside) {
			continue
		}
		if key := fmt.Sprintf("%d/%s/%s", op.Gen, prev.Site, op.Site); prev.Site != op.Site && !reported[key] {
			reported[key] = true
			add(VTwoMastersInGen, "generation %d: %s acknowledged %s at %v and %s acknowledged %s at %v",
				op.Gen, prev.Site, prev.Payload, prev.End, op.Site, op.Payload, op.End)
		}
	}
	byOffset := map[string]Op{}
	for _, op := range ops {
		if op.Outcome != OutcomeOK {
			if op.Outcome == OutcomeRefused && strings.TrimSpace(op.Err) == "" {
				add(VUnnamedFailure, "put %s by %s refused with no text", op.Payload, op.Client)
			}
			continue
		}
		k := partKey{op.Topic, op.Partition}
		key := fmt.Sprintf("%s@%d", k, op.Offset)
		// One offset acknowledged twice is a failover's doing when the
		// earlier record was cut and saved aside; when neither was, one
		// record was overwritten without a trace.
		if prev, ok := byOffset[key]; ok && prev.Payload != op.Payload {
			if aside(prev.Payload) == "" && aside(op.Payload) == "" {
				add(VOffsetConflict, "%s acknowledged to %s (%s%s, %v) and to %s (%s%s, %v), neither saved aside", key,
					prev.Payload, prev.Client, prev.Site, prev.End, op.Payload, op.Client, op.Site, op.End)
			}
		} else {
			byOffset[key] = op
		}
		if got, ok := served[k][op.Offset]; ok && string(got) == op.Payload {
			continue
		}
		if f.Master == "" && servedElsewhere(f, k, op) {
			continue // no master to hold to: a site that serves it will do (no-master is reported)
		}
		if w, ok := where[op.Payload]; ok {
			add(VAckMoved, "%s acknowledged at %s by %s%s at %v, served at %s by %s", op.Payload, key, op.Client, op.Site, op.End, w, ref)
			continue
		}
		if op.Topic != SyncTopic {
			if aside(op.Payload) != "" {
				continue
			}
			add(VAsyncAckLost, "%s acknowledged at %s by %s%s at %v: not served by %s, not saved aside at any site", op.Payload, key, op.Client, op.Site, op.End, ref)
			continue
		}
		note := ""
		if s := aside(op.Payload); s != "" {
			if forced {
				forcedLoss++
				continue
			}
			note = " (saved aside at " + s + ", and no promote -force was issued)"
		}
		add(VSyncAckLost, "%s acknowledged at %s by %s%s at %v: not served by %s%s", op.Payload, key, op.Client, op.Site, op.End, ref, note)
	}
	for _, r := range faults {
		if r.Command && r.Err != "" && !namesCause(r.Output, r.Err) {
			add(VUnnamedFailure, "%s failed without a cause: %s / %q", r.Event, r.Err, r.Output)
		}
	}
	return vs, forcedLoss
}

// servedElsewhere reports whether any site serves op's record at its
// partition and offset.
func servedElsewhere(f *Final, k partKey, op Op) bool {
	for _, s := range Sites {
		if got, ok := f.recordsOf(s)[k][op.Offset]; ok && string(got) == op.Payload {
			return true
		}
	}
	return false
}

// namesCause reports whether a failed command said why: more than its
// exit status.
func namesCause(out, err string) bool {
	t := strings.TrimSpace(out)
	return len(t) >= 10 || (!strings.HasPrefix(err, "exit status") && len(err) >= 10)
}

// recordsOf decodes the site's served partitions: partition -> offset -> body.
func (f *Final) recordsOf(site string) map[partKey]map[int64][]byte {
	if f.served == nil {
		f.served = map[string]map[partKey]map[int64][]byte{}
	}
	if m, ok := f.served[site]; ok {
		return m
	}
	m := map[partKey]map[int64][]byte{}
	for k, runs := range f.Runs[site] {
		mm := map[int64][]byte{}
		for _, rn := range runs {
			recs, _, _ := decodeRecords(rn.Data, rn.Off)
			for _, r := range recs {
				mm[r.Offset] = r.Body
			}
		}
		m[k] = mm
	}
	f.served[site] = m
	return m
}

// readSites reads every partition the workload writes at every site.
func readSites(l *Layout) (runs map[string]map[partKey][]run, errs map[string]string, holes map[string][]string) {
	runs, errs, holes = map[string]map[partKey][]run{}, map[string]string{}, map[string][]string{}
	for _, s := range Sites {
		runs[s] = map[partKey][]run{}
		for _, t := range workloadTopics {
			for p := range t.parts {
				k := partKey{t.name, p}
				rs, hs, err := readPartition(l.MetaQAddr(s), t.name, p)
				if err != nil {
					errs[s] = fmt.Sprintf("%s: %v", k, err)
				}
				for _, h := range hs {
					holes[s] = append(holes[s], fmt.Sprintf("%s [%d,%d)", k, h.From, h.To))
				}
				runs[s][k] = rs
			}
		}
	}
	return runs, errs, holes
}

// span describes runs: "[a,b)" for each.
func span(rs []run) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("[%d,%d)", r.Off, r.Off+int64(len(r.Data))))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, "+")
}

// sameRuns reports whether two sites serve the same runs, byte for byte.
func sameRuns(a, b []run) (bool, string) {
	if len(a) != len(b) {
		return false, ""
	}
	for i := range a {
		if a[i].Off != b[i].Off || !bytes.Equal(a[i].Data, b[i].Data) {
			return false, firstDiff(a[i].Data, b[i].Data)
		}
	}
	return true, ""
}

// sameLogs reports how the sites' logs differ ("" when identical).
func sameLogs(runs map[string]map[partKey][]run) string {
	var diffs []string
	ref := Sites[0]
	for k, want := range runs[ref] {
		for _, s := range Sites[1:] {
			got := runs[s][k]
			if ok, first := sameRuns(want, got); !ok {
				diffs = append(diffs, fmt.Sprintf("%s: %s serves %s, %s %s%s", k, ref, span(want), s, span(got), first))
			}
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func firstDiff(a, b []byte) string {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return fmt.Sprintf(", first differing byte at +%d", i)
		}
	}
	return ""
}

// readAside collects the payloads of the records every site saved aside.
func readAside(l *Layout) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, s := range Sites {
		out[s] = map[string]bool{}
		dir := filepath.Join(l.DataDir(s), "replication", "unreplicated")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			recs, _, _ := decodeRecords(b, 0)
			for _, r := range recs {
				out[s][string(r.Body)] = true
			}
		}
	}
	return out
}

// writerOf is the site that wrote an acknowledged put's record: the site
// that saved it aside when it is not served where acknowledged and was
// saved aside somewhere, else the site that answered it.
func writerOf(op Op, servedAt func(Op) bool, aside func(string) string) string {
	if !servedAt(op) {
		if s := aside(op.Payload); s != "" {
			return s
		}
	}
	return op.Site
}

// statusErrs names the sites whose /status could not be read, which may be
// why none reported mode master.
func statusErrs(errs map[string]string) string {
	var b strings.Builder
	for _, s := range Sites {
		if e := errs[s]; e != "" {
			fmt.Fprintf(&b, "; %s /status: %s", s, e)
		}
	}
	return b.String()
}
