package outbox

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAppendWhileCursorWrites: an Append is not held up by a Confirm (or
// SetCursor) whose cursor file is being written and fsynced: while one
// such write is stalled (the hook blocks), Appends return and their
// entries are pending.
func TestAppendWhileCursorWrites(t *testing.T) {
	k := Key{"orders", 0}
	stalled, release := make(chan struct{}), make(chan struct{})
	var hooked atomic.Bool
	ob := mustOpen(t, Options{Dir: t.TempDir()})
	ob.cursorHook = func() {
		if hooked.CompareAndSwap(false, true) {
			close(stalled)
			<-release
		}
	}
	if err := ob.Append(entries(k, 0, 3)); err != nil {
		t.Fatal(err)
	}
	first := ob.Pending(k, 1, 1<<20)[0]
	confirmed := make(chan error, 1)
	go func() { confirmed <- ob.Confirm(k, first.Seq, 100) }()
	<-stalled
	appended := make(chan error, 1)
	go func() { appended <- ob.Append(entries(k, 3, 2)) }()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		<-confirmed
		t.Fatal("an Append waited for a cursor write (the Confirm's fsync) to finish")
	}
	close(release)
	if err := <-confirmed; err != nil {
		t.Fatal(err)
	}
	got := bodies(ob.Pending(k, 10, 1<<20))
	if want := bodies(entries(k, 1, 4)); !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	if c, _ := ob.Cursor(k); c.Seq != first.Seq || c.Offset != 100 {
		t.Fatalf("cursor %+v", c)
	}
}

// BenchmarkAppendWhileDraining: synchronous appenders (one ~200-byte entry
// per Append, each its own partition) with and without a drain that
// confirms every partition's pending entries as fast as it can (no
// network: the outbox's side of a drain). Reported: appends/s, and the
// appenders' p50 and p99 latency.
//
//	go test -run '^$' -bench BenchmarkAppendWhileDraining -count 3 ./broker/outbox/
func BenchmarkAppendWhileDraining(b *testing.B) {
	for _, drain := range []bool{false, true} {
		b.Run(fmt.Sprintf("drain=%v", drain), func(b *testing.B) {
			ob, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer ob.Close()
			const writers = 4
			body := make([]byte, 200)
			stop := make(chan struct{})
			var drainWG sync.WaitGroup
			if drain {
				drainWG.Add(1)
				go func() {
					defer drainWG.Done()
					var off int64
					for {
						select {
						case <-stop:
							return
						default:
						}
						idle := true
						for _, k := range ob.Keys() {
							es := ob.Pending(k, 2048, 1<<20)
							if len(es) == 0 {
								continue
							}
							idle = false
							off += int64(len(es))
							if err := ob.Confirm(k, es[len(es)-1].Seq, off); err != nil {
								b.Error(err)
								return
							}
						}
						if idle {
							time.Sleep(100 * time.Microsecond)
						}
					}
				}()
			}
			var next atomic.Int64
			lats := make([][]time.Duration, writers)
			var wg sync.WaitGroup
			b.ResetTimer()
			t0 := time.Now()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := Key{"logs", w}
					for next.Add(1) <= int64(b.N) {
						s := time.Now()
						if err := ob.Append([]Entry{{Key: k, ID: 1, Body: body}}); err != nil {
							b.Error(err)
							return
						}
						lats[w] = append(lats[w], time.Since(s))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			close(stop)
			drainWG.Wait()
			all := slices.Concat(lats...)
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(len(all))/elapsed.Seconds(), "appends/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}
