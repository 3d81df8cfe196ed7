package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"metaq/georeplicator"
	"metaq/internal/bundle"
)

// The failover steps on the sites in this process: every replication link
// crosses the emulated WAN through the relay its destination advertises
// ([replication] advertise), so cutting bj's relay cuts bj's replication.

// Failover runs the -failover steps.
func (d *demo) Failover(ctx context.Context) error { return runFailover(ctx, d.out, d) }

func (d *demo) newProducer() *ackProducer {
	addrs := map[string]string{}
	for _, s := range d.sites {
		addrs[s.name] = d.metaqAddr(s.name)
	}
	return newAckProducer(sampleTopic, []string{"bj", "hf", "gz"}, addrs)
}

func (d *demo) producerWhere() string { return "in this process, on loopback" }

func (d *demo) commandsRun() string {
	return "each $ command below is run as the call it makes on the site's bundle"
}

func (d *demo) replAddr(site string) string { return d.site(site).relay.Addr() }

func (d *demo) metaqAddr(site string) string {
	return "127.0.0.1:" + strconv.Itoa(d.site(site).ports.server)
}

func (d *demo) confFile(site string) string {
	return filepath.Join(d.site(site).dir, "conf", "server.ini")
}

func (d *demo) tailDir(site string) string {
	return filepath.Join(d.site(site).dir, "data", "replication", "unreplicated")
}

func (d *demo) setMaster(site string) { d.master = site }

func (d *demo) switchover(ctx context.Context, from, to string) (bundle.SwitchoverReport, error) {
	return d.site(from).b.Switchover(ctx, to, d.replAddr(to))
}

func (d *demo) promote(ctx context.Context, site string, force bool) (bundle.PromoteReport, error) {
	return d.site(site).b.Promote(ctx, force)
}

func (d *demo) blockReplication(site string, on bool) error {
	r := d.site(site).relay
	r.SetRefuse(on)
	if on {
		r.CutAll()
	}
	return nil
}

// kill closes the site's bundle without a handover.
func (d *demo) kill(site string) (string, error) {
	s := d.site(site)
	err := s.b.Close()
	s.b = nil
	if err != nil {
		return "", fmt.Errorf("close %s: %w", site, err)
	}
	return site + "'s bundle stopped without a handover", nil
}

// startSlave starts the site's bundle again in slave mode with props.
func (d *demo) startSlave(ctx context.Context, site, props string) error {
	s := d.site(site)
	lf, err := os.OpenFile(filepath.Join(s.dir, "bundle.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if s.log != nil {
		s.log.Close()
	}
	s.log = lf
	b, err := bundle.New(bundle.Options{
		ConfigPath: d.confFile(site),
		Logger:     slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ListenAddr: d.metaqAddr(site),
		Mode:       bundle.ModeSlave,
		PluginPath: props,
	})
	if err != nil {
		return fmt.Errorf("demo: site %s: %w", site, err)
	}
	if err := b.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("demo: start %s as a slave: %w", site, err)
	}
	s.b, s.slave = b, true
	return nil
}

func (d *demo) held(ctx context.Context, site string) (map[int]bool, error) {
	return heldSeqs(ctx, d.metaqAddr(site), sampleTopic, 4)
}

func (d *demo) sameAs(ctx context.Context, master string, others ...string) (uint32, int64, error) {
	m := d.site(master)
	for _, o := range others {
		s := d.site(o)
		if err := waitFor(ctx, 30*time.Second, func() error { return sameBytes(m, s, sampleTopic) }); err != nil {
			return 0, 0, fmt.Errorf("%s does not follow %s: %w", o, master, err)
		}
	}
	sum, size := checksum(m, sampleTopic)
	return sum, size, nil
}

func (d *demo) refusal(_ context.Context, site string) (string, error) {
	if r := d.site(site).b.Broker.WriteRefusal(); r != nil {
		return fmt.Sprintf("%d: %s", map[bool]int{true: 503, false: 403}[r.Retry], r.Reason), nil
	}
	return "", nil
}

// listUnreplicated prints the site's saved tails as `metaq-server
// unreplicated` does.
func (d *demo) listUnreplicated(_ context.Context, site string, w io.Writer) error {
	tails, err := georeplicator.ListTails(d.tailDir(site))
	if err != nil {
		return err
	}
	sort.Slice(tails, func(i, j int) bool { return tails[i].Path < tails[j].Path })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "      PARTITION\tFROM\tTO\tCUT AT GEN\tRECORDS\tFILE")
	for _, t := range tails {
		fmt.Fprintf(tw, "      %s-%d\t%d\t%d\t%d\t%d\t%s\n", t.Topic, t.Partition, t.From, t.To, t.Generation, t.Records, t.Path)
	}
	return tw.Flush()
}
