package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Peer flags live here rather than in main.go's options so the peer modes
// stay in their own files; they are registered on flag.CommandLine before
// main parses it.
var (
	peerFlag = flag.String("peer", "",
		"run the load against a peer broker instead of ours: jetstream (embedded NATS server, file storage on a temp dir), nsq (nsqd from -nsqd, disk-backed) or metaq-java (the command of -metaq-java)")
	compareFlag = flag.String("compare", "",
		"comma-separated peers (jetstream,nsq,metaq-java) to run right after our broker with the same flags, then print throughput ratios")
	roundsFlag = flag.Int("rounds", 1,
		"with -compare: repeat the sequence this many times, every other round peers first, and sum the rounds for the ratios")
	nsqdFlag = flag.String("nsqd", "",
		"nsqd binary for -peer/-compare nsq (default: nsqd from $PATH, then $GOPATH/bin, then ~/go/bin)")
)

// target is one broker under load: produce and consume speak its protocol
// with the load shape of options, and close stops whatever was started.
type target struct {
	name    string
	addr    string
	produce func(ctx context.Context, n int, st *stats) error
	consume func(ctx context.Context, n int, st *stats) error
	// group runs the only consumer of group g, reading every partition;
	// nil where -groups is not supported.
	group func(ctx context.Context, g int, st *stats) error
	close func()
}

// dispatch picks the mode from the peer flags: -compare, one -peer, or
// (without them) our broker alone.
func dispatch(o options) error {
	if *peerFlag != "" && *compareFlag != "" {
		return fmt.Errorf("-peer and -compare are exclusive")
	}
	if *compareFlag != "" {
		_, err := runCompare(o, strings.Split(*compareFlag, ","), *roundsFlag, os.Stdout)
		return err
	}
	var t target
	var err error
	if *peerFlag != "" {
		t, err = startPeer(*peerFlag, o)
	} else {
		t, err = oursTarget(o)
	}
	if err != nil {
		return err
	}
	defer t.close()
	res, err := runLoad(o, t)
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	res.print(o)
	return nil
}

// startPeer starts the named peer broker for the load of o.
func startPeer(name string, o options) (target, error) {
	switch strings.TrimSpace(name) {
	case "jetstream":
		return startJetStream(o)
	case "nsq":
		return startNSQ(o, *nsqdFlag)
	case "metaq-java":
		return startMetaQJava(o, *javaCmdFlag)
	}
	return target{}, fmt.Errorf("unknown peer %q (want jetstream, nsq or metaq-java)", name)
}

// oursTarget starts our broker in process (or targets -addr) and drives it
// with main.go's produce and consume.
func oursTarget(o options) (target, error) {
	if o.addr != "" {
		return metaqTarget(o, "metaq", o.addr, func() {}), nil
	}
	addr, stop, err := startBroker(o, "127.0.0.1:0")
	if err != nil {
		return target{}, err
	}
	return metaqTarget(o, "metaq", addr, stop), nil
}

// metaqTarget drives a broker that speaks the MetaQ protocol at addr (ours
// or the Java one) with main.go's produce and consume.
func metaqTarget(o options, name, addr string, close func()) target {
	return target{
		name:    name,
		addr:    addr,
		produce: func(ctx context.Context, n int, st *stats) error { return produce(ctx, o, addr, n, st) },
		consume: func(ctx context.Context, n int, st *stats) error { return consume(ctx, o, addr, n, st) },
		group:   func(ctx context.Context, g int, st *stats) error { return consumeGroup(ctx, o, addr, g, st) },
		close:   close,
	}
}

// runLoad runs o's producers and consumers against t: warm-up, then the
// measured window.
func runLoad(o options, t target) (result, error) {
	fmt.Printf("target %s %s: %d producers x %d in flight, %d consumers, %d groups, %d B messages, %d partitions, warm-up %v, run %v\n",
		t.name, t.addr, o.producers, o.inflight, o.consumers, o.groups, o.size, o.partitions, o.warmup, o.duration)
	if o.groups > 0 && t.group == nil {
		return result{}, fmt.Errorf("-groups is not supported against %s", t.name)
	}
	if o.rate > 0 && t.group == nil {
		return result{}, fmt.Errorf("-rate is not supported against %s", t.name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &stats{}
	var wg sync.WaitGroup
	errCh := make(chan error, o.producers+o.readers())
	for i := range o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.produce(ctx, i, st); err != nil && ctx.Err() == nil {
				errCh <- fmt.Errorf("producer %d: %w", i, err)
			}
		}()
	}
	for i := range o.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.consume(ctx, i, st); err != nil && ctx.Err() == nil {
				errCh <- fmt.Errorf("consumer %d: %w", i, err)
			}
		}()
	}
	for g := range o.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.group(ctx, g, st); err != nil && ctx.Err() == nil {
				errCh <- fmt.Errorf("group %d: %w", g, err)
			}
		}()
	}
	fail := func(err error) (result, error) {
		cancel()
		wg.Wait()
		return result{}, err
	}
	select {
	case err := <-errCh:
		return fail(err)
	case <-time.After(o.warmup):
	}
	st.start()
	select {
	case err := <-errCh:
		return fail(err)
	case <-time.After(o.duration):
	}
	res := st.stop()
	cancel()
	wg.Wait()
	return res, nil
}

