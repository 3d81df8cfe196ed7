package bundle

// An end-to-end test with a producer and a consumer group written straight
// following Producers and Consumer groups in broker/wire/doc.go, against a bundle registered in a real ZooKeeper: the
// producer finds brokers and partitions in topics-pub and ids/<id>/master,
// the consumers register, balance partitions with the DEFAULT strategy,
// claim owners and commit offsets as <msgId>-<offset>. The broker is then
// restarted and the group resumes from its committed offsets.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// specProducer finds partitions as Producers in broker/wire/doc.go says.
type specProducer struct {
	zk    *registry.Registry
	topic string
	conns map[int]*metaConn // by broker id
	parts [][2]int          // (brokerId, partition), sorted
	next  int
}

func newSpecProducer(ctx context.Context, zk *registry.Registry, topic string) (*specProducer, error) {
	p := &specProducer{zk: zk, topic: topic, conns: map[int]*metaConn{}}
	pubDir := zk.Paths().TopicsPub() + "/" + topic
	if err := zk.EnsurePath(ctx, pubDir); err != nil {
		return nil, err
	}
	kids, err := zk.Children(ctx, pubDir)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		if !strings.HasSuffix(k, "-m") {
			continue // slaves are never used for producing
		}
		id, err := strconv.Atoi(strings.TrimSuffix(k, "-m"))
		if err != nil {
			continue
		}
		url, _, err := zk.Get(ctx, zk.Paths().Broker(id, -1))
		if errors.Is(err, registry.ErrNoNode) {
			continue // no master: left out
		}
		if err != nil {
			return nil, err
		}
		js, _, err := zk.Get(ctx, pubDir+"/"+k)
		if err != nil {
			return nil, err
		}
		n, err := registry.ParseTopicValue(js)
		if err != nil {
			return nil, err
		}
		c, err := dialMeta(strings.TrimPrefix(string(url), "meta://"))
		if err != nil {
			return nil, err
		}
		p.conns[id] = c
		for i := 0; i < n; i++ {
			p.parts = append(p.parts, [2]int{id, i})
		}
	}
	sort.Slice(p.parts, func(i, j int) bool {
		if p.parts[i][0] != p.parts[j][0] {
			return p.parts[i][0] < p.parts[j][0]
		}
		return p.parts[i][1] < p.parts[j][1]
	})
	if len(p.parts) == 0 {
		return nil, fmt.Errorf("no partitions published for %s", topic)
	}
	return p, nil
}

// send uses round robin as the partition selector.
func (p *specProducer) send(payload []byte) error {
	part := p.parts[p.next%len(p.parts)]
	p.next++
	_, _, err := p.conns[part[0]].put(p.topic, part[1], payload)
	return err
}

func (p *specProducer) close() {
	for _, c := range p.conns {
		c.Close()
	}
}

// specConsumer follows Consumer groups in broker/wire/doc.go with the DEFAULT strategy and ZkOffsetStorage.
type specConsumer struct {
	zk          *registry.Registry
	group, id   string
	topic       string
	owned       []string // partition strings "<brokerId>-<p>"
	offsets     map[string]int64
	lastIDs     map[string]int64
	conns       map[int]*metaConn
	gotPayloads []string
}

func newSpecConsumer(ctx context.Context, zk *registry.Registry, group, id, topic string) (*specConsumer, error) {
	c := &specConsumer{zk: zk, group: group, id: group + "_" + id, topic: topic,
		offsets: map[string]int64{}, lastIDs: map[string]int64{}, conns: map[int]*metaConn{}}
	if err := zk.CreateEphemeral(ctx, zk.Paths().ConsumerIDs(group)+"/"+c.id, []byte(topic)); err != nil {
		return nil, err
	}
	return c, nil
}

