package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/bundle"
)

// The -failover part of the tour: site failover as an operator runs it,
// each step checked. ZooKeeper is off, so a demoted master is told whom to
// follow (-follow) and the producer moves by itself to the site that takes
// puts.

// failoverSteps is how many steps runFailover prints.
const failoverSteps = 4

// failoverSites is what the failover steps need from one way of running
// the three sites: in this process (demo) or as metaq-server children in
// network namespaces (netnsDemo).
type failoverSites interface {
	// newProducer returns the failover producer (not started).
	newProducer() *ackProducer
	// producerWhere says where the producer runs, and commandsRun how
	// the operator's commands are run, for the header.
	producerWhere() string
	commandsRun() string
	// replAddr is the replication address the other sites reach site at.
	replAddr(site string) string
	confFile(site string) string
	tailDir(site string) string
	switchover(ctx context.Context, from, to string) (bundle.SwitchoverReport, error)
	// promote runs `promote [-force]` at site; a refusal wraps
	// bundle.ErrMasterReachable or bundle.ErrSiblingAhead as promote's does.
	promote(ctx context.Context, site string, force bool) (bundle.PromoteReport, error)
	// blockReplication cuts (or restores) site's replication links.
	blockReplication(site string, on bool) error
	// kill ends site's bundle without a handover and says how.
	kill(site string) (string, error)
	// startSlave starts site again as a slave with the given
	// async_slave.properties.
	startSlave(ctx context.Context, site, props string) error
	// held lists the failover messages (sequence numbers) site holds.
	held(ctx context.Context, site string) (map[int]bool, error)
	// sameAs waits until every site in others holds master's bytes of the
	// sample topic and returns their crc32 and size.
	sameAs(ctx context.Context, master string, others ...string) (uint32, int64, error)
	// refusal is site's answer to puts: "" when it takes them.
	refusal(ctx context.Context, site string) (string, error)
	// listUnreplicated prints site's saved tails as `metaq-server
	// unreplicated` does.
	listUnreplicated(ctx context.Context, site string, w io.Writer) error
	metaqAddr(site string) string
	setMaster(site string)
}

// runFailover runs the failover steps after the tour: a switchover to hf
// and back with a producer running, the loss of bj and the promotion of
// hf, and bj's return as a slave of hf with its unreplicated tail saved
// aside.
func runFailover(ctx context.Context, out io.Writer, fs failoverSites) error {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	f := &failover{out: out, fs: fs, p: fs.newProducer()}
	defer f.p.stop()
	f.printf("\nSite failover (ZooKeeper is off: a producer given the three sites' MetaQ addresses sends one message at a time, "+
		"%s, to whichever site takes puts; messages {\"failover\":N} in %s; %s)\n", fs.producerWhere(), sampleTopic, fs.commandsRun())
	if err := f.switchover(ctx, 1, "bj", "hf"); err != nil {
		return err
	}
	if err := f.switchover(ctx, 2, "hf", "bj"); err != nil {
		return err
	}
	missing, err := f.loseMaster(ctx, 3)
	if err != nil {
		return err
	}
	return f.rejoin(ctx, 4, missing)
}

type failover struct {
	out io.Writer
	fs  failoverSites
	p   *ackProducer
}

func (f *failover) printf(format string, args ...any) { fmt.Fprintf(f.out, format, args...) }

// missingAt lists the acknowledged messages site does not hold.
func (f *failover) missingAt(ctx context.Context, site string) ([]int, error) {
	held, err := f.fs.held(ctx, site)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", site, err)
	}
	var missing []int
	for _, a := range f.p.snapshot() {
		if !held[a.seq] {
			missing = append(missing, a.seq)
		}
	}
	return missing, nil
}

