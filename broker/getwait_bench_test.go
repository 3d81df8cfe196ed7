package broker

import (
	"bufio"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/wire"
)

// BenchmarkGetWaitDelivery is delivery at the tail with getWaitMs on:
// one producer pipelines b.N 1 KiB puts (8 in flight) over the two
// partitions of test, and 8 consumers (so that deliveries, not the puts'
// group commits, take most of the CPU), each one get in flight per
// partition at its end, take every message; most gets wait in the broker
// for the commit that grows their partition (held/gets). It reports the
// process's CPU time (broker and clients together) per delivered message.
// linger=off answers a held get at the first commit that grows its
// partition; linger=on lets it wait for the defaults of getWaitMinBytes
// and getWaitLingerMs (answers/get: records per answer, the batch).
func BenchmarkGetWaitDelivery(b *testing.B) {
	for _, tc := range []struct {
		name     string
		minBytes int64
		linger   time.Duration
	}{
		{"linger=off", -1, -1},
		{"linger=on", 256 << 10, config.DefaultGetWaitLinger},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchGetWaitDelivery(b, func(o *Options) { o.GetWaitMinBytes, o.GetWaitLinger = tc.minBytes, tc.linger })
		})
	}
}

func benchGetWaitDelivery(b *testing.B, mod func(*Options)) {
	brk := startBroker(b, vectorConfig(b), func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.GetWait = 5 * time.Second
		mod(o)
	})
	const consumers, parts, window = 8, 2, 8
	start := make([]int64, parts)
	for p := range parts {
		info, err := brk.store.Partition("test", p)
		if err == nil {
			start[p] = info.Max
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, consumers+1)
	for range consumers {
		cl := dial(b, brk.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- consumeAtTail(cl, start, b.N)
		}()
	}
	pr := dial(b, brk.Addr())
	body := []byte(strings.Repeat("x", 1024))
	var frames [parts][]byte
	for p := range parts {
		frames[p] = (&wire.Put{Topic: "test", Partition: int32(p), Checksum: wire.Checksum(body), Body: body, Opaque: 1}).AppendTo(nil)
	}
	tokens := make(chan struct{}, window)
	go func() {
		d := wire.NewDecoder(bufio.NewReaderSize(pr.nc, 64<<10))
		for range b.N {
			c, err := d.Decode()
			if err != nil {
				errs <- fmt.Errorf("put answer: %w", err)
				return
			}
			if r, ok := c.(*wire.Result); !ok || !r.OK() {
				errs <- fmt.Errorf("put answered %v", c)
				return
			}
			<-tokens
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range b.N {
		tokens <- struct{}{}
		if _, err := pr.nc.Write(frames[i%parts]); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0
	for range consumers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu)/float64(consumers*b.N), "cpu-ns/msg")
	b.ReportMetric(float64(brk.stats.getsHeld.Load())/float64(brk.stats.cmdGet.Load()), "held/gets")
	b.ReportMetric(float64(consumers*b.N)/float64(brk.stats.cmdGet.Load()), "msgs/get")
}

// consumeAtTail keeps one get in flight per partition from start on and
// returns once n messages came, or at the first error.
func consumeAtTail(cl *client, start []int64, n int) error {
	off := append([]int64(nil), start...)
	get := func(p int) error {
		_, err := cl.nc.Write((&wire.Get{Topic: "test", Group: "g", Partition: int32(p), Offset: off[p], MaxSize: 1 << 20, Opaque: int32(p)}).AppendTo(nil))
		return err
	}
	for p := range off {
		if err := get(p); err != nil {
			return err
		}
	}
	d := wire.NewDecoder(bufio.NewReaderSize(cl.nc, 1<<20))
	for got := 0; got < n; {
		c, err := d.Decode()
		if err != nil {
			return fmt.Errorf("get answer: %w", err)
		}
		var p int
		switch x := c.(type) {
		case *wire.Value:
			p = int(x.Opaque)
			for data := x.Data; len(data) >= 20; got++ {
				m := 20 + int(uint32(data[0])<<24|uint32(data[1])<<16|uint32(data[2])<<8|uint32(data[3]))
				data = data[m:]
				off[p] += int64(m)
			}
		case *wire.Result:
			if x.Code != wire.StatusNotFound {
				return fmt.Errorf("get answered %v", x)
			}
			p = int(x.Opaque)
		default:
			return fmt.Errorf("get answered %v", c)
		}
		if err := get(p); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkGetWaitHeld is one held get per op: a consumer's get at the
// end of test-0 waits in the broker until the producer's put, sent once
// the get is held, grows the partition. Its allocs/op are the process's
// (broker and both clients) per held get and the put that ends its wait.
func BenchmarkGetWaitHeld(b *testing.B) {
	brk := startBroker(b, vectorConfig(b), func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.GetWait = 5 * time.Second
	})
	p := dial(b, brk.Addr())
	c := dial(b, brk.Addr())
	p.sendCmd(putCmd("test", 0, "first", 1))
	if r := p.result(); !r.OK() {
		b.Fatalf("put: %v", r)
	}
	info, err := brk.store.Partition("test", 0)
	if err != nil {
		b.Fatal(err)
	}
	get := &wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: info.Max, MaxSize: 1 << 20, Opaque: 2}
	put := putCmd("test", 0, strings.Repeat("x", 1024), 3).AppendTo(nil)
	var buf []byte
	p.nc.SetWriteDeadline(time.Time{})
	c.nc.SetWriteDeadline(time.Time{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		buf = get.AppendTo(buf[:0])
		if _, err := c.nc.Write(buf); err != nil {
			b.Fatal(err)
		}
		for brk.stats.getsHeld.Load() <= int64(i) {
			runtime.Gosched()
		}
		if _, err := p.nc.Write(put); err != nil {
			b.Fatal(err)
		}
		if r := p.result(); !r.OK() {
			b.Fatalf("put: %v", r)
		}
		v, ok := c.read().(*wire.Value)
		if !ok {
			b.Fatalf("answer %v, want the put's record", v)
		}
		get.Offset += int64(len(v.Data))
	}
}
