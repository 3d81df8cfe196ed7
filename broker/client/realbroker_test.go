package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"metaq/broker/brokertest"
	"metaq/internal/testutil"
)

// TestRealBrokerEndToEnd runs the client against the project's broker:
// produce, a consumer group with committed offsets, a time lookup over the
// broker's wall-clock ids, and async sends across a broker restart.
func TestRealBrokerEndToEnd(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := testRoot()
	rb := brokertest.Start(t, zk, root, map[string]int{"real": 3}, testutil.Logger(t, slog.LevelInfo))
	c := newTestClient(t, zk, root)
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		ps, err := c.Partitions(ctx, "real")
		if err != nil || len(ps) != 3 {
			return fmt.Errorf("partitions %v %v", ps, err)
		}
		return nil
	})
	prod, _ := NewProducer(c, WithMaxInFlight(32), WithRetries(50), WithRetryBackoff(50*time.Millisecond))
	var mu sync.Mutex
	acked := map[int64]SendResult{}
	failed := 0
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			err := prod.SendAsync(ctx, &Message{Topic: "real", Payload: []byte(fmt.Sprintf("r%05d", i))}, func(r SendResult, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked[r.ID] = r
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 200)
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mark := time.Now()
	time.Sleep(10 * time.Millisecond)
	// Restart mid-stream.
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(20 * time.Millisecond)
		rb.Stop()
		time.Sleep(200 * time.Millisecond)
		rb.Restart()
	}()
	send(200, 800)
	<-done
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := prod.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	prod.Close(ctx)
	mu.Lock()
	t.Logf("acked %d, failed %d", len(acked), failed)
	ids := make([]int64, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	mu.Unlock()

	rcv := newReceived()
	cs, _ := NewConsumer(c, "real-g", WithCommitInterval(100*time.Millisecond), WithMaxFetchDelay(50*time.Millisecond))
	cs.Subscribe("real", rcv.handler)
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error { return rcv.has(ids) })
	rcv.mu.Lock()
	for _, m := range rcv.msgs {
		if r, ok := acked[m.ID]; ok && (r.Partition != m.Partition || r.Offset != m.Offset) {
			t.Fatalf("message %d at %s/%d, acknowledged at %s/%d", m.ID, m.Partition, m.Offset, r.Partition, r.Offset)
		}
	}
	rcv.mu.Unlock()
	if err := cs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	store, _ := NewZKOffsetStore(c)
	recs, err := store.List(ctx, "real-g", "real")
	if err != nil || len(recs) != 3 {
		t.Fatalf("offsets %v %v", recs, err)
	}
	for _, r := range recs {
		end, _ := c.LatestOffset(ctx, "real", r.Partition)
		if r.Offset != end {
			t.Fatalf("committed %+v, end %d", r, end)
		}
	}
	// The broker's ids carry wall-clock time: the first message at or after
	// mark is the first one sent after it.
	for _, p := range []Partition{{0, 0}, {0, 1}, {0, 2}} {
		off, err := c.OffsetForTime(ctx, "real", p, mark)
		if err != nil {
			t.Fatal(err)
		}
		m, ok, err := c.readRecordAt(ctx, "real", p, off)
		if err != nil || !ok {
			t.Fatalf("record at %d: %v", off, err)
		}
		var first string
		fmt.Sscanf(string(m.Payload), "r%s", &first)
		if n := 0; func() bool { fmt.Sscanf(first, "%d", &n); return n < 200 }() {
			t.Fatalf("%s: time lookup landed on %s, sent before the mark", p, m.Payload)
		}
		if IDTime(m.ID).Before(mark) {
			t.Fatalf("%s: id time %v before mark %v", p, IDTime(m.ID), mark)
		}
	}
}

// BenchmarkRealBrokerSendAsync1k measures async sends of 1 KiB messages to
// the project's broker (store on the temp dir's disk, default flushing).
func BenchmarkRealBrokerSendAsync1k(b *testing.B) {
	zk := testutil.ZooKeeper(b)
	root := testRoot()
	brokertest.Start(b, zk, root, map[string]int{"bench": 16}, testutil.Logger(b, slog.LevelInfo))
	c := newTestClient(b, zk, root)
	ctx := context.Background()
	p, _ := NewProducer(c, WithMaxInFlight(512))
	defer p.Close(ctx)
	payload := make([]byte, 1024)
	for i := 0; i < 100; i++ { // warm-up
		if _, err := p.Send(ctx, &Message{Topic: "bench", Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.SendAsync(ctx, &Message{Topic: "bench", Payload: payload}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}
