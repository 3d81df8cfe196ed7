package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/bundle"
)

// The --failover part of the tour, in this process: site failover as an
// operator runs it, each step checked. ZooKeeper is off, so a demoted
// master is told whom to follow (-follow) and the producer moves by itself
// to the site that takes puts; every replication link crosses the
// emulated WAN through the relay its destination advertises.

// failoverSteps is how many steps Failover prints.
const failoverSteps = 4

// Failover runs the failover steps after the tour: a switchover to hf and
// back with a producer running, the loss of bj and the promotion of hf, and
// bj's return as a slave of hf with its unreplicated tail saved aside.
func (d *demo) Failover(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	addrs := map[string]string{}
	for _, s := range d.sites {
		addrs[s.name] = s.b.Broker.Addr().String()
	}
	p := newAckProducer(sampleTopic, []string{"bj", "hf", "gz"}, addrs)
	defer p.stop()
	d.printf("\nSite failover (ZooKeeper is off: a producer with the three sites' MetaQ addresses sends one message at a time, "+
		"each on loopback, to whichever site takes puts; messages {\"failover\":N} in %s)\n", sampleTopic)
	if err := d.switchover(ctx, p, 1, "bj", "hf"); err != nil {
		return err
	}
	if err := d.switchover(ctx, p, 2, "hf", "bj"); err != nil {
		return err
	}
	missing, err := d.loseMaster(ctx, p, 3)
	if err != nil {
		return err
	}
	return d.rejoin(ctx, 4, missing)
}

