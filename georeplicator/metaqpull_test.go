package georeplicator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// fakeMetaQMaster serves `get` and `offset` from a memStore the way a MetaQ
// 1.4.6 broker does (see get and offset in broker/wire/doc.go; updateConsumerOffsets=false): a get
// may end inside a record, 404 at and beyond the end, 301 below the start.
type fakeMetaQMaster struct {
	st  *memStore
	ln  net.Listener
	wg  sync.WaitGroup
	mu  sync.Mutex
	top map[string]int
	ch  chan struct{}
}

func newFakeMetaQMaster(t *testing.T, st *memStore, topics map[string]int) *fakeMetaQMaster {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMetaQMaster{st: st, ln: ln, top: topics, ch: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeMetaQMaster) serve(c net.Conn) {
	defer c.Close()
	dec := wire.NewDecoder(bufio.NewReader(c))
	for {
		cmd, err := dec.Decode()
		if err != nil {
			return
		}
		var out []byte
		switch q := cmd.(type) {
		case *wire.Get:
			out = f.get(q)
		case *wire.Offset:
			info, err := f.st.Partition(q.Topic, int(q.Partition))
			switch {
			case err != nil:
				out = wire.AppendResult(nil, 404, "The topic `"+q.Topic+"` in partition `"+strconv.Itoa(int(q.Partition))+"` is not exists", q.Opaque)
			case q.Offset >= info.Max:
				out = wire.AppendResult(nil, 200, strconv.FormatInt(info.Max, 10), q.Opaque)
			default:
				out = wire.AppendResult(nil, 200, strconv.FormatInt(info.Min, 10), q.Opaque)
			}
		default:
			out = wire.AppendResult(nil, 500, "unexpected", cmd.OpaqueID())
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (f *fakeMetaQMaster) get(q *wire.Get) []byte {
	info, err := f.st.Partition(q.Topic, int(q.Partition))
	if err != nil {
		return wire.AppendResult(nil, 404, "The topic `"+q.Topic+"` in partition `"+strconv.Itoa(int(q.Partition))+"` is not exists", q.Opaque)
	}
	switch {
	case q.Offset < info.Min:
		return wire.AppendResult(nil, 301, strconv.FormatInt(info.Min, 10), q.Opaque)
	case q.Offset >= info.Max:
		return wire.AppendResult(nil, 404, "Could not find message at position "+strconv.FormatInt(q.Offset, 10), q.Opaque)
	}
	data, _ := f.st.Read(q.Topic, int(q.Partition), q.Offset, int(q.MaxSize))
	return append(wire.AppendValueHeader(nil, len(data), q.Opaque), data...)
}

func (f *fakeMetaQMaster) Addr(context.Context) (string, error) { return f.ln.Addr().String(), nil }
func (f *fakeMetaQMaster) Partitions(context.Context) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.top {
		out[k] = v
	}
	return out, nil
}
func (f *fakeMetaQMaster) ConfigVersion(context.Context) (string, error) { return "1", nil }
func (f *fakeMetaQMaster) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}
func (f *fakeMetaQMaster) setTopics(topics map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.top = topics
	close(f.ch)
	f.ch = make(chan struct{})
}

// metaqRecord builds a stored MetaQ record with the given body.
func metaqRecord(id int64, body []byte) []byte {
	b := make([]byte, 20+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	binary.BigEndian.PutUint32(b[4:], crc32.ChecksumIEEE(body)&0x7FFFFFFF)
	binary.BigEndian.PutUint64(b[8:], uint64(id))
	copy(b[20:], body)
	return b
}

func samePartition(master, slave *memStore, topic string, part int) error {
	mi, err := master.Partition(topic, part)
	if err != nil {
		return err
	}
	si, err := slave.Partition(topic, part)
	if err != nil {
		return fmt.Errorf("%s-%d: %v", topic, part, err)
	}
	if mi.Min != si.Min || mi.Max != si.Max {
		return fmt.Errorf("%s-%d: slave [%d,%d), master [%d,%d)", topic, part, si.Min, si.Max, mi.Min, mi.Max)
	}
	if mi.Max == mi.Min {
		return nil
	}
	a, _ := master.Read(topic, part, mi.Min, int(mi.Max-mi.Min))
	b, _ := slave.Read(topic, part, mi.Min, int(mi.Max-mi.Min))
	if !bytes.Equal(a, b) {
		return fmt.Errorf("%s-%d: bytes differ", topic, part)
	}
	return nil
}

// TestMetaQPuller: the MetaQ method copies byte-identically at the same
// offsets through gets that end inside records and a record larger than
// the fetch size; it starts a partition the master has trimmed at the
// master's first offset; it follows a partition added later.
func TestMetaQPuller(t *testing.T) {
	master := newMemStore()
	// Partition 1: the master removed its first records (retention).
	for i := 0; i < 10; i++ {
		master.put("t", 1, metaqRecord(int64(100+i), []byte("r"+strconv.Itoa(i))))
	}
	master.truncate(master.log[6].pos)
	for i := 0; i < 30; i++ {
		master.put("t", 0, metaqRecord(int64(i), []byte(strings.Repeat("x", 10+i*7))))
	}
	master.put("t", 0, metaqRecord(99, bytes.Repeat([]byte("big"), 300))) // > FetchSize
	if info, _ := master.Partition("t", 1); info.Min == 0 {
		t.Fatal("truncate did not move partition 1's start")
	}
	fm := newFakeMetaQMaster(t, master, map[string]int{"t": 2})
	slave := newMemStore()
	p, err := NewMetaQPuller(MetaQOptions{Sink: slave, Master: fm, Group: "meta-slave-group", MaxDelay: 50 * time.Millisecond, FetchSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		return errors.Join(samePartition(master, slave, "t", 0), samePartition(master, slave, "t", 1))
	})

	// New records and a new partition.
	master.put("t", 0, metaqRecord(200, []byte("later")))
	master.put("t", 2, metaqRecord(300, []byte("new partition")))
	fm.setTopics(map[string]int{"t": 3})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		return errors.Join(samePartition(master, slave, "t", 0), samePartition(master, slave, "t", 2))
	})
	st := p.Status()
	if st.Partitions != 3 || !st.Connected || st.Records == 0 || st.MasterAddr != fm.ln.Addr().String() {
		t.Errorf("status %+v", st)
	}
}

// TestMetaQPullerStopsOnDivergence: a slave partition that holds more than
// the master's is not written to; the partition stops with the reason,
// which is logged once at WARN, while the others replicate.
func TestMetaQPullerStopsOnDivergence(t *testing.T) {
	master, slave := newMemStore(), newMemStore()
	master.put("t", 0, metaqRecord(1, []byte("one")))
	master.put("t", 1, metaqRecord(2, []byte("two")))
	slave.put("t", 0, metaqRecord(1, []byte("one")))
	slave.put("t", 0, metaqRecord(7, []byte("only on the slave")))
	fm := newFakeMetaQMaster(t, master, map[string]int{"t": 2})
	h := &captureHandler{}
	p, err := NewMetaQPuller(MetaQOptions{Sink: slave, Master: fm, MaxDelay: 20 * time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if err := samePartition(master, slave, "t", 1); err != nil {
			return err
		}
		for _, d := range p.Status().Detail {
			if d.Partition == 0 && strings.Contains(d.Stopped, "before this slave's end") {
				return nil
			}
		}
		return fmt.Errorf("partition 0 not stopped: %+v", p.Status().Detail)
	})
	if w := h.warnings(); len(w) != 1 || !strings.Contains(w[0]["err"], "t-0") {
		t.Errorf("warnings %v", w)
	}
	if info, _ := slave.Partition("t", 0); info.Max != int64(2*20+3+17) {
		t.Errorf("the diverged partition was written: %+v", info)
	}
}

// unreachableMaster is a MetaQMaster that cannot be found while down.
type unreachableMaster struct {
	MetaQMaster
	down atomic.Bool
}

func (m *unreachableMaster) Addr(ctx context.Context) (string, error) {
	if m.down.Load() {
		return "", errors.New("master not found")
	}
	return m.MetaQMaster.Addr(ctx)
}

// TestMetaQPullerClearsLastError: the error of a slave that could not
// find its master is shown while it lasts and cleared once it copies again.
func TestMetaQPullerClearsLastError(t *testing.T) {
	master, slave := newMemStore(), newMemStore()
	master.put("t", 0, metaqRecord(1, []byte("one")))
	m := &unreachableMaster{MetaQMaster: newFakeMetaQMaster(t, master, map[string]int{"t": 1})}
	m.down.Store(true)
	p, err := NewMetaQPuller(MetaQOptions{Sink: slave, Master: m, Group: "g", MaxDelay: 50 * time.Millisecond, Resync: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := p.Status(); !strings.Contains(st.LastError, "master not found") {
			return fmt.Errorf("status %+v, want the error", st)
		}
		return nil
	})
	m.down.Store(false)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if err := samePartition(master, slave, "t", 0); err != nil {
			return err
		}
		if st := p.Status(); st.LastError != "" {
			return fmt.Errorf("status %+v, want no error once copying", st)
		}
		return nil
	})
}