// compared is one broker's figures in a -compare run.
type compared struct {
	name string
	res  result
}

// runCompare runs our broker and then each peer with identical options, one
// after the other in this process, rounds times (every other round in the
// reverse order, so neither side always runs on a fresher or warmer
// machine), prints each result, and then a summary with the ratios of our
// throughput to each peer's over all rounds.
func runCompare(o options, peers []string, rounds int, w io.Writer) ([]compared, error) {
	names := []string{"metaq"}
	for _, p := range peers {
		if p = strings.TrimSpace(p); p != "" {
			names = append(names, p)
		}
	}
	var out []compared
	for r := range max(rounds, 1) {
		order := slices.Clone(names)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if len(out) > 0 {
				settle()
			}
			var t target
			var err error
			if name == "metaq" {
				t, err = oursTarget(o)
			} else {
				t, err = startPeer(name, o)
			}
			if err != nil {
				return out, err
			}
			res, err := runLoad(o, t)
			t.close()
			if err != nil {
				return out, fmt.Errorf("%s: %w", t.name, err)
			}
			res.print(o)
			out = append(out, compared{t.name, res})
		}
	}
	printRatios(w, o, names, out)
	return out, nil
}

// settle gives the next run of a comparison the same start as the first:
// the previous run's garbage collected and its unsynced writes (a peer that
// does not fsync leaves them in the page cache) written back, so they are
// not paid for by whoever runs next.
func settle() {
	runtime.GC()
	syscall.Sync()
	time.Sleep(time.Second)
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// printRatios prints one summary line per run, then per broker the totals
// over all its runs and ours/peer ratios of produced and consumed msgs/s.
func printRatios(w io.Writer, o options, names []string, cs []compared) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "summary (%d B, %d producers x %d in flight, %d consumers, %d groups, %d partitions, %v per run):\n",
		o.size, o.producers, o.inflight, o.consumers, o.groups, o.partitions, o.duration)
	total := map[string]*result{}
	for _, c := range cs {
		p50, p99 := c.res.percentile(0.50), c.res.percentile(0.99)
		fmt.Fprintf(w, "  %-9s produce %8.0f msgs/s %7.1f MB/s  p50 %v p99 %v", c.name,
			rate(c.res.puts, c.res.elapsed), rate(c.res.puts*int64(o.size), c.res.elapsed)/1e6,
			p50.Round(time.Microsecond), p99.Round(time.Microsecond))
		if o.readers() > 0 {
			fmt.Fprintf(w, "  consume %8.0f msgs/s", rate(c.res.consumed, c.res.elapsed))
		}
		fmt.Fprintln(w)
		t := total[c.name]
		if t == nil {
			t = &result{}
			total[c.name] = t
		}
		t.puts += c.res.puts
		t.consumed += c.res.consumed
		t.elapsed += c.res.elapsed
	}
	ours := total[names[0]]
	for _, name := range names[1:] {
		peer := total[name]
		if ours == nil || peer == nil {
			continue
		}
		fmt.Fprintf(w, "  ratio %s/%s: produce %.2fx", names[0], name,
			ratio(rate(ours.puts, ours.elapsed), rate(peer.puts, peer.elapsed)))
		if o.readers() > 0 {
			fmt.Fprintf(w, ", consume %.2fx",
				ratio(rate(ours.consumed, ours.elapsed), rate(peer.consumed, peer.elapsed)))
		}
		fmt.Fprintln(w)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// percentile returns the p-quantile of the put latencies (sorting them).
func (r result) percentile(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	return r.lat[int(p*float64(len(r.lat)-1))]
}
