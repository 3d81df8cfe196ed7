package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchProducer sends size-byte messages to an in-process test broker
// through a static broker list, synchronously or with a window.
func benchProducer(b *testing.B, size int, async bool) {
	br := newTestBroker(b, 0, "", "", 1<<30, map[string]int{"bench": 4})
	ctx := context.Background()
	c, err := New(ctx, Config{Brokers: []string{br.addr}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, _ := NewProducer(c, WithMaxInFlight(256))
	defer p.Close(ctx)
	payload := make([]byte, size)
	// Warm-up: connect and touch the buffers once.
	if _, err := p.Send(ctx, &Message{Topic: "bench", Payload: payload}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var failed atomic.Int64
	for i := 0; i < b.N; i++ {
		m := &Message{Topic: "bench", Payload: payload}
		if async {
			if err := p.SendAsync(ctx, m, func(_ SendResult, err error) {
				if err != nil {
					failed.Add(1)
				}
			}); err != nil {
				b.Fatal(err)
			}
		} else if _, err := p.Send(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		b.Fatal(fmt.Sprint(n, " sends failed"))
	}
}

func BenchmarkSend100(b *testing.B)      { benchProducer(b, 100, false) }
func BenchmarkSend1k(b *testing.B)       { benchProducer(b, 1024, false) }
func BenchmarkSendAsync100(b *testing.B) { benchProducer(b, 100, true) }
func BenchmarkSendAsync1k(b *testing.B)  { benchProducer(b, 1024, true) }
func BenchmarkSendAsync16k(b *testing.B) { benchProducer(b, 16<<10, true) }
