package broker

import (
	"errors"
	"strconv"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// A sync unit is a transaction's commit that a synchronous (samsa) master
// sends its slave in one frame (wire.SyncUnit, see sync unit in
// broker/wire/doc.go) when the slave offered it: the slave stores it as one
// unit of its log, all or none, and answers once. A slave offers it by
// answering `stats sync_units` (syncUnitsItem) with the largest unit it
// decodes; a MetaQ slave has no such line and gets one sync per message.

// syncUnitsItem is the stats item a synchronous master asks its slave on
// every new connection, and the first word of the line a slave that takes
// sync units answers it with.
const syncUnitsItem = "sync_units"

// handleSyncUnit stores a master's sync unit (a sync slave's worker): every
// message is checked as a sync is (checkPut), and the first refusal is the
// answer, with nothing stored; otherwise the messages go to the store as
// one unit (unitStore, store.Store.AppendUnitAsync: one write after a unit
// entry, which recovery keeps whole or drops whole) and the answer waits
// for its outcome: 200 with the number of messages, or the store's
// failure. The master sends a unit only once its partitions' earlier syncs
// were answered, and nothing of them until it is answered, so the unit
// keeps its place in each partition without a queue of its own.
func (b *Broker) handleSyncUnit(c *conn, u *wire.SyncUnit) {
	n := len(u.Syncs)
	b.stats.cmdPut.Add(int64(n))
	var appends []store.PartitionAppend // one per partition, in order of first message
	place := map[partKey]int{}          // a partition's place in appends
	var te *topicEntry
	for i := range u.Syncs {
		s := &u.Syncs[i]
		r := syncReqOf(s)
		if te == nil || s.Topic != u.Syncs[i-1].Topic {
			te = b.topicEntry(s.Topic)
		}
		if res := b.checkPut(&r, r.partition, te); res != nil {
			b.countPuts(s.Topic, putTally{failed: int64(n)})
			c.sendResult(res.Code, string(res.Body), u.Opaque)
			return
		}
		m := store.Message{ID: r.id, Flag: r.flag, Body: r.body}
		if r.checksum != wire.NoChecksum {
			m.Checksum, m.ChecksumSet = uint32(r.checksum), true
		}
		key := partKey{s.Topic, int(s.Partition)}
		k, ok := place[key]
		if !ok {
			k = len(appends)
			place[key] = k
			appends = append(appends, store.PartitionAppend{Topic: s.Topic, Partition: int(s.Partition)})
		}
		appends[k].Msgs = append(appends[k].Msgs, m)
	}
	for i, a := range appends {
		if i == 0 || a.Topic != appends[i-1].Topic {
			if te := b.topicEntry(a.Topic); te.ok {
				b.ensureTopic(b.ctx, a.Topic, te)
			}
		}
	}
	ch := make(chan []store.AppendOutcome, 1)
	done := func(outs []store.AppendOutcome) { ch <- outs }
	if us, ok := b.puts.(unitStore); ok {
		us.storeUnit(b.ctx, appends, done)
	} else {
		localStore{b.store}.storeUnit(b.ctx, appends, done)
	}
	outs := <-ch
	for i, a := range appends {
		var err error
		switch {
		case i >= len(outs):
			err = errors.New("broker: the store returned no outcome")
		case outs[i].Err != nil:
			err = outs[i].Err
		}
		if err == nil {
			continue
		}
		b.logAppendError(a.Topic, int32(a.Partition), err)
		if errors.Is(err, store.ErrNoSpace) {
			b.diskFull()
		}
		b.countPuts(a.Topic, putTally{failed: int64(n)})
		c.sendResult(wire.StatusInternalServerError, b.putError(a.Topic, int32(a.Partition), err.Error()), u.Opaque)
		return
	}
	for _, a := range appends {
		t := putTally{stored: int64(len(a.Msgs))}
		for _, m := range a.Msgs {
			t.size += int64(len(m.Body))
		}
		b.countPuts(a.Topic, t)
	}
	c.sendResult(wire.StatusOK, strconv.Itoa(n), u.Opaque)
}
