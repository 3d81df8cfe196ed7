package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// shortLoad is a run just long enough to see messages go through; the
// tests check counts, never speed.
func shortLoad(consumers int) options {
	return options{
		producers:  2,
		consumers:  consumers,
		inflight:   16,
		size:       100,
		duration:   300 * time.Millisecond,
		warmup:     100 * time.Millisecond,
		topic:      "bench",
		partitions: 2,
	}
}

func checkResult(t *testing.T, name string, o options, res result) {
	t.Helper()
	if res.puts == 0 {
		t.Errorf("%s: no acknowledged publishes in the measured window", name)
	}
	if res.failed != 0 {
		t.Errorf("%s: %d publishes failed", name, res.failed)
	}
	if int64(len(res.lat)) != res.puts {
		t.Errorf("%s: %d latencies for %d acknowledged publishes", name, len(res.lat), res.puts)
	}
	if o.consumers > 0 {
		if res.consumed == 0 {
			t.Errorf("%s: nothing consumed in the measured window", name)
		}
		if res.cbytes != res.consumed*int64(o.size) {
			t.Errorf("%s: consumed %d bytes for %d messages of %d B", name, res.cbytes, res.consumed, o.size)
		}
	}
}

func TestJetStreamPeer(t *testing.T) {
	o := shortLoad(1)
	tg, err := startJetStream(o)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	res, err := runLoad(o, tg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, "jetstream", o, res)
}

func TestNSQPeer(t *testing.T) {
	if _, err := findNSQD(""); err != nil {
		t.Skip(err)
	}
	o := shortLoad(1)
	tg, err := startNSQ(o, "")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	res, err := runLoad(o, tg)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, "nsq", o, res)
}

func TestCompareJetStream(t *testing.T) {
	o := shortLoad(0)
	var out bytes.Buffer
	cs, err := runCompare(o, []string{"jetstream"}, 2, &out)
	if err != nil {
		t.Fatal(err)
	}
	// Two rounds, the second in reverse order.
	want := []string{"metaq", "jetstream", "jetstream", "metaq"}
	if len(cs) != len(want) {
		t.Fatalf("got %d runs, want %d", len(cs), len(want))
	}
	for i, c := range cs {
		if c.name != want[i] {
			t.Errorf("run %d is %s, want %s", i, c.name, want[i])
		}
		checkResult(t, c.name, o, c.res)
	}
	if !strings.Contains(out.String(), "ratio metaq/jetstream: produce ") {
		t.Errorf("summary has no ratio line:\n%s", out.String())
	}
}

func TestUnknownPeer(t *testing.T) {
	if _, err := startPeer("kafka", shortLoad(0)); err == nil {
		t.Error("unknown peer accepted")
	}
}

func TestSendTimes(t *testing.T) {
	s := newSendTimes[int32](4)
	t0 := time.Now()
	s.put(7, t0)
	if got, ok := s.take(7); !ok || !got.Equal(t0) {
		t.Fatalf("take(7) = %v, %v; want %v, true", got, ok, t0)
	}
	if _, ok := s.take(7); ok {
		t.Fatal("take(7) found it a second time")
	}
	if _, ok := s.take(8); ok {
		t.Fatal("take(8) found a key never put")
	}
}

// TestOpaqueTimes: send times come back once each, by opaque, whether a
// put found its ring slot free or taken (an older put still unanswered:
// the spill map), with puts and takes on two goroutines as in produce.
func TestOpaqueTimes(t *testing.T) {
	s := newOpaqueTimes(2) // a ring of 8 slots
	t0 := time.Now()
	s.put(3, t0)
	s.put(11, t0.Add(time.Second)) // slot 3 is taken: spills
	if got, ok := s.take(11); !ok || !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("take(11) = %v, %v; want %v, true", got, ok, t0.Add(time.Second))
	}
	if got, ok := s.take(3); !ok || got.Sub(t0) != 0 {
		t.Fatalf("take(3) = %v, %v; want %v, true", got, ok, t0)
	}
	for _, op := range []int32{3, 11, 4} {
		if _, ok := s.take(op); ok {
			t.Fatalf("take(%d) found a send time not outstanding", op)
		}
	}
	// A writer and a reader, answers out of order within the window.
	const n, window = 20000, 6
	ops := make(chan int32, window)
	done := make(chan error)
	go func() {
		pending := []int32{}
		for op := range ops {
			pending = append(pending, op)
			if len(pending) == window || op == n {
				for i := len(pending) - 1; i >= 0; i-- {
					got, ok := s.take(pending[i])
					if !ok || got.Sub(t0) != time.Duration(pending[i]) {
						done <- fmt.Errorf("take(%d) = %v, %v", pending[i], got.Sub(t0), ok)
						return
					}
				}
				pending = pending[:0]
			}
		}
		done <- nil
	}()
	for op := int32(1); op <= n; op++ {
		s.put(op, t0.Add(time.Duration(op)))
		ops <- op
	}
	close(ops)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
