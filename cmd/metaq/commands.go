package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/client"
)

func runProduce(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "produce")
	topic := fs.String("topic", "", "topic to send to (required)")
	n := fs.Int("n", 0, "generate this many messages instead of reading stdin lines")
	size := fs.Int("size", 100, "payload size in bytes of generated messages")
	key := fs.String("key", "", "message key for -selector hash or ordered")
	attr := fs.String("attr", "", "attribute to attach to every message")
	sel := fs.String("selector", "roundrobin", "partition selector: roundrobin, random, hash, ordered")
	async := fs.Bool("async", false, "send asynchronously with a bounded window")
	window := fs.Int("window", 256, "in-flight window for -async")
	quiet := fs.Bool("q", false, "no progress line and no per-message results")
	if err := g.parseWithTopic(fs, args, "produce", topic); err != nil {
		return err
	}
	var selector client.Selector
	switch *sel {
	case "roundrobin", "rr":
		selector = &client.RoundRobin{}
	case "random":
		selector = client.Random{}
	case "hash":
		selector = client.KeyHash{}
	case "ordered":
		selector = &client.Ordered{}
	default:
		return fmt.Errorf("produce: unknown selector %q", *sel)
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := client.NewProducer(c, client.WithSelector(selector), client.WithMaxInFlight(*window))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	if err := p.Publish(ctx, *topic); err != nil {
		return err
	}

	next := lineSource(*n, *size)
	prog := newProgress(g.stderr, !*quiet && *n > 1000)
	var sent, failed, sentBytes atomic.Int64
	var firstErr error
	var errMu sync.Mutex
	// report is called with each send's outcome (from the producer's
	// goroutines under -async); reading stdin, a failure is printed as it
	// happens, naming the line, so an operator piping a file sees which
	// lines did not go.
	report := func(m *client.Message, line int64) func(client.SendResult, error) {
		return func(r client.SendResult, err error) {
			if err != nil {
				failed.Add(1)
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				if *n == 0 {
					fmt.Fprintf(g.stderr, "produce: line %d (%s) failed: %v\n", line, clip(m.Payload, 40), err)
				}
				errMu.Unlock()
				return
			}
			sentBytes.Add(int64(len(m.Payload)))
			sent.Add(1)
			if !*quiet && *n == 0 {
				errMu.Lock()
				fmt.Fprintf(g.stdout, "%s offset=%d id=%d\n", r.Partition, r.Offset, r.ID)
				errMu.Unlock()
			}
		}
	}
	var line int64
	for {
		payload, ok, err := next()
		if err != nil {
			return err
		}
		if !ok || ctx.Err() != nil {
			break
		}
		line++
		m := &client.Message{Topic: *topic, Payload: payload}
		if *key != "" {
			m.Key = []byte(*key)
		}
		if *attr != "" {
			m.HasAttribute, m.Attribute = true, *attr
		}
		if *async {
			if err := p.SendAsync(ctx, m, report(m, line)); err != nil {
				report(m, line)(client.SendResult{}, err)
				break
			}
		} else {
			report(m, line)(p.Send(ctx, m))
		}
		prog.update("sent", sent.Load(), fmt.Sprintf(", failed %d", failed.Load()))
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.Flush(fctx)
	prog.done("sent", sent.Load(), fmt.Sprintf(", failed %d", failed.Load()))
	// What was sent, always: a run that sent nothing must say so.
	fmt.Fprintf(g.stderr, "produce: sent %d messages (%d payload bytes) to %s, %d failed\n",
		sent.Load(), sentBytes.Load(), *topic, failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("produce: %d messages failed, first: %v", failed.Load(), firstErr)
	}
	return ctx.Err()
}

// clip quotes at most n bytes of b, for naming a message in an error.
func clip(b []byte, n int) string {
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}

// lineSource yields stdin lines, or n generated payloads of size bytes.
func lineSource(n, size int) func() ([]byte, bool, error) {
	if n > 0 {
		i := 0
		return func() ([]byte, bool, error) {
			if i >= n {
				return nil, false, nil
			}
			i++
			b := make([]byte, size)
			rand.Read(b)
			const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
			for j := range b {
				b[j] = letters[int(b[j])%len(letters)]
			}
			prefix := strconv.Itoa(i) + " "
			copy(b, prefix)
			return b, true, nil
		}
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return func() ([]byte, bool, error) {
		if !sc.Scan() {
			return nil, false, sc.Err()
		}
		return append([]byte(nil), sc.Bytes()...), true, nil
	}
}

func runConsume(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "consume")
	topic := fs.String("topic", "", "topic to consume (required)")
	group := fs.String("group", "metaq-cli", "consumer group")
	id := fs.String("id", "", "consumer id (default <ip>-<pid>-<uuid>)")
	broadcast := fs.Bool("broadcast", false, "broadcast consumer: own group per host, offsets in a local file")
	offsetFile := fs.String("offset-file", "", "keep offsets in this local file instead of ZooKeeper")
	start := fs.String("start", "earliest", "where partitions without a saved offset start: earliest, latest, offset:N, time:T")
	ignoreSaved := fs.Bool("ignore-saved", false, "apply -start even where an offset is saved")
	strategy := fs.String("strategy", "DEFAULT", "balancing strategy: DEFAULT or CONSIST")
	max := fs.Int64("n", 0, "stop after this many messages (0: until interrupted)")
	full := fs.Bool("full", false, "print partition, offset, id and time with each payload")
	var route routeFlags
	route.register(fs)
	quiet := fs.Bool("q", false, "no progress line on stderr")
	if err := g.parseWithTopic(fs, args, "consume", topic); err != nil {
		return err
	}
	sp, err := parseStart(*start)
	if err != nil {
		return err
	}
	router, pref, err := route.router(ctx, g, "consume")
	if err != nil {
		return err
	}
	// One consumer per run: the process-wide duplicate filter would only
	// hide replays an operator asked for with "offsets -reset".
	opts := []client.ConsumerOption{client.WithStart(sp), client.WithSite(route.site), client.WithReadPreference(pref),
		client.WithMaxLag(route.maxLag), client.WithoutDuplicateFilter()}
	served := newServedBy(router)
	if router != nil {
		defer router.Close()
		opts = append(opts, client.WithRouter(served), client.WithRouteInterval(time.Second))
	}
	if route.site != "" {
		defer served.report(g.stderr, pref)
	}
	if *id != "" {
		opts = append(opts, client.WithConsumerID(*id))
	}
	if *broadcast {
		opts = append(opts, client.WithBroadcast())
	}
	if *offsetFile != "" {
		opts = append(opts, client.WithOffsetFile(*offsetFile))
	}
	if *ignoreSaved {
		opts = append(opts, client.WithIgnoreSavedOffsets())
	}
	switch strings.ToUpper(*strategy) {
	case "DEFAULT":
	case "CONSIST":
		opts = append(opts, client.WithStrategy(client.StrategyConsist))
	default:
		return fmt.Errorf("consume: unknown strategy %q", *strategy)
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	cs, err := client.NewConsumer(c, *group, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var n atomic.Int64
	var outMu sync.Mutex
	w := bufio.NewWriter(g.stdout)
	cs.Subscribe(*topic, func(_ context.Context, m *client.Message) error {
		if *max > 0 && n.Load() >= *max {
			return errors.New("limit reached") // not handled: redelivered to the next run
		}
		outMu.Lock()
		fmt.Fprintln(w, formatMessage(m, *full))
		w.Flush()
		outMu.Unlock()
		if n.Add(1) == *max {
			cancel()
		}
		return nil
	})
	if err := cs.Start(ctx); err != nil {
		return err
	}
	prog := newProgress(g.stderr, !*quiet)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			prog.update("consumed", n.Load(), "")
		}
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	err = cs.Close(cctx)
	prog.done("consumed", n.Load(), "")
	return err
}

func partitionFlag(s string) (client.Partition, error) {
	if !strings.Contains(s, "-") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return client.Partition{}, fmt.Errorf("bad partition %q (brokerId-partition)", s)
		}
		return client.Partition{BrokerID: 0, Partition: n}, nil
	}
	return client.ParsePartition(s)
}