// rebalance computes this consumer's share and claims it; it fails (to be
// retried) while another consumer still owns a partition it should take.
func (c *specConsumer) rebalance(ctx context.Context) error {
	zk := c.zk
	// Release what we own first, as the Java client does before claiming.
	for _, p := range c.owned {
		zk.Delete(ctx, zk.Paths().ConsumerOwners(c.group, c.topic)+"/"+p)
	}
	c.owned = nil
	subDir := zk.Paths().TopicsSub() + "/" + c.topic
	kids, err := zk.Children(ctx, subDir)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var parts []string
	for _, k := range kids {
		x, _, ok := strings.Cut(k, "-")
		if !ok {
			continue
		}
		js, _, err := zk.Get(ctx, subDir+"/"+k)
		if err != nil {
			continue
		}
		n, err := registry.ParseTopicValue(js)
		if err != nil {
			continue
		}
		for i := 0; i < n; i++ {
			s := x + "-" + strconv.Itoa(i)
			if !seen[s] {
				seen[s] = true
				parts = append(parts, s)
			}
		}
	}
	sort.Strings(parts) // as strings: 0-10 before 0-2
	ids, err := zk.Children(ctx, zk.Paths().ConsumerIDs(c.group))
	if err != nil {
		return err
	}
	var consumers []string
	for _, id := range ids {
		data, _, err := zk.Get(ctx, zk.Paths().ConsumerIDs(c.group)+"/"+id)
		if err == nil && containsTopic(string(data), c.topic) {
			consumers = append(consumers, id)
		}
	}
	sort.Strings(consumers)
	i := sort.SearchStrings(consumers, c.id)
	if i == len(consumers) || consumers[i] != c.id {
		return fmt.Errorf("consumer %s not registered", c.id)
	}
	P, C := len(parts), len(consumers)
	n := P / C
	if i < P%C {
		n++
	}
	start := (P/C)*i + min(i, P%C)
	for _, p := range parts[start : start+n] {
		if err := zk.CreateEphemeral(ctx, zk.Paths().ConsumerOwners(c.group, c.topic)+"/"+p, []byte(c.id)); err != nil {
			return fmt.Errorf("claim %s: %w", p, err)
		}
		c.owned = append(c.owned, p)
		data, _, err := zk.Get(ctx, zk.Paths().ConsumerOffsets(c.group, c.topic)+"/"+p)
		switch {
		case errors.Is(err, registry.ErrNoNode):
			c.offsets[p], c.lastIDs[p] = 0, -1
		case err != nil:
			return err
		default:
			msgID, off, err := registry.ParseOffset(string(data))
			if err != nil {
				return err
			}
			c.offsets[p], c.lastIDs[p] = off, msgID
		}
	}
	return nil
}

func containsTopic(list, topic string) bool {
	for _, t := range strings.Split(list, ",") {
		if t == topic {
			return true
		}
	}
	return false
}

// fetchAll reads every owned partition until 404 (caught up) and commits.
func (c *specConsumer) fetchAll(ctx context.Context) error {
	for _, p := range c.owned {
		bid, part, _ := registry.ParsePartition(p)
		mc, ok := c.conns[bid]
		if !ok {
			url, _, err := c.zk.Get(ctx, c.zk.Paths().Broker(bid, -1))
			if err != nil {
				return err
			}
			if mc, err = dialMeta(strings.TrimPrefix(string(url), "meta://")); err != nil {
				return err
			}
			c.conns[bid] = mc
		}
		for {
			rep, err := mc.get(c.topic, c.group, part, c.offsets[p], 4096)
			if err != nil {
				return err
			}
			if rep.code == 404 {
				break
			}
			if rep.code == 301 {
				off, _ := strconv.ParseInt(string(rep.body), 10, 64)
				c.offsets[p] = off
				continue
			}
			if rep.code != 0 {
				return fmt.Errorf("get %s: %d %s", p, rep.code, rep.body)
			}
			recs, err := decodeRecords(rep.body, c.offsets[p])
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				return fmt.Errorf("get %s at %d: no whole record in %d bytes", p, c.offsets[p], len(rep.body))
			}
			for _, r := range recs {
				c.gotPayloads = append(c.gotPayloads, string(r.payload))
				c.offsets[p], c.lastIDs[p] = r.end, r.id
			}
		}
	}
	return c.commit(ctx)
}

// commit writes <msgId>-<offset> for partitions that moved.
func (c *specConsumer) commit(ctx context.Context) error {
	for _, p := range c.owned {
		if c.offsets[p] == 0 && c.lastIDs[p] == -1 {
			continue // never moved: the Java client writes nothing
		}
		bid, part, _ := registry.ParsePartition(p)
		if err := c.zk.CommitOffset(ctx, c.group, c.topic, bid, part, c.lastIDs[p], c.offsets[p]); err != nil {
			return err
		}
	}
	return nil
}

func (c *specConsumer) close(ctx context.Context) {
	for _, mc := range c.conns {
		mc.Close()
	}
	for _, p := range c.owned {
		c.zk.Delete(ctx, c.zk.Paths().ConsumerOwners(c.group, c.topic)+"/"+p)
	}
	c.zk.Delete(ctx, c.zk.Paths().ConsumerIDs(c.group)+"/"+c.id)
}

