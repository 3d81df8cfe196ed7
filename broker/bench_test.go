package broker

import (
	"bufio"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"metaq/broker/wire"
)

// benchPut pipelines b.N puts of size bytes over one connection (up to 128
// in flight) to an in-process broker with group commit, and reads every
// answer. Besides ns/op it reports cpu-ns/op: the process's CPU time
// (user and system, client and broker together) per put, steadier than
// the rate on a shared machine.
func benchPut(b *testing.B, size int) { benchPutTo(b, size, nil) }

// benchPutTo is benchPut to a broker whose options mod changes.
func benchPutTo(b *testing.B, size int, mod func(*Options)) {
	cfg := vectorConfig(b)
	brk := startBroker(b, cfg, func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		if mod != nil {
			mod(o)
		}
	})
	cl := dial(b, brk.Addr())
	body := []byte(strings.Repeat("x", size))
	frame := (&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(body), Body: body, Opaque: 1}).AppendTo(nil)
	const window = 128
	done := make(chan error, 1)
	go func() {
		d := wire.NewDecoder(bufio.NewReaderSize(cl.nc, 256<<10))
		for i := 0; i < b.N; i++ {
			c, err := d.Decode()
			if err != nil {
				done <- err
				return
			}
			if r, ok := c.(*wire.Result); !ok || !r.OK() {
				done <- fmt.Errorf("put answered %v", c)
				return
			}
		}
		done <- nil
	}()
	w := bufio.NewWriterSize(cl.nc, 256<<10)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		w.Write(frame)
		if i%window == window-1 {
			w.Flush()
		}
	}
	w.Flush()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkPut100(b *testing.B) { benchPut(b, 100) }
func BenchmarkPut1k(b *testing.B)  { benchPut(b, 1024) }
func BenchmarkPut64k(b *testing.B) { benchPut(b, 64<<10) }

// BenchmarkPutSyncPair1k is BenchmarkPut1k to a synchronous-replication
// master (samsa) whose slave runs in the same process.
func BenchmarkPutSyncPair1k(b *testing.B) {
	slave := startBroker(b, vectorConfig(b), func(o *Options) {
		o.SyncReceiver = true
		o.Logger = slog.New(slog.DiscardHandler)
	})
	benchPutTo(b, 1024, func(o *Options) { o.SyncSlave = slave.Addr().String() })
}
