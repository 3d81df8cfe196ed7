package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"metaq/broker/client"
	"metaq/configsync"
	"metaq/topology"
)

// Internal modes: the netns demo runs copies of its own binary inside the
// site namespaces (ip netns exec), because the MetaQ client opens its
// sockets on goroutines the demo cannot pin to a namespace.
const (
	internalStep = "__netns-step" // one tour step; JSON request in, JSON answer on stdout
	internalNATS = "__netns-nats" // configsync's NATS server: <listen> <storeDir>
)

// stepRequest is one tour step run inside a namespace.
type stepRequest struct {
	Op         string            `json:"op"` // produce, compare, consume, trickle
	Addr       string            `json:"addr,omitempty"`
	Addrs      map[string]string `json:"addrs,omitempty"` // compare: site -> MetaQ address; "bj" is the reference
	Local      string            `json:"local,omitempty"` // consume: the site's own MetaQ address
	Site       string            `json:"site,omitempty"`
	Topic      string            `json:"topic"`
	N          int               `json:"n,omitempty"` // messages (produce, consume) or partitions (compare)
	Partitions int               `json:"partitions,omitempty"`
	From       string            `json:"from,omitempty"`
	RouteURL   string            `json:"routeURL,omitempty"`
	OffsetFile string            `json:"offsetFile,omitempty"`
	Timeout    time.Duration     `json:"timeout,omitempty"`
	// Ref is the site compare takes as the reference (default bj).
	Ref string `json:"ref,omitempty"`
	// Order lists the sites failover-produce tries, in order.
	Order []string `json:"order,omitempty"`
}

// ackLine is one acknowledgement failover-produce reports on stdout.
type ackLine struct {
	Seq  int    `json:"seq"`
	Site string `json:"site"`
	At   int64  `json:"at"` // Unix nanoseconds
}

type heldResult struct {
	Seqs []int `json:"seqs"`
}

type probeResult struct {
	Refusal string `json:"refusal"`
}

type produceResult struct {
	Sent int `json:"sent"`
	// Partition and Offset answer produce-one: where the master stored it.
	Partition int   `json:"partition,omitempty"`
	Offset    int64 `json:"offset,omitempty"`
}

type compareResult struct {
	Sum   uint32 `json:"sum"`
	Bytes int64  `json:"bytes"`
}

type consumeResult struct {
	Read int `json:"read"`
}

// internalMain runs an internal mode named by args[0] and exits; it
// returns false when args name none.
func internalMain(args []string) bool {
	if len(args) == 0 || (args[0] != internalStep && args[0] != internalNATS) {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case args[0] == internalNATS && len(args) == 3:
		err = runNATS(ctx, args[1], args[2])
	case args[0] == internalStep && len(args) == 2:
		var req stepRequest
		if err = json.Unmarshal([]byte(args[1]), &req); err == nil {
			var res any
			if res, err = runStep(ctx, req); err == nil && res != nil {
				err = json.NewEncoder(os.Stdout).Encode(res)
			}
		}
	default:
		err = fmt.Errorf("bad internal arguments %q", args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "metaq-demo "+args[0]+":", err)
		stop()
		os.Exit(1)
	}
	stop()
	os.Exit(0)
	return true
}

// runNATS serves configsync's NATS server (with JetStream) on listen until
// a signal.
func runNATS(ctx context.Context, listen, store string) error {
	srv, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: listen, StoreDir: store})
	if err != nil {
		return err
	}
	fmt.Println("NATS for configsync listening on", listen)
	<-ctx.Done()
	srv.Close()
	return nil
}

func runStep(ctx context.Context, req stepRequest) (any, error) {
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	switch req.Op {
	case "produce":
		if err := produce(ctx, req.Addr, req.Topic, req.N, req.From); err != nil {
			return nil, err
		}
		return produceResult{Sent: req.N}, nil
	case "produce-one":
		r, err := produceOne(ctx, req.Addr, req.Topic, req.From)
		if err != nil {
			return nil, err
		}
		return produceResult{Sent: 1, Partition: r.Partition.Partition, Offset: r.Offset}, nil
	case "trickle":
		for i := 0; ctx.Err() == nil; i++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = produce(pctx, req.Addr, req.Topic, 1, "tick-"+strconv.Itoa(i))
			cancel()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		return nil, nil
	case "failover-produce":
		// Sends until a signal, one acknowledgement per stdout line, starting
		// at message N and site Site.
		p := newAckProducer(req.Topic, req.Order, req.Addrs)
		p.setPosition(req.N, req.Site)
		enc := json.NewEncoder(os.Stdout)
		p.onAck = func(a ack) { enc.Encode(ackLine{Seq: a.seq, Site: a.site, At: a.at.UnixNano()}) }
		p.run(ctx)
		return nil, nil
	case "held":
		held, err := heldSeqs(ctx, req.Addr, req.Topic, req.N)
		if err != nil {
			return nil, err
		}
		res := heldResult{Seqs: []int{}}
		for seq := range held {
			res.Seqs = append(res.Seqs, seq)
		}
		return res, nil
	case "probe":
		// One put: the broker's answer, "" when it took it.
		err := produce(ctx, req.Addr, req.Topic, 1, "probe")
		if err != nil {
			return probeResult{Refusal: err.Error()}, nil
		}
		return probeResult{}, nil
	case "compare":
		return compareStep(ctx, req)
	case "consume":
		return consumeStep(ctx, req)
	}
	return nil, fmt.Errorf("unknown step %q", req.Op)
}

