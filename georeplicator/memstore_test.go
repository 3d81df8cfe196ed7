package georeplicator

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
	"sync"
	"time"

	"metaq/broker/store"
)

// memStore is an in-memory LogSource and LogSink with the store's
// semantics as far as replication relies on them: one shared log of
// entries, durable-only ReadLog, WaitDurable, AppendRaw at exact offsets.
// The same replication suite also runs on the real broker/store.
type memStore struct {
	mu      sync.Mutex
	log     []memEntry // in log order
	first   int64      // first retained log position
	end     int64      // log end (all appended)
	durable int64      // durable log end
	parts   map[pkey]*memPart
	changed chan struct{}
	// autoDurable makes every append durable at once.
	autoDurable bool
}

type memEntry struct {
	pos int64
	e   store.LogEntry
}

type memPart struct {
	min  int64
	data []byte
	msgs int64
}

func newMemStore() *memStore {
	return &memStore{parts: map[pkey]*memPart{}, changed: make(chan struct{}), autoDurable: true}
}

func entryLogSize(e store.LogEntry) int64 { return int64(len(e.Records) + len(e.Topic) + 32) }

func (m *memStore) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *memStore) appendLocked(topic string, part int, records []byte) int64 {
	k := pkey{topic, part}
	p := m.parts[k]
	if p == nil {
		p = &memPart{}
		m.parts[k] = p
	}
	off := p.min + int64(len(p.data))
	p.data = append(p.data, records...)
	n, _ := countRecords(records)
	p.msgs += int64(n)
	e := store.LogEntry{Topic: topic, Partition: part, Offset: off, Records: append([]byte(nil), records...), Time: time.Now()}
	m.log = append(m.log, memEntry{pos: m.end, e: e})
	m.end += entryLogSize(e)
	if m.autoDurable {
		m.durable = m.end
	}
	m.notifyLocked()
	return off
}

// put appends records the way the broker's Append would.
func (m *memStore) put(topic string, part int, records []byte) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appendLocked(topic, part, records)
}

// truncate drops log entries below pos (retention); partition data stays
// readable but Min moves to the first retained entry's offset.
func (m *memStore) truncate(pos int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.log) && m.log[i].pos < pos {
		i++
	}
	m.log = m.log[i:]
	if len(m.log) > 0 {
		m.first = m.log[0].pos
	} else {
		m.first = m.end
	}
	mins := map[pkey]int64{}
	for _, le := range m.log {
		k := pkey{le.e.Topic, le.e.Partition}
		if _, ok := mins[k]; !ok {
			mins[k] = le.e.Offset
		}
	}
	for k, p := range m.parts {
		nm, ok := mins[k]
		if !ok {
			nm = p.min + int64(len(p.data))
		}
		p.data = append([]byte(nil), p.data[nm-p.min:]...)
		p.min = nm
	}
}

func (m *memStore) ReadLog(pos int64, maxBytes int) ([]store.LogEntry, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pos < m.first {
		return nil, 0, store.ErrLogTruncated
	}
	i := sort.Search(len(m.log), func(i int) bool { return m.log[i].pos >= pos })
	var out []store.LogEntry
	next, size := pos, 0
	for ; i < len(m.log); i++ {
		le := m.log[i]
		sz := entryLogSize(le.e)
		if le.pos+sz > m.durable || (len(out) > 0 && size+int(sz) > maxBytes) {
			break
		}
		out = append(out, le.e)
		next = le.pos + sz
		size += int(sz)
	}
	return out, next, nil
}

// Backlog counts the durable records of a partition from offset from, and
// the time of the entry holding from.
func (m *memStore) Backlog(topic string, part int, from int64) (int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	var first time.Time
	for _, le := range m.log {
		e := le.e
		end := e.Offset + int64(len(e.Records))
		if e.Topic != topic || e.Partition != part || end <= from || le.pos+entryLogSize(e) > m.durable {
			continue
		}
		if first.IsZero() {
			first = e.Time
		}
		recs := e.Records
		for off := e.Offset; len(recs) >= 20; {
			l := 20 + int(binary.BigEndian.Uint32(recs))
			if off >= from {
				n++
			}
			off += int64(l)
			recs = recs[l:]
		}
	}
	return n, first, nil
}

