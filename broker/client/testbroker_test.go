package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/broker/wire"
)

// testBroker is a small in-process MetaQ broker for the client's tests: an
// in-memory log per partition with segment boundaries, answering put, get,
// offset and version exactly as the put, get, offset and version notes in broker/wire/doc.go say, registered in a real
// ZooKeeper through broker/registry as ZooKeeper layout in broker/wire/doc.go lays it out. Its data survives
// Stop/Start, like a broker restart with a durable store (every put is in
// the log before it is acknowledged). It stands in for the project's broker
// until that can be started in process.
type testBroker struct {
	t       testing.TB
	id      int
	zk      string
	root    string
	segSize int64

	mu     sync.Mutex
	topics map[string]int
	logs   map[string]*memLog
	lastMs int64
	seq    int64

	ln    net.Listener
	addr  string
	reg   *registry.Registry
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

type memLog struct {
	data      []byte
	segStarts []int64
}

func newTestBroker(t testing.TB, id int, zk, root string, segSize int64, topics map[string]int) *testBroker {
	b := &testBroker{t: t, id: id, zk: zk, root: root, segSize: segSize, topics: topics, logs: map[string]*memLog{}}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

func (b *testBroker) Start() {
	b.t.Helper()
	addr := b.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old port may linger briefly after a stop
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		b.t.Fatalf("test broker listen: %v", err)
	}
	b.mu.Lock()
	b.ln = ln
	b.addr = ln.Addr().String()
	b.conns = map[net.Conn]bool{}
	b.mu.Unlock()
	b.wg.Add(1)
	go b.accept(ln)
	if b.zk != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, port, _ := net.SplitHostPort(b.addr)
		pn, _ := strconv.Atoi(port)
		reg, err := registry.New(ctx, registry.Options{Connect: b.zk, Root: b.root, BrokerID: b.id, Host: "127.0.0.1",
			Port: pn, SessionTimeout: 4 * time.Second, ConnectionTimeout: 10 * time.Second})
		if err != nil {
			b.t.Fatalf("test broker registry: %v", err)
		}
		if err := reg.RegisterBrokerAs(ctx, "meta://"+b.addr, 0); err != nil {
			b.t.Fatalf("test broker register: %v", err)
		}
		for topic, n := range b.topics {
			if err := reg.RegisterTopic(ctx, topic, n, true, true); err != nil {
				b.t.Fatalf("test broker register topic: %v", err)
			}
		}
		b.reg = reg
	}
}

// Stop unregisters and closes every connection, keeping the data.
func (b *testBroker) Stop() {
	b.mu.Lock()
	ln, reg := b.ln, b.reg
	b.ln, b.reg = nil, nil
	b.mu.Unlock()
	if ln == nil {
		return
	}
	if reg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reg.UnregisterAll(ctx)
		cancel()
		reg.Close()
	}
	ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *testBroker) accept(ln net.Listener) {
	defer b.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns[c] = true
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(c)
	}
}

