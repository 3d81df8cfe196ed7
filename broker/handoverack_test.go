package broker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// switchingStore is a Store whose AppendAsync, once armed, runs a
// switchover's first steps around the put's hand-off to the store:
// before is run before it (writes refused, puts held), after once the
// append is queued. It says where records lie (LogPosition), as
// *store.Store does.
type switchingStore struct {
	Store
	st            *store.Store
	armed         atomic.Bool
	before, after func()
}

func (s *switchingStore) AppendAsync(ctx context.Context, topic string, p int, msgs []store.Message, notify func([]store.Appended, error)) *store.PendingAppend {
	if topic != "test" || !s.armed.CompareAndSwap(true, false) {
		return s.Store.AppendAsync(ctx, topic, p, msgs, notify)
	}
	s.before()
	pa := s.Store.AppendAsync(ctx, topic, p, msgs, notify)
	s.after()
	return pa
}

// switchingGroupStore is a switchingStore that also takes several
// partitions' appends at once, as *store.Store does: a read's puts to
// several partitions take the group route (storeBatches).
type switchingGroupStore struct{ *switchingStore }

func (s switchingGroupStore) AppendManyAsync(ctx context.Context, appends []store.PartitionAppend, notify func([]store.AppendOutcome)) {
	if len(appends) == 0 || appends[0].Topic != "test" || !s.armed.CompareAndSwap(true, false) {
		s.st.AppendManyAsync(ctx, appends, notify)
		return
	}
	s.before()
	s.st.AppendManyAsync(ctx, appends, notify)
	s.after()
}

func (s *switchingStore) LogPosition(topic string, partition int, offset int64) (int64, error) {
	return s.st.LogPosition(topic, partition, offset)
}

// TestPutStoredWhileWritesStopWaitsForTheHandover: a put that passed the
// write gate before a switchover refused writes, and reached the store
// after (so its store hand-off could not be marked before the refusal), is
// not answered "stored here, but not acknowledged" at once: its answer
// waits for the handover's outcome. (1) Its record lies below the log end
// handed over (the switchover flushed after the put was queued): once the
// new master took over (Forward after HandedOver) it is acknowledged with
// its partition and offset, and not before. (2) Its record lies past that
// end (queued after the flush): 500, unknown. (3) The handover failed (End
// without Forward): 500, unknown. Each for one put, and for puts to two
// partitions in one read (stored together, answered in one frame).
func TestPutStoredWhileWritesStopWaitsForTheHandover(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flushFirst bool // the switchover flushes before the put is queued
		forward    bool // the new master takes over
		wantOK     bool
		group      bool // puts to two partitions in one read (storeBatches)
	}{
		{"below the handed-over end", false, true, true, false},
		{"past the handed-over end", true, true, false, false},
		{"handover failed", false, false, false, false},
		{"group below the handed-over end", false, true, true, true},
		{"group past the handed-over end", true, true, false, true},
		{"group handover failed", false, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ss *switchingStore
			brk := startBroker(t, vectorConfig(t), func(o *Options) {
				ss = &switchingStore{Store: o.Store, st: o.Store.(*store.Store)}
				o.Store = ss
				if tc.group {
					o.Store = switchingGroupStore{ss}
				}
			})
			var hold atomic.Pointer[Hold]
			var end atomic.Int64
			handOver := func() {
				if err := brk.store.Flush(); err != nil {
					t.Error(err)
				}
				_, d := brk.store.LogBounds()
				end.Store(d)
			}
			ss.before = func() {
				// A switchover: puts held, writes refused, then the log
				// flushed and its end handed over.
				h, err := brk.HoldWrites(HoldOptions{MaxWait: 10 * time.Second, Reason: "this master is handing over to hf"})
				if err != nil {
					t.Error(err)
					return
				}
				hold.Store(h)
				brk.RefuseWrites("switchover", Refusal{Reason: "this master is handing over to hf; retry", Retry: true})
				if tc.flushFirst {
					handOver()
				}
			}
			ss.after = func() {
				if !tc.flushFirst {
					handOver()
				}
			}
			cl := dial(t, brk.Addr())
			mustPut(t, cl, "test", 0, "before")
			mustPut(t, cl, "test", 1, "before")
			ss.armed.Store(true)
			puts := putCmd("test", 0, "on its way", 7).AppendTo(nil)
			if tc.group {
				puts = putCmd("test", 1, "on its way", 8).AppendTo(puts)
			}
			cl.send(puts)
			// No answer while the handover's outcome is not known.
			cl.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := cl.r.Peek(1); err == nil {
				cl.nc.SetReadDeadline(time.Time{})
				t.Fatalf("answered before the handover's outcome was known: %s", cl.result())
			}
			h := hold.Load()
			if h == nil {
				t.Fatal("the put never reached the store")
			}
			if err := brk.store.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, d := brk.store.LogBounds(); tc.flushFirst == (d == end.Load()) {
				t.Fatalf("the log ends at %d with the put; handed-over log end %d", d, end.Load())
			}
			if tc.forward {
				h.HandedOver(end.Load())
				h.Forward(func(context.Context) (string, error) { return "127.0.0.1:1", nil })
			} else {
				h.End()
			}
			want := map[int32]int32{7: 0} // opaque: partition
			if tc.group {
				want[8] = 1
			}
			for range want {
				r := cl.result()
				p, ok := want[r.Opaque]
				if !ok {
					t.Fatalf("answer %s", r)
				}
				delete(want, r.Opaque)
				if !tc.wantOK {
					if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "stored here, but not acknowledged") ||
						!strings.Contains(string(r.Body), "unknown") {
						t.Fatalf("a put whose record the new master may not hold: %s", r)
					}
					continue
				}
				if r.Code != wire.StatusOK {
					t.Fatalf("a put stored below the handed-over end, the new master took over: %s", r)
				}
				a, err := parsePutAnswer(r.Body)
				if err != nil {
					t.Fatal(err)
				}
				data, err := brk.store.Read("test", int(p), a.Offset, 1<<10)
				if err != nil {
					t.Fatal(err)
				}
				recs, _ := parseRecords(t, data)
				if len(recs) == 0 || recs[0].id != a.ID || string(recs[0].body) != "on its way" {
					t.Fatalf("answered %q, the store has %+v in test-%d there", r.Body, recs, p)
				}
			}
			st := h.Stats()
			n := int64(1)
			if tc.group {
				n = 2
			}
			if st.AckHeld != n || (tc.wantOK && st.AckGiven != n) || (!tc.wantOK && st.AckRefused != n) {
				t.Fatalf("stats %+v", st)
			}
			h.End()
		})
	}
}
