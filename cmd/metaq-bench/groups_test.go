package main

import (
	"bufio"
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"metaq/broker/wire"
)

// putN stores n messages through the broker at addr, round robin over the
// partitions of o, and waits for every acknowledgement.
func putN(t *testing.T, o options, addr string, n int) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body := make([]byte, o.size)
	var buf []byte
	for i := range n {
		buf = (&wire.Put{Topic: o.topic, Partition: int32(i % o.partitions), Checksum: wire.Checksum(body), Body: body, Opaque: int32(i)}).AppendTo(buf)
	}
	if _, err := nc.Write(buf); err != nil {
		t.Fatal(err)
	}
	d := wire.NewDecoder(bufio.NewReader(nc))
	for range n {
		cmd, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := cmd.(*wire.Result); !ok || !r.OK() {
			t.Fatalf("put answered %v", cmd)
		}
	}
}

// readAll runs run for readers readers until they have counted want
// messages together (or 10 s pass), then stops them and returns the count.
func readAll(t *testing.T, readers int, want int64, run func(ctx context.Context, i int, st *stats) error) int64 {
	t.Helper()
	st := &stats{}
	st.start()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, i, st); err != nil && ctx.Err() == nil {
				t.Errorf("reader %d: %v", i, err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for st.consumed.Load() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// A little longer, so a reader that would deliver more than want has
	// the time to.
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	return st.consumed.Load()
}

// TestGroupsDeliverEveryMessageToEachGroup: -groups N delivers every
// message N times (each group reads every partition), while -consumers N
// splits the partitions within one group and delivers each message once.
func TestGroupsDeliverEveryMessageToEachGroup(t *testing.T) {
	o := shortLoad(0)
	o.partitions = 4
	addr, stop, err := startBroker(o, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const n = 200
	putN(t, o, addr, n)

	og := o
	og.groups = 2
	if got := readAll(t, og.groups, 2*n, func(ctx context.Context, g int, st *stats) error {
		return consumeGroup(ctx, og, addr, g, st)
	}); got != 2*n {
		t.Errorf("2 groups delivered %d messages, want %d (each of %d to each group)", got, 2*n, n)
	}
	oc := o
	oc.consumers = 2
	if got := readAll(t, oc.consumers, n, func(ctx context.Context, i int, st *stats) error {
		return consume(ctx, oc, addr, i, st)
	}); got != n {
		t.Errorf("2 consumers of one group delivered %d messages, want %d (each once)", got, n)
	}
}

// TestGroupsRejectedWherePeerCannot: a peer without group support refuses
// -groups instead of running without readers.
func TestGroupsRejectedWherePeerCannot(t *testing.T) {
	o := shortLoad(0)
	o.groups = 1
	tg := target{name: "peer", produce: func(context.Context, int, *stats) error { return nil }}
	if _, err := runLoad(o, tg); err == nil {
		t.Error("runLoad ran -groups against a target without group support")
	}
}

// TestStatsShardsMerge: the producers' own shards and the shared counts
// add up in stop, and only what was observed between start and stop counts.
func TestStatsShardsMerge(t *testing.T) {
	st := &stats{}
	a, b := st.newShard(), st.newShard()
	st.observePutIn(a, time.Millisecond, true) // before start: not counted
	st.start()
	st.observePutIn(a, 2*time.Millisecond, true)
	st.observePutIn(a, 0, false)
	st.observePutIn(b, 3*time.Millisecond, true)
	st.observePut(4*time.Millisecond, true)
	r := st.stop()
	st.observePutIn(b, 5*time.Millisecond, true) // after stop: not counted
	slices.Sort(r.lat)
	if r.puts != 3 || r.failed != 1 || !slices.Equal(r.lat, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}) {
		t.Fatalf("merged puts %d failed %d latencies %v, want 3, 1, [2ms 3ms 4ms]", r.puts, r.failed, r.lat)
	}
}
