package georeplicator

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"metaq/broker/store"
)

// logIndex follows the master's durable log and keeps, per partition, a
// compact list of marks (offset range, message count, append time). It lets
// lag be given in messages and seconds without rereading the log for every
// question. The newest marks are one per
// log entry (exact); older ones are merged pairwise when a partition has more
// than maxMarks, and inside a merged mark counts and times are interpolated.
type logIndex struct {
	src  LogSource
	mu   sync.Mutex
	from int64 // marks are complete for log positions >= from
	pos  int64 // scanned up to here
	need int64 // lowest position some slave needs; -1 = none yet
	gen  int   // bumped on rebuild so run() drops a stale read
	part map[pkey]*marks
}

type mark struct {
	off, end  int64
	cumBefore int64 // messages in the partition before off (since the index began)
	n         int64
	t0, t1    int64 // append times of the first and last entry, unix ns (compact: 48 bytes a mark)
}

type marks struct {
	ms    []mark
	total int64
}

// maxMarks per partition before the older half is merged pairwise. Marks
// exist only for data some slave lacks, so this bounds the index of a slave
// that is far behind (about 48 bytes a mark).
const maxMarks = 2048

func newLogIndex(src LogSource) *logIndex {
	return &logIndex{src: src, from: -1, pos: -1, need: -1, part: map[pkey]*marks{}}
}

// want makes sure the index covers log positions from pos on.
func (x *logIndex) want(pos int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.need < 0 || pos < x.need {
		x.need = pos
	}
}

// run scans the log until ctx ends.
func (x *logIndex) run(ctx context.Context, idle time.Duration) {
	for ctx.Err() == nil {
		x.mu.Lock()
		if x.need >= 0 && (x.from < 0 || x.need < x.from) {
			first, _ := x.src.LogBounds()
			x.from = max(x.need, first)
			x.pos = x.from
			x.part = map[pkey]*marks{}
			x.gen++
		}
		pos, gen := x.pos, x.gen
		x.mu.Unlock()
		if pos < 0 {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		t0 := time.Now()
		entries, next, err := x.src.ReadLog(pos, 4<<20)
		if errors.Is(err, store.ErrLogTruncated) {
			first, _ := x.src.LogBounds()
			x.mu.Lock()
			if x.gen == gen {
				x.pos, x.from = first, max(x.from, first)
			}
			x.mu.Unlock()
			continue
		}
		if err != nil {
			sleepCtx(ctx, idle)
			continue
		}
		if len(entries) == 0 && next > pos {
			// Only entries that carry no records (partition definitions,
			// deletions) were passed over.
			x.mu.Lock()
			if x.gen == gen {
				x.pos = next
			}
			x.mu.Unlock()
			continue
		}
		if len(entries) == 0 {
			wctx, cancel := context.WithTimeout(ctx, idle)
			x.src.WaitDurable(wctx, pos)
			cancel()
			continue
		}
		x.feed(gen, pos, next, entries)
		if _, durable := x.src.LogBounds(); durable-next > scanBehind {
			// Far behind (a backlog after a restart): scan at a low duty
			// cycle so the index never competes with shipping for the CPU.
			// Until it catches up, Lag under-reports messages (IndexBehind).
			sleepCtx(ctx, 7*time.Since(t0))
		}
	}
}

// scanBehind is how far behind the durable end the index may be before it
// throttles itself.
const scanBehind = 16 << 20

// behind reports whether the index has not reached durable yet.
func (x *logIndex) behind(durable int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.pos < durable
}

// feed adds entries read from [pos, next) if the index is exactly at pos
// (gen < 0: any generation). The shipper feeds what it reads, so a slave
// that keeps up costs no second read of the log.
func (x *logIndex) feed(gen int, pos, next int64, entries []store.LogEntry) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if (gen >= 0 && x.gen != gen) || x.pos != pos || x.pos < 0 {
		return false
	}
	for _, e := range entries {
		x.addLocked(e)
	}
	x.pos = next
	return true
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (x *logIndex) addLocked(e store.LogEntry) {
	n, _ := countRecords(e.Records)
	k := pkey{e.Topic, e.Partition}
	m := x.part[k]
	if m == nil {
		m = &marks{}
		x.part[k] = m
	}
	end := e.Offset + int64(len(e.Records))
	m.ms = append(m.ms, mark{off: e.Offset, end: end, cumBefore: m.total, n: int64(n), t0: e.Time.UnixNano(), t1: e.Time.UnixNano()})
	m.total += int64(n)
	if len(m.ms) > maxMarks {
		m.compact()
	}
}

// compact merges neighbouring marks in the older half of the list. Recent
// marks stay one per entry, so a slave that is a little behind gets exact
// figures; a long backlog costs bounded memory and is interpolated.
func (m *marks) compact() {
	half := len(m.ms) / 2
	out := make([]mark, 0, len(m.ms))
	for i := 0; i < half; i++ {
		mk := m.ms[i]
		if l := len(out); l > 0 && i%2 == 1 && out[l-1].end == mk.off {
			last := &out[l-1]
			last.end, last.n, last.t1 = mk.end, last.n+mk.n, mk.t1
			continue
		}
		out = append(out, mk)
	}
	m.ms = append(out, m.ms[half:]...)
}

// lag returns messages after slaveEnd and the append time of the first of
// them (zero when none) for one partition.
func (x *logIndex) lag(k pkey, slaveEnd int64) (int64, time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.part[k]
	if m == nil {
		return 0, time.Time{}
	}
	i := sort.Search(len(m.ms), func(i int) bool { return m.ms[i].end > slaveEnd })
	if i == len(m.ms) {
		return 0, time.Time{}
	}
	mk := m.ms[i]
	if slaveEnd <= mk.off {
		return m.total - mk.cumBefore, time.Unix(0, mk.t0)
	}
	frac := float64(slaveEnd-mk.off) / float64(mk.end-mk.off)
	done := mk.cumBefore + int64(float64(mk.n)*frac)
	t := time.Unix(0, mk.t0+int64(float64(mk.t1-mk.t0)*frac))
	return m.total - done, t
}

// trimAll drops every mark (no slave is known, so none is needed); a slave
// that connects later makes the index rebuild from its position.
func (x *logIndex) trimAll() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.part = map[pkey]*marks{}
	if x.pos >= 0 {
		x.from = x.pos
		x.need = x.pos
	}
}

// trim drops marks every slave has, and moves from up to minPos so a slave
// below it forces a rebuild.
func (x *logIndex) trim(minPos int64, partMin map[pkey]int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, m := range x.part {
		end, ok := partMin[k]
		if !ok {
			continue
		}
		i := sort.Search(len(m.ms), func(i int) bool { return m.ms[i].end > end })
		if i > 0 {
			m.ms = append(m.ms[:0:0], m.ms[i:]...)
		}
	}
	if minPos > x.from && minPos <= x.pos {
		x.from = minPos
	}
	if x.need >= 0 && minPos > x.need {
		x.need = minPos
	}
}
