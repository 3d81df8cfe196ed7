package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/testutil"
)

func testRoot() string { return fmt.Sprintf("/metaq-test-client-%d", rand.Int64()) }

func newTestClient(t testing.TB, zk, root string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := New(ctx, Config{ZKServers: []string{zk}, ZKRoot: root, ZKSyncTime: 200 * time.Millisecond,
		RequestTimeout: 5 * time.Second, DialTimeout: 2 * time.Second, Logger: testutil.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// received collects messages by id for loss checks.
type received struct {
	mu   sync.Mutex
	byID map[int64]int
	msgs []Message
}

func newReceived() *received { return &received{byID: map[int64]int{}} }

func (r *received) handler(ctx context.Context, m *Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[m.ID]++
	r.msgs = append(r.msgs, *m)
	return nil
}

func (r *received) has(ids []int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := 0
	for _, id := range ids {
		if r.byID[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d messages not received", missing, len(ids))
	}
	return nil
}

func TestProduceAndPull(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"orders": 3})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	p, err := NewProducer(c)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	parts, err := c.Partitions(ctx, "orders")
	if err != nil || len(parts) != 3 {
		t.Fatalf("partitions %v %v", parts, err)
	}
	var results []SendResult
	for i := 0; i < 9; i++ {
		m := &Message{Topic: "orders", Payload: []byte(fmt.Sprintf("m%d", i))}
		if i%2 == 1 {
			m.HasAttribute, m.Attribute = true, fmt.Sprintf("a%d", i)
		}
		r, err := p.Send(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	// Round robin starts at index 1, as the Java selector.
	if results[0].Partition != (Partition{0, 1}) || results[1].Partition != (Partition{0, 2}) || results[2].Partition != (Partition{0, 0}) {
		t.Fatalf("round robin order %v", results[:3])
	}
	for i, r := range results {
		f, err := c.Fetch(ctx, FetchRequest{Topic: "orders", Partition: r.Partition, Offset: r.Offset, MaxSize: 1024})
		if err != nil || f.Status != 200 || len(f.Messages) == 0 {
			t.Fatalf("fetch %v: %+v %v", r, f, err)
		}
		m := f.Messages[0]
		if m.ID != r.ID || string(m.Payload) != fmt.Sprintf("m%d", i) || m.HasAttribute != (i%2 == 1) {
			t.Fatalf("message %d: %+v", i, m)
		}
		if m.HasAttribute && m.Attribute != fmt.Sprintf("a%d", i) {
			t.Fatalf("attribute %q", m.Attribute)
		}
	}
	// 404 at the end, 301 for Long.MAX_VALUE.
	end, err := c.LatestOffset(ctx, "orders", Partition{0, 1})
	if err != nil || end == 0 {
		t.Fatalf("latest %d %v", end, err)
	}
	f, err := c.Fetch(ctx, FetchRequest{Topic: "orders", Partition: Partition{0, 1}, Offset: end})
	if err != nil || f.Status != 404 {
		t.Fatalf("fetch at end: %+v %v", f, err)
	}
	f, err = c.Fetch(ctx, FetchRequest{Topic: "orders", Partition: Partition{0, 1}, Offset: 1<<63 - 1})
	if err != nil || f.Status != 301 || f.NextOffset != end {
		t.Fatalf("fetch at max: %+v %v", f, err)
	}
}

// specMember is a group member written straight from the Consumer groups notes in broker/wire/doc.go (not using
// the client's consumer): it registers its ids node and claims the
// partitions the DEFAULT rule gives it, recomputed here independently.
func specDefault(me string, consumers, parts []string) []string {
	sort.Strings(consumers)
	sort.Strings(parts)
	i := sort.SearchStrings(consumers, me)
	per, extra := len(parts)/len(consumers), len(parts)%len(consumers)
	start := per*i + min(i, extra)
	n := per
	if i < extra {
		n++
	}
	return parts[start : start+n]
}

func owners(t *testing.T, c *Client, group, topic string) map[string]string {
	t.Helper()
	ctx := context.Background()
	dir := c.Root() + "/consumers/" + group + "/owners/" + topic
	kids, err := c.zk.children(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range kids {
		d, ok, err := c.zk.get(ctx, dir+"/"+k)
		if err == nil && ok {
			out[k] = string(d)
		}
	}
	return out
}

func TestGroupRebalanceJoinLeaveNoLoss(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	topics := map[string]int{"events": 3}
	newTestBroker(t, 0, zk, root, 1<<20, topics)
	newTestBroker(t, 1, zk, root, 1<<20, topics)
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	prod, _ := NewProducer(c)
	defer prod.Close(ctx)

	var sentMu sync.Mutex
	var sent []int64
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			default:
			}
			r, err := prod.Send(ctx, &Message{Topic: "events", Payload: []byte(fmt.Sprint(i))})
			if err == nil {
				sentMu.Lock()
				sent = append(sent, r.ID)
				sentMu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	rcv := newReceived()
	opts := []ConsumerOption{WithCommitInterval(100 * time.Millisecond), WithMaxFetchDelay(50 * time.Millisecond)}
	a, _ := NewConsumer(c, "grp", append(opts, WithConsumerID("a"))...)
	// Exclusive checks that two members never handle one partition at the
	// same time, which owning it twice would allow.
	var exMu sync.Mutex
	active := map[Partition]string{}
	overlaps := 0
	exclusive := func(name string) Handler {
		return func(ctx context.Context, m *Message) error {
			exMu.Lock()
			if o, busy := active[m.Partition]; busy && o != name {
				overlaps++
			}
			active[m.Partition] = name
			exMu.Unlock()
			time.Sleep(200 * time.Microsecond)
			exMu.Lock()
			delete(active, m.Partition)
			exMu.Unlock()
			return rcv.handler(ctx, m)
		}
	}
	a.Subscribe("events", exclusive("a"))
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Assignment()["events"]; len(got) != 6 {
		t.Fatalf("single consumer owns %v", got)
	}

	// A second Go consumer (its own Client, as another process would have).
	c2 := newTestClient(t, zk, root)
	b, _ := NewConsumer(c2, "grp", append(opts, WithConsumerID("b"))...)
	b.Subscribe("events", exclusive("b"))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	all := []string{"0-0", "0-1", "0-2", "1-0", "1-1", "1-2"}
	members := []string{"grp_a", "grp_b"}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		o := owners(t, c, "grp", "events")
		for _, m := range members {
			for _, p := range specDefault(m, members, all) {
				if o[p] != m {
					return fmt.Errorf("owners %v", o)
				}
			}
		}
		return nil
	})
	// No partition owned by both in memory either.
	seen := map[Partition]string{}
	for name, cs := range map[string]*Consumer{"a": a, "b": b} {
		for _, p := range cs.Assignment()["events"] {
			if o, dup := seen[p]; dup {
				t.Fatalf("%s owned by %s and %s", p, o, name)
			}
			seen[p] = name
		}
	}

	// A third member written to the spec joins: it registers, and the Go
	// consumers must give up exactly what DEFAULT gives it.
	spec := "grp_spec-member"
	members3 := []string{"grp_a", "grp_b", spec}
	if err := c.zk.createEphemeral(ctx, root+"/consumers/grp/ids/"+spec, []byte("events")); err != nil {
		t.Fatal(err)
	}
	mine := specDefault(spec, members3, all)
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		for _, p := range mine {
			if err := c.zk.createEphemeral(ctx, root+"/consumers/grp/owners/events/"+p, []byte(spec)); err != nil {
				return fmt.Errorf("claim %s: %v", p, err)
			}
		}
		return nil
	})
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		o := owners(t, c, "grp", "events")
		for _, m := range members3 {
			for _, p := range specDefault(m, members3, all) {
				if o[p] != m {
					return fmt.Errorf("owners %v", o)
				}
			}
		}
		return nil
	})
	// The spec member leaves without consuming; its partitions' offsets are
	// where the Go consumers committed them, so nothing is lost.
	for _, p := range mine {
		c.zk.deleteNode(ctx, root+"/consumers/grp/owners/events/"+p)
	}
	c.zk.deleteNode(ctx, root+"/consumers/grp/ids/"+spec)

	time.Sleep(300 * time.Millisecond)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		if n := len(a.Assignment()["events"]); n != 6 {
			return fmt.Errorf("a owns %d", n)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	close(stopProd)
	<-prodDone
	sentMu.Lock()
	ids := append([]int64(nil), sent...)
	sentMu.Unlock()
	if len(ids) < 50 {
		t.Fatalf("only %d sent", len(ids))
	}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error { return rcv.has(ids) })
	exMu.Lock()
	if overlaps > 0 {
		t.Fatalf("%d messages handled while another member handled the same partition", overlaps)
	}
	exMu.Unlock()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Offsets nodes hold <msgId>-<offset> with the partition's end.
	for _, ps := range all {
		p, _ := ParsePartition(ps)
		d, ok, err := c.zk.get(ctx, root+"/consumers/grp/offsets/events/"+ps)
		if err != nil || !ok {
			t.Fatalf("offset node %s: %v", ps, err)
		}
		off, id, err := ParseOffsetValue(string(d))
		end, _ := c.LatestOffset(ctx, "events", p)
		if err != nil || off != end || id == -1 {
			t.Fatalf("offset node %s = %q, end %d", ps, d, end)
		}
	}
	// The member left the group.
	if kids, _ := c.zk.children(ctx, root+"/consumers/grp/ids"); len(kids) != 0 {
		t.Fatalf("ids left: %v", kids)
	}
}

