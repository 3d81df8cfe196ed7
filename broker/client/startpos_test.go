package client

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"metaq/broker/brokertest"
	"metaq/internal/testutil"
)

// TestRandomSelector checks that Random uses every partition, roughly
// evenly, and is not a fixed rotation.
func TestRandomSelector(t *testing.T) {
	ps := []Partition{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
	const n = 8000
	counts := map[Partition]int{}
	var seq []Partition
	var s Random
	for i := 0; i < n; i++ {
		p, err := s.Select("t", ps, &Message{Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		counts[p]++
		seq = append(seq, p)
	}
	for _, p := range ps {
		// Expected 2000 each; 1700..2300 is about 7.7 standard deviations.
		if c := counts[p]; c < 1700 || c > 2300 {
			t.Fatalf("partition %s chosen %d of %d times: %v", p, c, n, counts)
		}
	}
	if len(counts) != len(ps) {
		t.Fatalf("chose partitions outside the list: %v", counts)
	}
	// A rotation (round robin) never repeats a partition twice in a row; a
	// uniform choice does about a quarter of the time.
	repeats := 0
	for i := 1; i < len(seq); i++ {
		if seq[i] == seq[i-1] {
			repeats++
		}
	}
	if repeats < n/8 || repeats > n*3/8 {
		t.Fatalf("%d immediate repeats in %d picks: not a uniform choice", repeats, n)
	}
	// One partition: always that one.
	for i := 0; i < 10; i++ {
		if p, _ := s.Select("t", ps[2:3], &Message{}); p != ps[2] {
			t.Fatalf("single partition: got %s", p)
		}
	}
}

// TestRandomSelectorThroughProducer sends with the Random selector to the
// project's broker: every partition receives messages, and each message is
// stored where its result says.
func TestRandomSelectorThroughProducer(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	brokertest.Start(t, zk, root, map[string]int{"rnd": 3}, testutil.Logger(t, slog.LevelInfo))
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	waitPartitions(t, c, "rnd", 3)
	prod, _ := NewProducer(c, WithSelector(Random{}))
	defer prod.Close(ctx)
	per := map[Partition]int{}
	for i := 0; i < 90; i++ {
		r, err := prod.Send(ctx, &Message{Topic: "rnd", Payload: []byte(fmt.Sprintf("m%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		per[r.Partition]++
		m, ok, err := c.readRecordAt(ctx, "rnd", r.Partition, r.Offset)
		if err != nil || !ok || m.ID != r.ID || string(m.Payload) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d not at %s/%d: %v %v %+v", i, r.Partition, r.Offset, ok, err, m)
		}
	}
	if len(per) != 3 {
		t.Fatalf("random selector used %d of 3 partitions: %v", len(per), per)
	}
}

func waitPartitions(t *testing.T, c *Client, topic string, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		ps, err := c.Partitions(context.Background(), topic)
		if err != nil || len(ps) != n {
			return fmt.Errorf("partitions %v %v", ps, err)
		}
		return nil
	})
}

// TestStartPositionsRealBroker checks StartEarliest, StartLatest and
// StartAt against the project's broker, for groups without saved offsets,
// and that a saved offset wins over the start position.
func TestStartPositionsRealBroker(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	brokertest.Start(t, zk, root, map[string]int{"sp": 1}, testutil.Logger(t, slog.LevelInfo))
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	waitPartitions(t, c, "sp", 1)
	p0 := Partition{0, 0}
	prod, _ := NewProducer(c)
	defer prod.Close(ctx)
	var first []SendResult
	for i := 0; i < 10; i++ {
		r, err := prod.Send(ctx, &Message{Topic: "sp", Payload: []byte(fmt.Sprintf("old%02d", i))})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, r)
	}
	if first[0].Offset != 0 || first[9].Offset <= first[8].Offset {
		t.Fatalf("unexpected offsets %+v", first)
	}

	consume := func(group string, start StartPosition, extra ...ConsumerOption) (*received, *Consumer) {
		t.Helper()
		rcv := newReceived()
		opts := append([]ConsumerOption{WithStart(start), WithCommitInterval(50 * time.Millisecond), WithMaxFetchDelay(20 * time.Millisecond)}, extra...)
		cs, err := NewConsumer(c, group, opts...)
		if err != nil {
			t.Fatal(err)
		}
		cs.Subscribe("sp", rcv.handler)
		if err := cs.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close(context.Background()) })
		return rcv, cs
	}
	payloads := func(r *received) []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		var out []string
		for _, m := range r.msgs {
			out = append(out, string(m.Payload))
		}
		return out
	}
	waitCount := func(r *received, n int) []string {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			if got := len(payloads(r)); got < n {
				return fmt.Errorf("%d of %d received", got, n)
			}
			return nil
		})
		time.Sleep(150 * time.Millisecond) // anything extra would arrive now
		return payloads(r)
	}
	zstore, _ := NewZKOffsetStore(c)
	waitCommitted := func(group string, off int64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			rec, ok, err := zstore.Load(ctx, group, "sp", p0)
			if err != nil || !ok || rec.Offset != off {
				return fmt.Errorf("committed %+v %v %v, want offset %d", rec, ok, err, off)
			}
			return nil
		})
	}
	end, err := c.LatestOffset(ctx, "sp", p0)
	if err != nil {
		t.Fatal(err)
	}

	// Earliest: all ten old messages, in order.
	rE, _ := consume("g-earliest", StartEarliest())
	got := waitCount(rE, 10)
	if len(got) != 10 || got[0] != "old00" || got[9] != "old09" {
		t.Fatalf("StartEarliest received %q", got)
	}
	waitCommitted("g-earliest", end)

	// At: from the fourth message on.
	rA, csA := consume("g-at", StartAt(first[3].Offset))
	got = waitCount(rA, 7)
	if len(got) != 7 || got[0] != "old03" || got[6] != "old09" {
		t.Fatalf("StartAt(%d) received %q", first[3].Offset, got)
	}

	// Latest: the consumer is positioned at the end (the broker answers
	// 301 and the new position is committed) and receives only what is
	// sent afterwards.
	rL, _ := consume("g-latest", StartLatest())
	waitCommitted("g-latest", end)
	if got := payloads(rL); len(got) != 0 {
		t.Fatalf("StartLatest received old messages %q", got)
	}
	for i := 0; i < 3; i++ {
		if _, err := prod.Send(ctx, &Message{Topic: "sp", Payload: []byte(fmt.Sprintf("new%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	got = waitCount(rL, 3)
	if len(got) != 3 || got[0] != "new00" || got[2] != "new02" {
		t.Fatalf("StartLatest received %q", got)
	}

	// A saved offset wins over the start position: g-at, closed after
	// reading everything, restarts with StartEarliest and receives only
	// what is sent after its committed offset.
	end2, _ := c.LatestOffset(ctx, "sp", p0)
	if got := waitCount(rA, 10); len(got) != 10 {
		t.Fatalf("g-at received %q", got)
	}
	if err := csA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCommitted("g-at", end2)
	if _, err := prod.Send(ctx, &Message{Topic: "sp", Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	rA2, _ := consume("g-at", StartEarliest())
	got = waitCount(rA2, 1)
	if len(got) != 1 || got[0] != "after" {
		t.Fatalf("restarted group with a saved offset received %q", got)
	}
}