// runGroup starts two consumers, balances, consumes everything and closes them.
func runGroup(t *testing.T, ctx context.Context, e *testEnv, topic string) (a, b *specConsumer) {
	t.Helper()
	zka, zkb := zkClient(t, e), zkClient(t, e)
	var err error
	if a, err = newSpecConsumer(ctx, zka, "g1", "127.0.0.1-1-a", topic); err != nil {
		t.Fatal(err)
	}
	if b, err = newSpecConsumer(ctx, zkb, "g1", "127.0.0.1-2-b", topic); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range []*specConsumer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error { return c.rebalance(ctx) })
		}()
	}
	wg.Wait()
	for _, c := range []*specConsumer{a, b} {
		if err := c.fetchAll(ctx); err != nil {
			t.Fatal(err)
		}
		c.close(ctx)
	}
	return a, b
}

func TestProducerConsumerThroughZooKeeper(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=4\n")
	ctx := context.Background()
	bnd := e.start(t)
	zk := zkClient(t, e)

	// First round: 200 messages over 4 partitions.
	prod, err := newSpecProducer(ctx, zk, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if len(prod.parts) != 4 {
		t.Fatalf("producer sees partitions %v, want 4 of broker 0", prod.parts)
	}
	want := map[string]bool{}
	for i := 0; i < 200; i++ {
		s := fmt.Sprintf("round1-%03d", i)
		want[s] = true
		if err := prod.send([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	prod.close()

	a, b := runGroup(t, ctx, e, "e2e")
	// DEFAULT: sorted consumers g1_127.0.0.1-1-a, g1_127.0.0.1-2-b; partitions 0-0..0-3.
	if got := strings.Join(a.owned, ","); got != "0-0,0-1" {
		t.Errorf("consumer a owned %s, want 0-0,0-1", got)
	}
	if got := strings.Join(b.owned, ","); got != "0-2,0-3" {
		t.Errorf("consumer b owned %s, want 0-2,0-3", got)
	}
	checkExactlyOnce(t, want, append(a.gotPayloads, b.gotPayloads...))

	// Committed offsets: <msgId>-<offset>, 50 records of 20+10 bytes per partition.
	offs, err := zk.ConsumerOffsets(ctx, "g1", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 4 {
		t.Fatalf("offsets = %v", offs)
	}
	for _, o := range offs {
		if o.Offset != 50*30 || o.MsgID <= 0 {
			t.Errorf("offset of %s = %d (msgId %d), want 1500 and a wall-clock id", o.Partition, o.Offset, o.MsgID)
		}
		raw, _, _ := zk.Get(ctx, zk.Paths().ConsumerOffsets("g1", "e2e")+"/"+o.Partition)
		if string(raw) != registry.FormatOffset(o.MsgID, o.Offset) {
			t.Errorf("offset node %s = %q", o.Partition, raw)
		}
	}

	// Restart the broker on the same data: it unregisters on the clean stop
	// and registers again.
	if err := bnd.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := zk.Exists(ctx, zk.Paths().Broker(0, -1)); ok {
		t.Fatal("master node left after a clean stop")
	}
	if tb, _ := zk.TopicBrokers(ctx, registry.TreeTopicsPub, "e2e"); len(tb) != 0 {
		t.Fatalf("topics-pub still lists %v after a clean stop", tb)
	}
	e.start(t)

	prod, err = newSpecProducer(ctx, zk, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]bool{}
	for i := 0; i < 100; i++ {
		s := fmt.Sprintf("round2-%03d", i)
		want[s] = true
		if err := prod.send([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	prod.close()
	a, b = runGroup(t, ctx, e, "e2e")
	// Resumed from the committed offsets: only the new messages.
	checkExactlyOnce(t, want, append(a.gotPayloads, b.gotPayloads...))
	offs, _ = zk.ConsumerOffsets(ctx, "g1", "e2e")
	for _, o := range offs {
		if o.Offset != 75*30 {
			t.Errorf("offset of %s after round 2 = %d, want %d", o.Partition, o.Offset, 75*30)
		}
	}
}

func checkExactlyOnce(t *testing.T, want map[string]bool, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
		if !want[g] {
			t.Errorf("unexpected message %q", g)
		}
	}
	for w := range want {
		if seen[w] != 1 {
			t.Errorf("message %q received %d times", w, seen[w])
		}
	}
}