func TestOffsetForTimeAndStartAtTime(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	// Small segments so the time search crosses several of them.
	newTestBroker(t, 0, zk, root, 300, map[string]int{"ticks": 2})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	prod, _ := NewProducer(c)
	defer prod.Close(ctx)
	send := func(n int, tag string) []SendResult {
		var out []SendResult
		for i := 0; i < n; i++ {
			r, err := prod.Send(ctx, &Message{Topic: "ticks", Payload: []byte(fmt.Sprintf("%s-%03d", tag, i))})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	early := send(60, "early")
	time.Sleep(20 * time.Millisecond)
	mark := time.Now()
	time.Sleep(5 * time.Millisecond)
	late := send(40, "late")
	for _, p := range []Partition{{0, 0}, {0, 1}} {
		off, err := c.OffsetForTime(ctx, "ticks", p, mark)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(-1)
		for _, r := range late {
			if r.Partition == p && (want < 0 || r.Offset < want) {
				want = r.Offset
			}
		}
		if off != want {
			t.Fatalf("%s: offset for time %d, want %d", p, off, want)
		}
		// Before everything: the earliest offset; after everything: the end.
		if off, _ := c.OffsetForTime(ctx, "ticks", p, mark.Add(-time.Hour)); off != 0 {
			t.Fatalf("before all: %d", off)
		}
		end, _ := c.LatestOffset(ctx, "ticks", p)
		if off, _ := c.OffsetForTime(ctx, "ticks", p, time.Now().Add(time.Hour)); off != end {
			t.Fatalf("after all: %d, end %d", off, end)
		}
	}
	_ = early
	rcv := newReceived()
	cs, _ := NewConsumer(c, "by-time", WithStart(StartAtTime(mark)), WithMaxFetchDelay(50*time.Millisecond))
	cs.Subscribe("ticks", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	var lateIDs []int64
	for _, r := range late {
		lateIDs = append(lateIDs, r.ID)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv.has(lateIDs) })
	time.Sleep(100 * time.Millisecond)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, m := range rcv.msgs {
		if strings.HasPrefix(string(m.Payload), "early") {
			t.Fatalf("got %s from before the start time", m.Payload)
		}
	}
}

func TestAsyncSendBrokerRestartLosesNoAck(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	br := newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"stream": 4})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	prod, _ := NewProducer(c, WithMaxInFlight(64), WithRetries(30), WithRetryBackoff(50*time.Millisecond))
	var mu sync.Mutex
	acked := map[int64]SendResult{}
	payload := map[int64]string{}
	failed := 0
	const total = 3000
	restarted := make(chan struct{})
	ackedAtStop := -1
	go func() {
		defer close(restarted)
		time.Sleep(50 * time.Millisecond)
		br.Stop()
		mu.Lock()
		ackedAtStop = len(acked)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		br.Start()
	}()
	for i := 0; i < total; i++ {
		m := &Message{Topic: "stream", Payload: []byte(fmt.Sprintf("p%05d", i))}
		err := prod.SendAsync(ctx, m, func(r SendResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			acked[r.ID] = r
			payload[r.ID] = string(m.Payload)
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			time.Sleep(5 * time.Millisecond) // spread the stream over the restart
		}
	}
	<-restarted
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := prod.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	prod.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("acked %d (%d before the stop), failed %d", len(acked), ackedAtStop, failed)
	if ackedAtStop <= 0 || ackedAtStop >= total {
		t.Fatalf("the restart was not mid-stream: %d acked at the stop", ackedAtStop)
	}
	if len(acked) == 0 || len(acked)+failed != total {
		t.Fatalf("acked %d failed %d of %d", len(acked), failed, total)
	}
	// Every acknowledged message is stored where the answer said.
	stored := map[int64]Message{}
	for p := 0; p < 4; p++ {
		off := int64(0)
		for {
			f, err := c.Fetch(ctx, FetchRequest{Topic: "stream", Partition: Partition{0, p}, Offset: off, MaxSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			if f.Status != 200 {
				break
			}
			for _, m := range f.Messages {
				stored[m.ID] = m
			}
			off = f.NextOffset
		}
	}
	for id, r := range acked {
		m, ok := stored[id]
		if !ok || m.Partition != r.Partition || m.Offset != r.Offset || string(m.Payload) != payload[id] {
			t.Fatalf("acked message %d (%+v) not stored as acknowledged", id, r)
		}
	}
	// No message stored twice by a retry.
	seen := map[string]bool{}
	for _, m := range stored {
		if seen[string(m.Payload)] {
			t.Fatalf("payload %s stored twice", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
}

func TestRouterPicksReplica(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"geo": 1})
	// A replica not registered in ZooKeeper, holding its own data.
	replica := newTestBroker(t, 0, "", "", 1<<20, map[string]int{"geo": 1})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	rc, err := New(ctx, Config{Brokers: []string{replica.addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rp, _ := NewProducer(rc)
	r, err := rp.Send(ctx, &Message{Topic: "geo", Payload: []byte("from-replica")})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen RouteRequest
	router := RouterFunc(func(ctx context.Context, req RouteRequest) (string, error) {
		mu.Lock()
		seen = req
		mu.Unlock()
		return "meta://" + replica.addr, nil
	})
	rcv := newReceived()
	cs, _ := NewConsumer(c, "geo-g", WithRouter(router), WithSite("hf"), WithReadPreference(LocalFirst),
		WithMaxLag(3*time.Second), WithMaxFetchDelay(50*time.Millisecond))
	cs.Subscribe("geo", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv.has([]int64{r.ID}) })
	mu.Lock()
	defer mu.Unlock()
	if seen.Topic != "geo" || seen.Site != "hf" || seen.Preference != LocalFirst || seen.MaxLag != 3*time.Second ||
		len(seen.Replicas) != 1 || !seen.Replicas[0].Master {
		t.Fatalf("route request %+v", seen)
	}
}

func TestPickReplicaMasterFirst(t *testing.T) {
	reps := []Replica{{Addr: "s0", SlaveID: 0}, {Addr: "m", Master: true, SlaveID: -1}, {Addr: "s1", SlaveID: 1}}
	for i := 0; i < 20; i++ {
		if r, _ := pickReplica(reps); r.Addr != "m" {
			t.Fatalf("picked %v", r)
		}
	}
	slaves := map[string]bool{}
	for i := 0; i < 200; i++ {
		r, _ := pickReplica([]Replica{{Addr: "s0"}, {Addr: "s1"}})
		slaves[r.Addr] = true
	}
	if len(slaves) != 2 {
		t.Fatalf("random slave choice saw %v", slaves)
	}
	if _, ok := pickReplica(nil); ok {
		t.Fatal("picked from nothing")
	}
}

func TestRetriableClassifier(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&ConnError{Written: false, Err: errors.New("refused")}, true},
		{&ConnError{Written: true, Err: errors.New("reset")}, false},
		{&StatusError{Code: 503}, true},
		{&StatusError{Code: 504}, false},
		{&StatusError{Code: 500}, false},
		{fmt.Errorf("wrapped: %w", &StatusError{Code: 503}), true},
		{context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		if got := Retriable(c.err); got != c.want {
			t.Errorf("Retriable(%v) = %v", c.err, got)
		}
	}
}

// TestConsistGroupMatchesJava runs two Go consumers with CONSIST and checks
// the owners against the Java strategy's vectors for the same members.
func TestConsistGroupMatchesJava(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"t": 4})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	for _, id := range []string{"127.0.0.1-100-a", "127.0.0.1-200-b"} {
		cs, _ := NewConsumer(c, "g", WithConsumerID(id), WithStrategy(StrategyConsist), WithMaxFetchDelay(50*time.Millisecond))
		cs.Subscribe("t", func(context.Context, *Message) error { return nil })
		if err := cs.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer cs.Close(ctx)
	}
	// From testdata/balance_vectors.txt, "two-even" CONSIST.
	want := map[string]string{"0-0": "g_127.0.0.1-100-a", "0-3": "g_127.0.0.1-100-a",
		"0-1": "g_127.0.0.1-200-b", "0-2": "g_127.0.0.1-200-b"}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		o := owners(t, c, "g", "t")
		for p, m := range want {
			if o[p] != m {
				return fmt.Errorf("owners %v", o)
			}
		}
		return nil
	})
}

// TestBroadcastAndStaticFileOffsets covers a broadcast consumer (own group
// per host, offsets in a file) and a consumer without ZooKeeper.
func TestBroadcastAndStaticFileOffsets(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	br := newTestBroker(t, 0, zk, root, 1<<20, map[string]int{"b": 2})
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	prod, _ := NewProducer(c)
	defer prod.Close(ctx)
	var ids []int64
	for i := 0; i < 10; i++ {
		r, err := prod.Send(ctx, &Message{Topic: "b", Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	file := t.TempDir() + "/offsets.json"
	rcv := newReceived()
	cs, err := NewConsumer(c, "bc", WithBroadcast(), WithOffsetFile(file), WithMaxFetchDelay(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cs.Group(), "bc-") || strings.ContainsAny(cs.Group(), ".:") {
		t.Fatalf("broadcast group %q", cs.Group())
	}
	cs.Subscribe("b", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv.has(ids) })
	if err := cs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fs, err := NewFileOffsetStore(file)
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 2; p++ {
		r, ok, _ := fs.Load(ctx, cs.Group(), "b", Partition{0, p})
		end, _ := c.LatestOffset(ctx, "b", Partition{0, p})
		if !ok || r.Offset != end {
			t.Fatalf("file offset %d: %+v, end %d", p, r, end)
		}
	}
	// Without ZooKeeper: static broker list, fixed partitions, file offsets;
	// it resumes where the file says, so it gets only new messages.
	sc, err := New(ctx, Config{Brokers: []string{"meta://" + br.addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	file2 := t.TempDir() + "/o.json"
	fs2, _ := NewFileOffsetStore(file2)
	var recs []OffsetRecord
	for p := 0; p < 2; p++ {
		end, _ := c.LatestOffset(ctx, "b", Partition{0, p})
		recs = append(recs, OffsetRecord{Topic: "b", Partition: Partition{0, p}, Offset: end, MsgID: -1})
	}
	fs2.Commit(ctx, "static", recs)
	r2, err := prod.Send(ctx, &Message{Topic: "b", Payload: []byte("new")})
	if err != nil {
		t.Fatal(err)
	}
	rcv2 := newReceived()
	st, err := NewConsumer(sc, "static", WithPartitions(Partition{0, 0}, Partition{0, 1}), WithOffsetFile(file2), WithMaxFetchDelay(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	st.Subscribe("b", rcv2.handler)
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return rcv2.has([]int64{r2.ID}) })
	time.Sleep(100 * time.Millisecond)
	rcv2.mu.Lock()
	defer rcv2.mu.Unlock()
	if len(rcv2.msgs) != 1 {
		t.Fatalf("static consumer got %d messages, want only the new one", len(rcv2.msgs))
	}
}