func runFetch(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "fetch")
	topic := fs.String("topic", "", "topic (required)")
	part := fs.String("partition", "0-0", "partition as brokerId-partition")
	offset := fs.Int64("offset", 0, "offset to start at")
	at := fs.String("time", "", "start at the first message stored at or after this time instead of -offset")
	count := fs.Int("n", 10, "number of messages to print (0: until the end)")
	maxSize := fs.Int("max-size", 1<<20, "get maxSize in bytes")
	full := fs.Bool("full", true, "print partition, offset, id and time with each payload")
	var route routeFlags
	route.register(fs)
	if err := g.parseWithTopic(fs, args, "fetch", topic); err != nil {
		return err
	}
	p, err := partitionFlag(*part)
	if err != nil {
		return err
	}
	router, pref, err := route.router(ctx, g, "fetch")
	if err != nil {
		return err
	}
	if router != nil {
		defer router.Close()
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	bp, done, err := g.bindPartition(ctx, c, p)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	defer done()
	// Each get asks the router again, as a pinned consumer does, so a
	// fetch that runs long follows the site's health both ways.
	lastAddr := ""
	addrFor := func() string {
		if router == nil {
			return ""
		}
		reps, err := c.Replicas(ctx)
		if err != nil {
			return ""
		}
		addr, err := router.Route(ctx, client.RouteRequest{Topic: *topic, BrokerID: p.BrokerID, Partition: p.Partition,
			Site: route.site, Preference: pref, MaxLag: route.maxLag, Replicas: reps[p.BrokerID]})
		if err != nil {
			addr = "" // no route: the master, as the client picks it
		}
		addr = strings.TrimPrefix(addr, "meta://")
		if addr != lastAddr {
			shown := addr
			if shown == "" {
				shown = "the master (no healthy replica in the pool view)"
			}
			fmt.Fprintf(g.stderr, "reading %s from %s\n", p, shown)
			lastAddr = addr
		}
		return addr
	}
	off := *offset
	if *at != "" {
		t, err := parseTime(*at)
		if err != nil {
			return err
		}
		if off, err = bp.C.OffsetForTime(ctx, *topic, bp.P, t); err != nil {
			return err
		}
	}
	printed := 0
	for *count == 0 || printed < *count {
		r, err := bp.C.Fetch(ctx, client.FetchRequest{Topic: *topic, Partition: bp.P, Offset: off, MaxSize: *maxSize, Addr: addrFor()})
		if err != nil && len(r.Messages) == 0 {
			return err
		}
		for i := range r.Messages {
			r.Messages[i].Partition = bp.Shown
			if *count > 0 && printed >= *count {
				// Stopped inside this answer: the next offset is past the
				// last message printed, not past the whole answer.
				r.NextOffset = r.Messages[i].Offset
				break
			}
			fmt.Fprintln(g.stdout, formatMessage(&r.Messages[i], *full))
			printed++
		}
		switch r.Status {
		case 301:
			fmt.Fprintf(g.stderr, "moved: %d -> %d\n", off, r.NextOffset)
			off = r.NextOffset
			continue
		case 403:
			return errors.New("fetch: partition closed (403)")
		case 404:
			fmt.Fprintf(g.stderr, "end of partition at %d\n", off)
			return nil
		}
		if r.NextOffset == off {
			if r.Bytes >= *maxSize {
				*maxSize *= 2
				continue
			}
			return nil
		}
		off = r.NextOffset
	}
	fmt.Fprintf(g.stderr, "next offset %d\n", off)
	return nil
}

