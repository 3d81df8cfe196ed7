package bundle

import (
	"encoding/binary"
	"sync"

	"metaq/broker/store"
)

// msgCounter counts the messages each partition holds, for the dashboard's
// topic table. The store's own count covers only what was appended since
// the process started, so a restarted bundle (a slave restarted after
// replicating, a master after a restart) would show a fraction of what it
// holds. The counter walks record headers (lengths only) from the
// partition's first offset, a bounded number of bytes per call, and then
// only what was appended since; after retention removes segments it counts
// again from the new start.
type msgCounter struct {
	mu    sync.Mutex
	parts map[msgKey]*msgCount
}

type msgKey struct {
	topic     string
	partition int
}

type msgCount struct {
	from, upTo, n int64
}

// msgCountBudget bounds the bytes read per partition per call, so a large
// partition is counted over several dashboard refreshes.
const msgCountBudget = 8 << 20

// count returns the messages p holds, and whether the count is complete
// (false while the counter is still catching up; n is then a lower bound).
func (c *msgCounter) count(s *store.Store, p store.PartitionInfo) (n int64, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts == nil {
		c.parts = map[msgKey]*msgCount{}
	}
	k := msgKey{p.Topic, p.Partition}
	st := c.parts[k]
	if st == nil || st.from != p.Min || st.upTo < p.Min || st.upTo > p.Max {
		st = &msgCount{from: p.Min, upTo: p.Min}
		c.parts[k] = st
	}
	for read := 0; st.upTo < p.Max && read < msgCountBudget; {
		b, err := s.Read(p.Topic, p.Partition, st.upTo, 1<<20)
		if err != nil || len(b) == 0 {
			break
		}
		read += len(b)
		off := 0
		for off+store.RecordHeaderLen <= len(b) {
			size := store.RecordHeaderLen + int(int32(binary.BigEndian.Uint32(b[off:])))
			if size < store.RecordHeaderLen || off+size > len(b) {
				break
			}
			off += size
			st.n++
		}
		if off == 0 {
			break // a record larger than the read, or damage: stop here
		}
		st.upTo += int64(off)
	}
	return st.n, st.upTo >= p.Max
}

// forget drops partitions the store no longer has.
func (c *msgCounter) forget(keep map[msgKey]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.parts {
		if !keep[k] {
			delete(c.parts, k)
		}
	}
}