// switchover hands mastership from one site to another with the producer
// running, and checks that nothing acknowledged was lost and that the other
// two sites follow the new master byte for byte.
func (d *demo) switchover(ctx context.Context, p *ackProducer, step int, from, to string) error {
	old, nw := d.site(from), d.site(to)
	d.printf("[failover %d/%d] planned switchover %s -> %s, the producer sending throughout\n", step, failoverSteps, from, to)
	d.printf("      $ metaq-server switchover -to %s -follow %s -f %s   (at %s; here POST /switchover on its admin endpoint)\n",
		to, nw.relay.Addr(), d.confFile(old), from)
	p.start(ctx)
	if _, err := p.waitAcks(ctx, from, time.Time{}, 20, 15*time.Second); err != nil {
		return fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	start := time.Now()
	rep, err := old.b.Switchover(ctx, to, nw.relay.Addr())
	if err != nil {
		return fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	first, err := p.waitAcks(ctx, to, start, 20, 30*time.Second)
	if err != nil {
		return fmt.Errorf("demo: failover step %d: after the switchover: %w", step, err)
	}
	p.stop()
	acks := p.snapshot()
	d.printf("      %s took over at generation %d: %s refused puts for %v until %s held its durable log (%d bytes); "+
		"the producer's first put at %s was acknowledged %v after the command, its longest wait between two acknowledgements %v\n",
		to, rep.Generation, from, rep.WritesStopped.Round(time.Millisecond), to, rep.DurableEnd, to,
		first.at.Sub(start).Round(time.Millisecond), longestGap(acks, start).Round(time.Millisecond))
	missing, err := missingAt(ctx, nw.b.Broker.Addr().String(), sampleTopic, 4, acks)
	if err != nil {
		return fmt.Errorf("demo: failover step %d: read %s: %w", step, to, err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("demo: failover step %d: %s lacks %d acknowledged messages: %s", step, to, len(missing), seqList(missing))
	}
	r := old.b.Broker.WriteRefusal()
	if !rep.Following || r == nil || r.Retry || !strings.Contains(r.Reason, to) {
		return fmt.Errorf("demo: failover step %d: %s is not a slave of %s (following %t, write refusal %+v)", step, from, to, rep.Following, r)
	}
	sum, size, err := d.followed(ctx, nw)
	if err != nil {
		return fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	d.printf("      none of the %d acknowledged messages lost: all at %s; %s answers puts 403 (%q) and follows %s; "+
		"the three sites hold the same %d bytes of %s (crc32 %08x)\n",
		len(acks), to, from, r.Reason, to, size, sampleTopic, sum)
	d.master = to
	return nil
}

// followed waits until the two sites other than master hold master's
// bytes of the sample topic, and returns their crc32 and size.
func (d *demo) followed(ctx context.Context, master *site) (uint32, int64, error) {
	for _, s := range d.sites {
		if s == master {
			continue
		}
		if err := waitFor(ctx, 30*time.Second, func() error { return sameBytes(master, s, sampleTopic) }); err != nil {
			return 0, 0, fmt.Errorf("%s does not follow %s: %w", s.name, master.name, err)
		}
	}
	sum, size := checksum(master, sampleTopic)
	return sum, size, nil
}

// loseMaster cuts bj's WAN links while the producer writes to it (an
// asynchronous topic: bj acknowledges what hf and gz never get), closes
// bj's bundle without a handover, promotes hf and checks that the producer
// continues there and gz follows hf. It returns the messages bj
// acknowledged that hf lacks.
func (d *demo) loseMaster(ctx context.Context, p *ackProducer, step int) ([]int, error) {
	bj, hf, gz := d.site("bj"), d.site("hf"), d.site("gz")
	d.printf("[failover %d/%d] unplanned loss of bj\n", step, failoverSteps)
	if _, err := hf.b.Promote(ctx, false); !errors.Is(err, bundle.ErrMasterReachable) {
		return nil, fmt.Errorf("demo: failover step %d: promote at hf while bj is reachable: %v, want a refusal", step, err)
	}
	d.printf("      $ metaq-server promote -f %s   (at hf, bj still reachable): refused, as it must be without --force\n", d.confFile(hf))
	p.start(ctx)
	if _, err := p.waitAcks(ctx, "bj", time.Time{}, 20, 15*time.Second); err != nil {
		return nil, fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	bj.relay.SetRefuse(true)
	bj.relay.CutAll()
	cut := time.Now()
	if _, err := p.waitAcks(ctx, "bj", cut, 30, 15*time.Second); err != nil {
		return nil, fmt.Errorf("demo: failover step %d: bj cut off: %w", step, err)
	}
	p.stop()
	afterCut := 0
	for _, a := range p.snapshot() {
		if a.site == "bj" && a.at.After(cut) {
			afterCut++
		}
	}
	lost := time.Now()
	err := bj.b.Close()
	bj.b = nil
	if err != nil {
		return nil, fmt.Errorf("demo: failover step %d: close bj: %w", step, err)
	}
	d.printf("      bj's replication links went down; bj, still taking puts (%s is asynchronous), acknowledged %d more messages in %v; then bj's bundle stopped without a handover\n",
		sampleTopic, afterCut, lost.Sub(cut).Round(time.Millisecond))

	p.start(ctx)
	var rep bundle.PromoteReport
	if err := waitFor(ctx, 30*time.Second, func() error {
		var err error
		rep, err = hf.b.Promote(ctx, false)
		return err
	}); err != nil {
		return nil, fmt.Errorf("demo: failover step %d: promote hf: %w", step, err)
	}
	behind := fmt.Sprintf("known to be %d bytes behind (bj's durable end as bj last told hf)", rep.BehindBytes)
	if rep.Lag != nil {
		behind += fmt.Sprintf("; bj's last gossiped lag report for hf's group: %d bytes, %d messages", rep.Lag.Bytes, rep.Lag.Messages)
	}
	d.printf("      $ metaq-server promote -f %s   (at hf): generation %d in %v, %s\n", d.confFile(hf), rep.Generation,
		rep.Took.Round(time.Millisecond), behind)
	first, err := p.waitAcks(ctx, "hf", lost, 20, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("demo: failover step %d: producer at hf: %w", step, err)
	}
	p.stop()
	d.master = "hf"
	d.printf("      the producer's first put at hf was acknowledged %v after bj was lost (with the promotion run at once)\n",
		first.at.Sub(lost).Round(time.Millisecond))
	if err := waitFor(ctx, 30*time.Second, func() error { return sameBytes(hf, gz, sampleTopic) }); err != nil {
		return nil, fmt.Errorf("demo: failover step %d: gz does not follow hf: %w", step, err)
	}
	if tails, err := georeplicator.ListTails(d.tailDir(gz)); err != nil || len(tails) > 0 {
		return nil, fmt.Errorf("demo: failover step %d: gz saved records aside (%v, %v): it should never have had bj's last ones", step, tails, err)
	}
	acks := p.snapshot()
	missing, err := missingAt(ctx, hf.b.Broker.Addr().String(), sampleTopic, 4, acks)
	if err != nil {
		return nil, fmt.Errorf("demo: failover step %d: read hf: %w", step, err)
	}
	// A put bj answered just after the cut may have been shipped just
	// before it, so the count can differ from afterCut by what was in flight.
	if len(missing) == 0 {
		return nil, fmt.Errorf("demo: failover step %d: hf holds every message bj acknowledged while cut off", step)
	}
	for _, seq := range missing {
		if acks[seq].site != "bj" {
			return nil, fmt.Errorf("demo: failover step %d: hf lacks message %d, which %s acknowledged", step, seq, acks[seq].site)
		}
	}
	sum, size := checksum(hf, sampleTopic)
	d.printf("      gz follows hf (same %d bytes, crc32 %08x) and saved nothing aside; hf lacks %d messages bj acknowledged (%s): "+
		"the replication lag at the loss, all from bj's last moments\n", size, sum, len(missing), seqList(missing))
	return missing, nil
}

// rejoin restarts bj as a slave of hf, as an operator would after a
// failover, and checks that it cut exactly the messages hf lacks, saved
// them aside, and follows hf byte for byte.
func (d *demo) rejoin(ctx context.Context, step int, missing []int) error {
	bj, hf := d.site("bj"), d.site("hf")
	d.printf("[failover %d/%d] bj returns as a slave of hf\n", step, failoverSteps)
	conf := filepath.Join(bj.dir, "conf")
	props := filepath.Join(conf, "async_slave.properties")
	if err := os.WriteFile(props, []byte(asyncSlaveProperties("bj", 1, "hf", hf.relay.Addr())), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	bj.relay.SetRefuse(false)
	d.printf("      $ metaq-server start slave -f %s -s %s   (masterAddress = hf's replication address)\n", d.confFile(bj), props)
	start := time.Now()
	if err := d.restartAsSlave(ctx, bj, props); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Second, func() error { return sameBytes(hf, bj, sampleTopic) }); err != nil {
		return fmt.Errorf("demo: failover step %d: bj does not follow hf: %w", step, err)
	}
	d.printf("      bj follows hf byte for byte %v after its start\n", time.Since(start).Round(time.Millisecond))
	dir := d.tailDir(bj)
	d.printf("      $ metaq-server unreplicated -f %s\n", d.confFile(bj))
	tails, err := listTails(d.out, dir)
	if err != nil {
		return fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	saved, err := tailPayloads(tails)
	if err != nil {
		return fmt.Errorf("demo: failover step %d: %w", step, err)
	}
	for _, seq := range missing {
		if !saved[ackPayload(seq)] {
			return fmt.Errorf("demo: failover step %d: message %d, acknowledged by bj and missing at hf, is not among bj's saved records", step, seq)
		}
	}
	// Beyond those the tail may hold puts whose answer never reached the
	// producer (in flight when it stopped or timed out): it sent them again,
	// so hf holds them too.
	extra := 0
	for body := range saved {
		var seq int
		if _, err := fmt.Sscanf(body, `{"failover":%d}`, &seq); err != nil {
			return fmt.Errorf("demo: failover step %d: bj saved a record that is not the producer's: %q", step, body)
		}
		if !slices.Contains(missing, seq) {
			extra++
		}
	}
	d.printf("      every one of the %d acknowledged messages hf lacks is in bj's saved tail (with %d puts the producer sent again), "+
		"cut from bj's log, never served as replicated;\n      to publish them again at hf: metaq-server unreplicated -publish -f %s -brokers %s\n",
		len(missing), extra, d.confFile(bj), hf.b.Broker.Addr().String())
	d.printSites()
	return nil
}

// restartAsSlave starts bj's bundle again in slave mode with props.
func (d *demo) restartAsSlave(ctx context.Context, s *site, props string) error {
	lf, err := os.OpenFile(filepath.Join(s.dir, "bundle.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if s.log != nil {
		s.log.Close()
	}
	s.log = lf
	b, err := bundle.New(bundle.Options{
		ConfigPath: filepath.Join(s.dir, "conf", "server.ini"),
		Logger:     slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(s.ports.server),
		Mode:       bundle.ModeSlave,
		PluginPath: props,
	})
	if err != nil {
		return fmt.Errorf("demo: site %s: %w", s.name, err)
	}
	if err := b.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("demo: restart site %s as a slave: %w", s.name, err)
	}
	s.b, s.slave, s.slaveID = b, true, 1
	return nil
}

func (d *demo) confFile(s *site) string { return filepath.Join(s.dir, "conf", "server.ini") }

func (d *demo) tailDir(s *site) string {
	return filepath.Join(s.dir, "data", "replication", "unreplicated")
}

// printSites prints each site's role after the failover.
func (d *demo) printSites() {
	for _, s := range d.sites {
		role := "master, takes puts"
		if r := s.b.Broker.WriteRefusal(); r != nil {
			role = fmt.Sprintf("slave, refuses puts (%d)", map[bool]int{true: 503, false: 403}[r.Retry])
		}
		d.printf("      %s: %s\n", s.name, role)
	}
}

// listTails prints the saved tails in dir as `metaq-server unreplicated`
// does.
func listTails(w io.Writer, dir string) ([]georeplicator.TailFile, error) {
	tails, err := georeplicator.ListTails(dir)
	if err != nil {
		return nil, err
	}
	sort.Slice(tails, func(i, j int) bool { return tails[i].Path < tails[j].Path })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "      PARTITION\tFROM\tTO\tGEN\tRECORDS\tFILE")
	for _, t := range tails {
		fmt.Fprintf(tw, "      %s-%d\t%d\t%d\t%d\t%d\t%s\n", t.Topic, t.Partition, t.From, t.To, t.Generation, t.Records, filepath.Base(t.Path))
	}
	tw.Flush()
	return tails, nil
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