// compareStep waits until every site holds the same records of the topic
// at the same offsets as the reference site (bj unless Ref), and returns
// its checksum and size.
func compareStep(ctx context.Context, req stepRequest) (compareResult, error) {
	refSite := req.Ref
	if refSite == "" {
		refSite = "bj"
	}
	c, err := client.New(ctx, client.Config{Brokers: []string{req.Addrs[refSite]}})
	if err != nil {
		return compareResult{}, fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	var ref compareResult
	err = waitFor(ctx, req.Timeout, func() error {
		var err error
		if ref, err = remoteChecksum(ctx, c, req.Addrs[refSite], req.Topic, req.N); err != nil {
			return err
		}
		if ref.Bytes == 0 {
			return fmt.Errorf("%s has no data in %s", refSite, req.Topic)
		}
		names := make([]string, 0, len(req.Addrs))
		for s := range req.Addrs {
			names = append(names, s)
		}
		sort.Strings(names)
		for _, s := range names {
			if s == refSite {
				continue
			}
			got, err := remoteChecksum(ctx, c, req.Addrs[s], req.Topic, req.N)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			if got != ref {
				return fmt.Errorf("%s holds %d bytes (crc32 %08x), %s %d (crc32 %08x)", s, got.Bytes, got.Sum, refSite, ref.Bytes, ref.Sum)
			}
		}
		return nil
	})
	return ref, err
}

// remoteChecksum reads every record of the topic's partitions from one
// broker and hashes offsets, ids, flags, attributes and bodies in order.
func remoteChecksum(ctx context.Context, c *client.Client, addr, topic string, partitions int) (compareResult, error) {
	h := crc32.NewIEEE()
	var size int64
	for p := range partitions {
		part := client.Partition{BrokerID: 0, Partition: p}
		lo, err := c.NearestOffset(ctx, topic, "", part, 0, addr)
		if errors.Is(err, client.ErrNoStore) {
			continue
		}
		if err != nil {
			return compareResult{}, err
		}
		hi, err := c.NearestOffset(ctx, topic, "", part, math.MaxInt64, addr)
		if err != nil {
			return compareResult{}, err
		}
		fmt.Fprintf(h, "%d:%d-%d;", p, lo, hi)
		for off := lo; off < hi; {
			r, err := c.Fetch(ctx, client.FetchRequest{Topic: topic, Partition: part, Offset: off, MaxSize: 1 << 20, Addr: addr})
			if err != nil {
				return compareResult{}, err
			}
			if r.Status != 200 || r.NextOffset <= off {
				return compareResult{}, fmt.Errorf("%s-%d at %d: status %d", topic, p, off, r.Status)
			}
			for _, m := range r.Messages {
				fmt.Fprintf(h, "%d %d %d %q %d:", m.Offset, m.ID, m.Flag, m.Attribute, len(m.Payload))
				h.Write(m.Payload)
			}
			off = r.NextOffset
		}
		size += hi - lo
	}
	return compareResult{Sum: h.Sum32(), Bytes: size}, nil
}

// consumeStep waits until the router (polling the site's /lag) sends the
// site's reads to its own broker, then reads req.N messages with a
// local-first consumer.
func consumeStep(ctx context.Context, req stepRequest) (consumeResult, error) {
	rr, err := topology.NewRemoteRouter(topology.RemoteRouterOptions{URLs: []string{req.RouteURL}, Interval: 300 * time.Millisecond})
	if err != nil {
		return consumeResult{}, err
	}
	_ = rr.Start(ctx) // keeps polling when the first fetch fails
	defer rr.Close()
	if err := waitFor(ctx, 20*time.Second, func() error {
		addr, err := rr.Route(ctx, client.RouteRequest{Topic: req.Topic, BrokerID: 0, Site: req.Site, Preference: client.LocalFirst})
		if err != nil {
			return err
		}
		if addr != req.Local {
			return fmt.Errorf("router still sends %s's reads to %s", req.Site, addr)
		}
		return nil
	}); err != nil {
		return consumeResult{}, fmt.Errorf("demo: router: %w", err)
	}
	c, err := client.New(ctx, client.Config{Brokers: []string{req.Addr}})
	if err != nil {
		return consumeResult{}, fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	var parts []client.Partition
	for p := range req.Partitions {
		parts = append(parts, client.Partition{BrokerID: 0, Partition: p})
	}
	cons, err := client.NewConsumer(c, "demo-"+req.Site, client.WithPartitions(parts...), client.WithSite(req.Site),
		client.WithReadPreference(client.LocalFirst), client.WithRouter(rr),
		client.WithStart(client.StartEarliest()), client.WithOffsetFile(req.OffsetFile))
	if err != nil {
		return consumeResult{}, fmt.Errorf("demo: consumer: %w", err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	if err := cons.Subscribe(req.Topic, func(_ context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Payload)] = true
		if len(seen) == req.N {
			close(done)
		}
		return nil
	}); err != nil {
		return consumeResult{}, err
	}
	if err := cons.Start(ctx); err != nil {
		return consumeResult{}, fmt.Errorf("demo: consumer: %w", err)
	}
	defer cons.Close(context.Background())
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < req.N {
		return consumeResult{Read: len(seen)}, fmt.Errorf("demo: consumer at %s read %d of %d messages", req.Site, len(seen), req.N)
	}
	return consumeResult{Read: len(seen)}, nil
}