func (m *memStore) LogBounds() (int64, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first, m.durable
}

func (m *memStore) WaitDurable(ctx context.Context, pos int64) error {
	for {
		m.mu.Lock()
		if m.durable > pos {
			m.mu.Unlock()
			return nil
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (m *memStore) infoLocked(k pkey, p *memPart) store.PartitionInfo {
	end := p.min + int64(len(p.data))
	return store.PartitionInfo{Topic: k.Topic, Partition: k.Partition, Min: p.min, Max: end, Durable: end, Written: end,
		Messages: p.msgs, Bytes: int64(len(p.data))}
}

func (m *memStore) Partitions() []store.PartitionInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.PartitionInfo
	for k, p := range m.parts {
		out = append(out, m.infoLocked(k, p))
	}
	sort.Slice(out, func(i, j int) bool {
		return lessKey(pkey{out[i].Topic, out[i].Partition}, pkey{out[j].Topic, out[j].Partition})
	})
	return out
}

func (m *memStore) Partition(topic string, part int) (store.PartitionInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[pkey{topic, part}]
	if p == nil {
		return store.PartitionInfo{}, store.ErrNoPartition
	}
	return m.infoLocked(pkey{topic, part}, p), nil
}

func (m *memStore) AppendRaw(ctx context.Context, topic string, part int, at int64, records []byte) (int64, error) {
	if err := verifyRecords(records); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := pkey{topic, part}
	p := m.parts[k]
	if p == nil {
		p = &memPart{min: at}
		m.parts[k] = p
	}
	if at != p.min+int64(len(p.data)) {
		return 0, fmt.Errorf("at %d end %d: %w", at, p.min+int64(len(p.data)), store.ErrOffsetMismatch)
	}
	m.appendLocked(topic, part, records)
	return p.min + int64(len(p.data)), nil
}

func (m *memStore) Read(topic string, part int, offset int64, maxBytes int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[pkey{topic, part}]
	if p == nil {
		return nil, store.ErrNoPartition
	}
	end := p.min + int64(len(p.data))
	if offset < p.min || offset >= end {
		return nil, &store.RangeError{Offset: offset, Min: p.min, Max: end}
	}
	b := p.data[offset-p.min:]
	if len(b) > maxBytes {
		b = b[:maxBytes]
	}
	return append([]byte(nil), b...), nil
}

func (m *memStore) DeletePartition(topic string, part int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.parts, pkey{topic, part})
	return nil
}

func (m *memStore) Flush() error { return nil }

// verifyRecords checks framing and CRC as the store does before AppendRaw writes.
func verifyRecords(b []byte) error {
	for len(b) > 0 {
		if len(b) < recordHeaderLen {
			return store.ErrCorrupt
		}
		l := int(binary.BigEndian.Uint32(b))
		if recordHeaderLen+l > len(b) {
			return store.ErrCorrupt
		}
		body := b[recordHeaderLen : recordHeaderLen+l]
		if crc32.ChecksumIEEE(body)&0x7FFFFFFF != binary.BigEndian.Uint32(b[4:]) {
			return store.ErrCorrupt
		}
		b = b[recordHeaderLen+l:]
	}
	return nil
}

// makeRecord builds one stored MetaQ record (see Records in broker/wire/doc.go).
func makeRecord(id int64, body []byte) []byte {
	r := make([]byte, recordHeaderLen+len(body))
	binary.BigEndian.PutUint32(r, uint32(len(body)))
	binary.BigEndian.PutUint32(r[4:], crc32.ChecksumIEEE(body)&0x7FFFFFFF)
	binary.BigEndian.PutUint64(r[8:], uint64(id))
	copy(r[recordHeaderLen:], body)
	return r
}