func runFind(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "find")
	topic := fs.String("topic", "", "topic (required)")
	idStr := fs.String("id", "", "message id (required)")
	window := fs.Duration("window", 2*time.Second, "how far before the id's time to start searching (clock skew between brokers)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" || *idStr == "" {
		return errors.New("find: -topic and -id are required")
	}
	id, err := strconv.ParseInt(*idStr, 10, 64)
	if err != nil {
		return fmt.Errorf("find: bad id %q", *idStr)
	}
	at := client.IDTime(id)
	brokerID := int(id>>12) & 0x3FF
	fmt.Fprintf(g.stderr, "id %d: stored at %s by broker %d\n", id, at.UTC().Format(time.RFC3339Nano), brokerID)
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	parts, done, err := g.partitionsOf(ctx, c, *topic)
	if err != nil {
		return err
	}
	defer done()
	for _, bp := range parts {
		if bp.Shown.BrokerID != brokerID && len(parts) > 1 && bp.Shown.Partition >= 0 {
			continue // ids carry the broker that stored them
		}
		m, ok, err := findInPartition(ctx, bp.C, *topic, bp.P, id, at.Add(-*window))
		if err != nil {
			return err
		}
		if ok {
			m.Partition = bp.Shown
			fmt.Fprintln(g.stdout, formatMessage(&m, true))
			return nil
		}
	}
	return fmt.Errorf("find: message %d not found in %s", id, *topic)
}

// findInPartition starts at the first message stored at or after from and
// reads forward until it passes the id (ids grow within a partition).
func findInPartition(ctx context.Context, c *client.Client, topic string, p client.Partition, id int64, from time.Time) (client.Message, bool, error) {
	off, err := c.OffsetForTime(ctx, topic, p, from)
	if err != nil {
		return client.Message{}, false, err
	}
	for {
		r, err := c.Fetch(ctx, client.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxSize: 256 << 10})
		if err != nil && len(r.Messages) == 0 {
			return client.Message{}, false, err
		}
		for _, m := range r.Messages {
			if m.ID == id {
				return m, true, nil
			}
			if m.ID > id && client.IDTime(m.ID).After(client.IDTime(id).Add(time.Second)) {
				return client.Message{}, false, nil
			}
		}
		if r.Status != 200 || r.NextOffset == off {
			return client.Message{}, false, nil
		}
		off = r.NextOffset
	}
}

func runTopics(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "topics")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	topics, err := c.Topics(ctx)
	if err != nil {
		return err
	}
	for _, t := range topics {
		pub, err := c.Partitions(ctx, t)
		if err != nil {
			return err
		}
		sub, err := c.SubscribedPartitions(ctx, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\tpublish %d partitions %s\tsubscribe %d partitions\n", t, len(pub), brokersOf(pub), len(sub))
	}
	return nil
}