// switchover hands mastership from one site to another with the producer
// running, and checks that nothing acknowledged was lost and that the other
// two sites follow the new master byte for byte.
func (f *failover) switchover(ctx context.Context, step int, from, to string) error {
	fail := func(err error) error { return fmt.Errorf("demo: failover step %d: %w", step, err) }
	f.printf("[failover %d/%d] planned switchover %s -> %s, the producer sending throughout\n", step, failoverSteps, from, to)
	f.printf("      $ metaq-server switchover -to %s -follow %s -f %s   (at %s)\n", to, f.fs.replAddr(to), f.fs.confFile(from), from)
	began := time.Now()
	f.p.start(ctx)
	if _, err := f.p.waitAcks(ctx, from, began, 20, 30*time.Second); err != nil {
		return fail(err)
	}
	start := time.Now()
	rep, err := f.fs.switchover(ctx, from, to)
	if err != nil {
		return fail(err)
	}
	first, err := f.p.waitAcks(ctx, to, start, 20, 30*time.Second)
	if err != nil {
		return fail(fmt.Errorf("after the switchover: %w", err))
	}
	f.p.stop()
	acks := f.p.snapshot()
	f.printf("      %s took over at generation %d: %s refused puts for %v until %s held its durable log (%d bytes); "+
		"the producer's first put at %s was acknowledged %v after the command, its longest wait between two acknowledgements %v\n",
		to, rep.Generation, from, rep.WritesStopped.Round(time.Millisecond), to, rep.DurableEnd, to,
		first.at.Sub(start).Round(time.Millisecond), longestGap(acks, start).Round(time.Millisecond))
	missing, err := f.missingAt(ctx, to)
	if err != nil {
		return fail(err)
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("%s lacks %d acknowledged messages: %s", to, len(missing), seqList(missing)))
	}
	refusal, err := f.fs.refusal(ctx, from)
	if err != nil {
		return fail(err)
	}
	if !rep.Following || refusal == "" {
		return fail(fmt.Errorf("%s is not a slave of %s (following %t, answer to puts %q)", from, to, rep.Following, refusal))
	}
	sum, size, err := f.fs.sameAs(ctx, to, from, otherSite(from, to))
	if err != nil {
		return fail(err)
	}
	f.printf("      none of the %d acknowledged messages lost: all at %s; %s answers puts %q and follows %s; "+
		"the three sites hold the same %d bytes of %s (crc32 %08x)\n",
		len(acks), to, from, refusal, to, size, sampleTopic, sum)
	f.fs.setMaster(to)
	return nil
}

