package broker

import (
	"sync"

	"metaq/internal/clock"
)

// idEpoch is MetaQ's IdWorker epoch in Unix milliseconds (see Message ids in broker/wire/doc.go).
const idEpoch = 1303895660503

// idGen makes MetaQ-layout message ids from the wall clock (see Message ids
// and Java defects in broker/wire/doc.go): ((ms - epoch) << 22) | (brokerId << 12) | sequence. Ids only go up:
// when the clock steps back, the last millisecond is reused. The store
// assigns ids itself; the broker needs its own only as a synchronous
// replication master, where the id must be known before the record is
// sent to the slave and stored locally.
type idGen struct {
	brokerID int64
	clock    clock.Clock

	mu     sync.Mutex
	lastMs int64
	seq    int64
}

func (g *idGen) next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.clock.Now().UnixMilli()
	if ms < g.lastMs {
		ms = g.lastMs
	}
	if ms == g.lastMs {
		g.seq = (g.seq + 1) & 0xFFF
		if g.seq == 0 {
			// 4096 ids in this millisecond: borrow the next one.
			ms++
		}
	} else {
		g.seq = 0
	}
	g.lastMs = ms
	return (ms-idEpoch)<<22 | (g.brokerID&0x3FF)<<12 | g.seq
}
