package store

import (
	"os"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// cycleStatsEnv names the debug switch for the group commit cycle's
// breakdown: an interval (e.g. "1s"); the store then logs, every interval,
// where a commit's time went. Off (unset) it costs a predictable branch per
// request and per commit: no clock reads.
const cycleStatsEnv = "METAQ_STORE_CYCLE_STATS"

// cycleStats adds up the group commit cycle's parts. The writer and the
// syncer add, the logger reads: atomics, so nobody waits for anybody.
type cycleStats struct {
	taken    atomic.Int64 // requests taken off the queue
	queuedNs atomic.Int64 // their time in the queue (enqueue to the writer taking them)
	batches  atomic.Int64 // batches written (process)
	writeNs  atomic.Int64 // process: encoding, write(2), indexing
	commits  atomic.Int64 // group commits completed
	waitNs   atomic.Int64 // a commit's first write to its fdatasync's start (the one before it in flight)
	syncNs   atomic.Int64 // fdatasync
	handNs   atomic.Int64 // fdatasync returned to the writer taking the commit back
	answerNs atomic.Int64 // completeSync: durable ends, woken gets, answered puts
	wakeNs   atomic.Int64 // of which waking held gets
	idleNs   atomic.Int64 // the syncer with no fdatasync running
}

// cycleStatsInterval is the logging interval the environment asks for (0: off).
func cycleStatsInterval() time.Duration {
	d, err := time.ParseDuration(os.Getenv(cycleStatsEnv))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// cycleNow is the wall clock when the stats are on, else the zero time (no
// clock read on the hot path).
func (s *Store) cycleNow() time.Time {
	if s.cs == nil {
		return time.Time{}
	}
	return time.Now()
}

// logCycleStats logs the stats every interval until stop is closed.
func (s *Store) logCycleStats(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	type snap struct{ v [11]int64 }
	read := func() (x snap) {
		c := s.cs
		for i, a := range []*atomic.Int64{&c.taken, &c.queuedNs, &c.batches, &c.writeNs, &c.commits, &c.waitNs,
			&c.syncNs, &c.handNs, &c.answerNs, &c.wakeNs, &c.idleNs} {
			x.v[i] = a.Load()
		}
		return x
	}
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sample)
	prevH := copyHist(sample[0].Value)
	prev := read()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		cur := read()
		var d [11]int64
		for i := range d {
			d[i] = cur.v[i] - prev.v[i]
		}
		prev = cur
		metrics.Read(sample)
		h := copyHist(sample[0].Value)
		p50, p99, n := histDelta(prevH, h)
		prevH = h
		us := func(ns, n int64) float64 {
			if n == 0 {
				return 0
			}
			return float64(ns) / float64(n) / 1e3
		}
		s.log.Info("STORE: cycle stats",
			"requests", d[0], "queued_us", us(d[1], d[0]),
			"batches", d[2], "write_us", us(d[3], d[2]),
			"commits", d[4], "reqs_per_commit", us(d[0]*1000, d[4]),
			"wait_sync_us", us(d[5], d[4]), "fdatasync_us", us(d[6], d[4]),
			"handoff_us", us(d[7], d[4]), "answer_us", us(d[8], d[4]), "wake_us", us(d[9], d[4]),
			"disk_idle_pct", float64(d[10])/float64(every)*100,
			"sched_lat_p50_us", p50*1e6, "sched_lat_p99_us", p99*1e6, "sched_events", n)
	}
}

type hist struct {
	counts  []uint64
	buckets []float64
}

func copyHist(v metrics.Value) hist {
	if v.Kind() != metrics.KindFloat64Histogram {
		return hist{}
	}
	h := v.Float64Histogram()
	return hist{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// histDelta is the p50 and p99 (bucket upper bounds, seconds) of what b
// counted since a, and how many.
func histDelta(a, b hist) (p50, p99 float64, n uint64) {
	if len(a.counts) != len(b.counts) {
		return 0, 0, 0
	}
	d := make([]uint64, len(b.counts))
	for i := range d {
		d[i] = b.counts[i] - a.counts[i]
		n += d[i]
	}
	q := func(f float64) float64 {
		want := uint64(f * float64(n))
		var c uint64
		for i, x := range d {
			c += x
			if c > want {
				return b.buckets[i+1]
			}
		}
		return 0
	}
	if n == 0 {
		return 0, 0, 0
	}
	return q(0.5), q(0.99), n
}