// refusalReason is promote's refusal from ErrSiblingAhead's text on, one
// line.
func refusalReason(err error) string {
	s := err.Error()
	if i := strings.Index(s, bundle.ErrSiblingAhead.Error()); i >= 0 {
		s = s[i:]
	}
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// otherSite is the one of bj, hf and gz that is neither a nor b.
func otherSite(a, b string) string {
	for _, s := range []string{"bj", "hf", "gz"} {
		if s != a && s != b {
			return s
		}
	}
	return ""
}

// loseMaster cuts bj's replication links while the producer writes to it
// (an asynchronous topic: bj acknowledges what hf and gz never get), ends
// bj without a handover, promotes hf and checks that the producer
// continues there and gz follows hf. It returns the messages bj
// acknowledged that hf lacks.
func (f *failover) loseMaster(ctx context.Context, step int) ([]int, error) {
	fail := func(err error) error { return fmt.Errorf("demo: failover step %d: %w", step, err) }
	f.printf("[failover %d/%d] unplanned loss of bj\n", step, failoverSteps)
	if _, err := f.fs.promote(ctx, "hf", false); !errors.Is(err, bundle.ErrMasterReachable) {
		return nil, fail(fmt.Errorf("promote at hf while bj is reachable: %v, want a refusal", err))
	}
	f.printf("      $ metaq-server promote -f %s   (at hf, bj still reachable): refused, as it must be without -force\n", f.fs.confFile("hf"))
	began := time.Now()
	f.p.start(ctx)
	if _, err := f.p.waitAcks(ctx, "bj", began, 20, 30*time.Second); err != nil {
		return nil, fail(err)
	}
	if err := f.fs.blockReplication("bj", true); err != nil {
		return nil, fail(err)
	}
	cut := time.Now()
	if _, err := f.p.waitAcks(ctx, "bj", cut, 30, 30*time.Second); err != nil {
		return nil, fail(fmt.Errorf("bj cut off: %w", err))
	}
	f.p.stop()
	afterCut := 0
	for _, a := range f.p.snapshot() {
		if a.site == "bj" && a.at.After(cut) {
			afterCut++
		}
	}
	lost := time.Now()
	how, err := f.fs.kill("bj")
	if err != nil {
		return nil, fail(err)
	}
	f.printf("      bj's replication links went down; bj, still taking puts (%s is asynchronous), acknowledged %d more messages in %v; then %s\n",
		sampleTopic, afterCut, lost.Sub(cut).Round(time.Millisecond), how)

	f.p.start(ctx)
	var rep bundle.PromoteReport
	force, refusal := false, ""
	if err := waitFor(ctx, 60*time.Second, func() error {
		var err error
		rep, err = f.fs.promote(ctx, "hf", force)
		// While gz has not noticed bj's loss either, promote waits for it
		// (retried here). gz may also have received more of bj's log than
		// hf: promote then names gz. The demo keeps hf, as an operator may;
		// what only gz holds is then cut there and saved aside.
		if errors.Is(err, bundle.ErrSiblingAhead) && !force && !strings.Contains(err.Error(), "still follows") {
			force, refusal = true, refusalReason(err)
		}
		return err
	}); err != nil {
		return nil, fail(fmt.Errorf("promote hf: %w", err))
	}
	if force {
		f.printf("      $ metaq-server promote -f %s   (at hf, once it lost bj): refused: %s\n", f.fs.confFile("hf"), refusal)
	}
	behind := fmt.Sprintf("known to be %d bytes behind (bj's durable end as bj last told hf)", rep.BehindBytes)
	if rep.Lag != nil {
		behind += fmt.Sprintf("; bj's last gossiped lag report for hf's group: %d bytes, %d messages", rep.Lag.Bytes, rep.Lag.Messages)
	}
	forced := ""
	if force {
		forced = " -force"
	}
	f.printf("      $ metaq-server promote%s -f %s   (at hf, once it lost bj): generation %d in %v, %s\n", forced, f.fs.confFile("hf"), rep.Generation,
		rep.Took.Round(time.Millisecond), behind)
	first, err := f.p.waitAcks(ctx, "hf", lost, 20, 30*time.Second)
	if err != nil {
		return nil, fail(fmt.Errorf("producer at hf: %w", err))
	}
	f.p.stop()
	f.fs.setMaster("hf")
	f.printf("      the producer's first put at hf was acknowledged %v after bj was lost (hf noticing the loss, then the promotion run at once)\n",
		first.at.Sub(lost).Round(time.Millisecond))
	sum, size, err := f.fs.sameAs(ctx, "hf", "gz")
	if err != nil {
		return nil, fail(err)
	}
	// gz may have received a record or two of bj's last ones that hf had
	// not when the links went down: it cuts and saves them as bj does.
	gzTails, err := georeplicator.ListTails(f.fs.tailDir("gz"))
	if err != nil {
		return nil, fail(err)
	}
	gzSaved := "saved nothing aside"
	if n := tailRecords(gzTails); n > 0 {
		gzSaved = fmt.Sprintf("cut and saved aside the %d records it had received from bj beyond hf's ends", n)
	}
	missing, err := f.missingAt(ctx, "hf")
	if err != nil {
		return nil, fail(err)
	}
	// A put bj answered just after the cut may have been shipped just
	// before it, so the count can differ from afterCut by what was in flight.
	if len(missing) == 0 {
		return nil, fail(errors.New("hf holds every message bj acknowledged while cut off"))
	}
	acks := f.p.snapshot()
	for _, seq := range missing {
		if acks[seq].site != "bj" {
			return nil, fail(fmt.Errorf("hf lacks message %d, which %s acknowledged", seq, acks[seq].site))
		}
	}
	f.printf("      gz follows hf (same %d bytes, crc32 %08x) and %s; hf lacks %d messages bj acknowledged (%s): "+
		"the replication lag at the loss, all from bj's last moments\n", size, sum, gzSaved, len(missing), seqList(missing))
	return missing, nil
}

// rejoin starts bj again as a slave of hf, as an operator would after a
// failover, and checks that it cut the messages hf lacks, saved them
// aside, and follows hf byte for byte.
func (f *failover) rejoin(ctx context.Context, step int, missing []int) error {
	fail := func(err error) error { return fmt.Errorf("demo: failover step %d: %w", step, err) }
	f.printf("[failover %d/%d] bj returns as a slave of hf\n", step, failoverSteps)
	props := filepath.Join(filepath.Dir(f.fs.confFile("bj")), "async_slave.properties")
	if err := os.WriteFile(props, []byte(asyncSlaveProperties("bj", 1, "hf", f.fs.replAddr("hf"))), 0o644); err != nil {
		return fail(err)
	}
	if err := f.fs.blockReplication("bj", false); err != nil {
		return fail(err)
	}
	f.printf("      $ metaq-server start slave -f %s -s %s   (masterAddress = hf's replication address)\n", f.fs.confFile("bj"), props)
	start := time.Now()
	if err := f.fs.startSlave(ctx, "bj", props); err != nil {
		return fail(err)
	}
	if _, _, err := f.fs.sameAs(ctx, "hf", "bj"); err != nil {
		return fail(err)
	}
	f.printf("      bj follows hf byte for byte %v after its start\n", time.Since(start).Round(time.Millisecond))
	f.printf("      $ metaq-server unreplicated -f %s\n", f.fs.confFile("bj"))
	if err := f.fs.listUnreplicated(ctx, "bj", f.out); err != nil {
		return fail(err)
	}
	tails, err := georeplicator.ListTails(f.fs.tailDir("bj"))
	if err != nil {
		return fail(err)
	}
	saved, err := tailPayloads(tails)
	if err != nil {
		return fail(err)
	}
	for _, seq := range missing {
		if !saved[ackPayload(seq)] {
			return fail(fmt.Errorf("message %d, acknowledged by bj and missing at hf, is not among bj's saved records", seq))
		}
	}
	// Beyond those the tail may hold puts whose answer never reached the
	// producer (in flight when it stopped or timed out): it sent them again,
	// so hf holds them too.
	extra := 0
	for body := range saved {
		var seq int
		if _, err := fmt.Sscanf(body, `{"failover":%d}`, &seq); err != nil {
			return fail(fmt.Errorf("bj saved a record that is not the producer's: %q", body))
		}
		if !slices.Contains(missing, seq) {
			extra++
		}
	}
	f.printf("      every one of the %d acknowledged messages hf lacks is in bj's saved tail (with %d puts the producer sent again), "+
		"cut from bj's log, never served as replicated;\n      to publish them again at hf: metaq-server unreplicated -publish -f %s -brokers %s\n",
		len(missing), extra, f.fs.confFile("bj"), f.fs.metaqAddr("hf"))
	for _, s := range []string{"bj", "hf", "gz"} {
		r, err := f.fs.refusal(ctx, s)
		if err != nil {
			return fail(err)
		}
		role := "master, takes puts"
		if r != "" {
			role = "slave, refuses puts"
		}
		f.printf("      %s: %s\n", s, role)
	}
	return nil
}

// tailRecords is how many records the saved tails hold.
func tailRecords(tails []georeplicator.TailFile) int {
	n := 0
	for _, t := range tails {
		n += t.Records
	}
	return n
}

// tailPayloads decodes the bodies of every record in the saved tails (the
// demo's messages carry no attribute).
func tailPayloads(tails []georeplicator.TailFile) (map[string]bool, error) {
	bodies := map[string]bool{}
	for _, t := range tails {
		data, err := os.ReadFile(t.Path)
		if err != nil {
			return nil, err
		}
		for len(data) > 0 {
			r, n, err := store.DecodeRecord(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.Path, err)
			}
			bodies[string(r.Body)] = true
			data = data[n:]
		}
	}
	return bodies, nil
}