func (b *testBroker) serve(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	d := wire.NewDecoder(bufio.NewReader(c))
	w := bufio.NewWriter(c)
	for {
		cmd, err := d.Decode()
		if err != nil {
			return
		}
		var out []byte
		switch r := cmd.(type) {
		case *wire.Put:
			out = b.put(r)
		case *wire.Get:
			out = b.get(r)
		case *wire.Offset:
			out = b.offset(r)
		case *wire.Version:
			out = wire.NewResult(200, "test", r.Opaque).AppendTo(nil)
		case *wire.Quit:
			return
		default:
			out = wire.NewResult(503, "no processor", cmd.OpaqueID()).AppendTo(nil)
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func (b *testBroker) log(topic string, p int32) *memLog {
	k := topic + "-" + strconv.Itoa(int(p))
	l := b.logs[k]
	if l == nil {
		l = &memLog{segStarts: []int64{0}}
		b.logs[k] = l
	}
	return l
}

// nextID makes a wall-clock id as this project's broker does (see Message ids in broker/wire/doc.go).
func (b *testBroker) nextIDLocked() int64 {
	ms := time.Now().UnixMilli()
	if ms <= b.lastMs {
		b.seq++
		if b.seq >= 4096 {
			b.lastMs++
			b.seq = 0
		}
		ms = b.lastMs
	} else {
		b.lastMs, b.seq = ms, 0
	}
	return (ms-idEpochMillis)<<22 | int64(b.id)<<12 | b.seq
}

func (b *testBroker) put(r *wire.Put) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.topics[r.Topic]
	if !ok {
		return wire.NewResult(500, "The server do not accept topic "+r.Topic, r.Opaque).AppendTo(nil)
	}
	p := r.Partition
	if p == -1 {
		p = int32(rand.IntN(n))
	}
	if p < 0 || int(p) >= n {
		return wire.NewResult(500, fmt.Sprintf("wrong partition %d", p), r.Opaque).AppendTo(nil)
	}
	if r.Checksum != wire.NoChecksum && r.Checksum != checksum(r.Body) {
		return wire.NewResult(500, "Checksum failure", r.Opaque).AppendTo(nil)
	}
	l := b.log(r.Topic, p)
	if int64(len(l.data))-l.segStarts[len(l.segStarts)-1] >= b.segSize {
		l.segStarts = append(l.segStarts, int64(len(l.data)))
	}
	id := b.nextIDLocked()
	off := int64(len(l.data))
	rec := make([]byte, 20+len(r.Body))
	binary.BigEndian.PutUint32(rec, uint32(len(r.Body)))
	binary.BigEndian.PutUint32(rec[4:], uint32(checksum(r.Body)))
	binary.BigEndian.PutUint64(rec[8:], uint64(id))
	binary.BigEndian.PutUint32(rec[16:], uint32(r.Flag))
	copy(rec[20:], r.Body)
	l.data = append(l.data, rec...)
	return wire.NewResult(200, fmt.Sprintf("%d %d %d", id, p, off), r.Opaque).AppendTo(nil)
}

func (b *testBroker) get(r *wire.Get) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := r.Topic + "-" + strconv.Itoa(int(r.Partition))
	l := b.logs[k]
	if l == nil {
		return wire.NewResult(404, "The topic `"+r.Topic+"` in partition `"+strconv.Itoa(int(r.Partition))+"` is not exists", r.Opaque).AppendTo(nil)
	}
	if r.MaxSize <= 0 {
		return wire.NewResult(400, "Bad request,invalid max size", r.Opaque).AppendTo(nil)
	}
	end := int64(len(l.data))
	switch {
	case r.Offset < l.segStarts[0]:
		return wire.NewResult(301, strconv.FormatInt(l.segStarts[0], 10), r.Opaque).AppendTo(nil)
	case r.Offset >= end:
		if r.Offset == math.MaxInt64 {
			return wire.NewResult(301, strconv.FormatInt(end, 10), r.Opaque).AppendTo(nil)
		}
		return wire.NewResult(404, "Could not find message at position "+strconv.FormatInt(r.Offset, 10), r.Opaque).AppendTo(nil)
	}
	segEnd := end
	for i, s := range l.segStarts {
		if s > r.Offset {
			segEnd = s
			break
		}
		_ = i
	}
	n := min(int64(r.MaxSize), segEnd-r.Offset)
	v := &wire.Value{Data: l.data[r.Offset : r.Offset+n], Opaque: r.Opaque}
	return v.AppendTo(nil)
}

func (b *testBroker) offset(r *wire.Offset) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.logs[r.Topic+"-"+strconv.Itoa(int(r.Partition))]
	if l == nil {
		return wire.NewResult(404, "not exists", r.Opaque).AppendTo(nil)
	}
	end := int64(len(l.data))
	var v int64
	switch {
	case r.Offset >= end:
		v = end
	case r.Offset < l.segStarts[0]:
		v = l.segStarts[0]
	default:
		for _, s := range l.segStarts {
			if s <= r.Offset {
				v = s
			}
		}
	}
	return wire.NewResult(200, strconv.FormatInt(v, 10), r.Opaque).AppendTo(nil)
}