func brokersOf(ps []client.Partition) string {
	count := map[int]int{}
	for _, p := range ps {
		count[p.BrokerID]++
	}
	ids := make([]int, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("broker %d: %d", id, count[id]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func runPartitions(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "partitions")
	topic := fs.String("topic", "", "topic (required)")
	if err := g.parseWithTopic(fs, args, "partitions", topic); err != nil {
		return err
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	parts, done, err := g.partitionsOf(ctx, c, *topic)
	if err != nil {
		return err
	}
	defer done()
	fmt.Fprintln(g.stdout, "PARTITION\tMIN\tMAX")
	for _, bp := range parts {
		lo, err1 := bp.C.EarliestOffset(ctx, *topic, bp.P)
		hi, err2 := bp.C.LatestOffset(ctx, *topic, bp.P)
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintf(g.stdout, "%s\terror: %v\n", bp.Shown, err)
			continue
		}
		fmt.Fprintf(g.stdout, "%s\t%d\t%d\n", bp.Shown, lo, hi)
	}
	return nil
}

func runOffsets(ctx context.Context, g *globals, args []string) error {
	fs := newFlags(g, "offsets")
	group := fs.String("group", "", "consumer group (required)")
	topic := fs.String("topic", "", "topic (required)")
	reset := fs.String("reset", "", "reset every partition to earliest, latest, offset:N or time:T")
	part := fs.String("partition", "", "with -reset, only this partition (brokerId-partition)")
	force := fs.Bool("force", false, "reset even while members own partitions (they overwrite it on their next commit)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *group == "" || *topic == "" {
		return errors.New("offsets: -group and -topic are required")
	}
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	store, err := client.NewZKOffsetStore(c)
	if err != nil {
		return err
	}
	parts, err := c.SubscribedPartitions(ctx, *topic)
	if err != nil {
		return err
	}
	owners, err := c.GroupOwners(ctx, *group, *topic)
	if err != nil {
		return err
	}
	if *reset != "" {
		if len(owners) > 0 && !*force {
			return fmt.Errorf("offsets: group %s has live owners of %s; stop its consumers first or use -force", *group, *topic)
		}
		sp := *reset
		var recs []client.OffsetRecord
		for _, p := range parts {
			if *part != "" && p.String() != *part {
				continue
			}
			off, err := resetOffset(ctx, c, *topic, p, sp)
			if err != nil {
				return fmt.Errorf("offsets: %s: %w", p, err)
			}
			recs = append(recs, client.OffsetRecord{Topic: *topic, Partition: p, Offset: off, MsgID: -1})
		}
		if err := store.Commit(ctx, *group, recs); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "reset %d partitions of %s for group %s\n", len(recs), *topic, *group)
	}
	saved, err := store.List(ctx, *group, *topic)
	if err != nil {
		return err
	}
	byPart := map[client.Partition]client.OffsetRecord{}
	for _, r := range saved {
		byPart[r.Partition] = r
	}
	fmt.Fprintln(g.stdout, "PARTITION\tOFFSET\tMSGID\tMAX\tLAG(bytes)\tOWNER")
	for _, p := range parts {
		hi, err := c.LatestOffset(ctx, *topic, p)
		maxs := strconv.FormatInt(hi, 10)
		if err != nil {
			maxs = "?"
		}
		r, ok := byPart[p]
		offs, ids, lag := "-", "-", "-"
		if ok {
			offs, ids = strconv.FormatInt(r.Offset, 10), strconv.FormatInt(r.MsgID, 10)
			if err == nil {
				lag = strconv.FormatInt(max(hi-r.Offset, 0), 10)
			}
		}
		owner := owners[p]
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(g.stdout, "%s\t%s\t%s\t%s\t%s\t%s\n", p, offs, ids, maxs, lag, owner)
	}
	return nil
}

func resetOffset(ctx context.Context, c *client.Client, topic string, p client.Partition, spec string) (int64, error) {
	switch {
	case spec == "earliest":
		return c.EarliestOffset(ctx, topic, p)
	case spec == "latest":
		return c.LatestOffset(ctx, topic, p)
	case strings.HasPrefix(spec, "offset:"):
		n, err := strconv.ParseInt(spec[len("offset:"):], 10, 64)
		if err != nil || n < 0 || n == math.MaxInt64 {
			return 0, fmt.Errorf("bad offset %q", spec)
		}
		return n, nil
	case strings.HasPrefix(spec, "time:"):
		t, err := parseTime(spec[len("time:"):])
		if err != nil {
			return 0, err
		}
		return c.OffsetForTime(ctx, topic, p, t)
	}
	return 0, fmt.Errorf("bad reset %q (earliest, latest, offset:N, time:T)", spec)
}
