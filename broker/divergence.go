package broker

// Consumers that read records a promoted master never had. After an
// unplanned failover the new master's log ends, for each partition, where
// the old master's replication stopped (its promotion ends); it stores its
// own records from there. A consumer that read the old master's last,
// unreplicated records comes with an offset beyond that end, which is not
// an offset of this log: it lies beyond the end, inside one of the new
// master's records, or (by chance) on a boundary of them. The MetaQ Java
// client keeps such an offset across the change of master (it reloads
// offsets only when partitions disappear, and a slave site's registration
// keeps them) and, fetching inside a record, never decodes one again; on a
// boundary it would silently skip the new master's first records.
//
// So the first get of a consumer group for a partition after a promotion
// that asks beyond the promotion end is answered 301 with the end: the
// consumer reads every record this master stored, and the records it had
// read at the old master beyond the end are lost with it (saved aside there
// when it returns). A group that reads here from before the end passes,
// and so does every later get of a group once it passed. The price, when a
// group's first get here since the promotion is beyond the end for a
// legitimate reason (it read this master's records at one of its slave
// sites), is that it reads them again: at least once, never skipped.
//
// A repair's gets (RepairGroup) are never moved: a slave refilling a range
// it lost to disk damage asks for records it knows this master holds.

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
)

// RepairGroup is the consumer group of the gets with which a site refills
// a damaged range from a replica (a master from its slaves, a slave from
// its master): records fetched at the offsets asked, never moved.
const RepairGroup = "metaq-repair"

type divergence struct {
	active atomic.Bool // ends are set: the fast path of every other get
	mu     sync.Mutex
	ends   map[string]int64    // "topic-partition" -> promotion end
	valid  map[string]struct{} // "group topic-partition" whose offsets passed
}

// SetPromotionEnds tells the broker where each partition's records of this
// master start after a promotion ("topic-partition" -> end, as
// georeplicator's identity keeps them); nil forgets them (a demotion).
func (b *Broker) SetPromotionEnds(ends map[string]int64) {
	d := &b.divergence
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ends, d.valid = nil, nil
	if len(ends) > 0 {
		d.ends = make(map[string]int64, len(ends))
		for k, v := range ends {
			d.ends[k] = v
		}
		d.valid = map[string]struct{}{}
	}
	d.active.Store(d.ends != nil)
}

// divergedGet returns the offset a get at off must move to (and true) when
// it is a group's first get of the partition beyond the promotion end (see
// the top of this file); readableEnd, the partition's readable end, is
// logged.
func (b *Broker) divergedGet(group, topic string, partition int32, off, readableEnd int64) (int64, bool) {
	d := &b.divergence
	if !d.active.Load() || off == math.MaxInt64 || group == RepairGroup { // MaxInt64: "from the end", answered as usual
		return 0, false
	}
	part := topic + "-" + strconv.Itoa(int(partition))
	key := group + " " + part
	d.mu.Lock()
	end, ok := d.ends[part]
	_, passed := d.valid[key]
	d.mu.Unlock()
	if !ok || passed {
		return 0, false
	}
	if off > end {
		b.log.Warn("GET: a consumer group's first get since this site was promoted asks beyond the promotion end: it read records of the former master lost at the failover; moved back to where this master's records start",
			"group", group, "partition", part, "offset", off, "readableEnd", readableEnd, "movedTo", end)
		return end, true
	}
	d.mu.Lock()
	if d.valid != nil {
		d.valid[key] = struct{}{}
	}
	d.mu.Unlock()
	return 0, false
}
