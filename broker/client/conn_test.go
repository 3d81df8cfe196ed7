package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// rawServer accepts one connection at a time and hands decoded commands to
// fn, which writes answers itself.
func rawServer(t *testing.T, fn func(c net.Conn, cmds <-chan wire.Command)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch := make(chan wire.Command, 64)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer close(ch)
				d := wire.NewDecoder(bufio.NewReader(c))
				for {
					cmd, err := d.Decode()
					if err != nil {
						return
					}
					ch <- cmd
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				fn(c, ch)
			}()
		}
	}()
	return ln.Addr().String()
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestConnOutOfOrderAnswers checks that pipelined requests are matched by
// opaque when the broker answers in reverse order.
func TestConnOutOfOrderAnswers(t *testing.T) {
	addr := rawServer(t, func(c net.Conn, cmds <-chan wire.Command) {
		var batch []*wire.Version
		for cmd := range cmds {
			batch = append(batch, cmd.(*wire.Version))
			if len(batch) == 5 {
				for i := len(batch) - 1; i >= 0; i-- {
					body := string(rune('0' + i))
					c.Write(wire.NewResult(200, body, batch[i].Opaque).AppendTo(nil))
				}
				batch = nil
			}
		}
	})
	cn, err := dialConn(context.Background(), addr, wireCodec{}, time.Second, nil, 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	var calls []*call
	for i := 0; i < 5; i++ {
		cl, err := cn.start(context.Background(), func(dst []byte, op int32) []byte { return wireCodec{}.appendVersion(dst, op) })
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	for i, cl := range calls {
		f, err := cl.wait(context.Background())
		if err != nil || string(f.body) != string(rune('0'+i)) {
			t.Fatalf("call %d got %q %v", i, f.body, err)
		}
	}
}

// TestConnHeartbeat checks that an idle connection sends `version` and is
// closed after three unanswered heartbeats.
func TestConnHeartbeat(t *testing.T) {
	var versions atomic.Int32
	answer := atomic.Bool{}
	answer.Store(true)
	addr := rawServer(t, func(c net.Conn, cmds <-chan wire.Command) {
		for cmd := range cmds {
			if v, ok := cmd.(*wire.Version); ok {
				versions.Add(1)
				if answer.Load() {
					c.Write(wire.NewResult(200, "1.4.6", v.Opaque).AppendTo(nil))
				}
			}
		}
	})
	cn, err := dialConn(context.Background(), addr, wireCodec{}, time.Second, nil, 40*time.Millisecond, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if versions.Load() < 3 {
			return errors.New("too few heartbeats")
		}
		return nil
	})
	if cn.broken() {
		t.Fatal("answered heartbeats closed the connection")
	}
	// Unanswered heartbeats time out (the interval here, 5s by default);
	// three in a row close the connection.
	answer.Store(false)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !cn.broken() {
			return errors.New("still open")
		}
		return nil
	})
}

// TestConnErrorBeforeWrite checks the retry classification of a refused
// connection and of a connection lost after the write.
func TestConnErrorBeforeWrite(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	p := newPool(wireCodec{}, time.Second, nil, 0, discard)
	defer p.close()
	_, err := p.do(context.Background(), addr, func(dst []byte, op int32) []byte { return wireCodec{}.appendVersion(dst, op) })
	if !Retriable(err) {
		t.Fatalf("refused connection not retriable: %v", err)
	}
	// A broker that reads the request and drops the connection: unknown outcome.
	addr2 := rawServer(t, func(c net.Conn, cmds <-chan wire.Command) { <-cmds })
	_, err = p.do(context.Background(), addr2, func(dst []byte, op int32) []byte { return wireCodec{}.appendVersion(dst, op) })
	var ce *ConnError
	if !errors.As(err, &ce) || Retriable(err) {
		t.Fatalf("lost answer classified %v (retriable %v)", err, Retriable(err))
	}
}

func TestDecodeRecords(t *testing.T) {
	m := &Message{Payload: []byte("hello"), HasAttribute: true, Attribute: "attr"}
	body, flag := encodeBody(m)
	if flag != 1 || checksum(body) != 1264772380 {
		t.Fatalf("attribute body checksum %d flag %d", checksum(body), flag)
	}
	rec := func(id int64, body []byte, flag int32) []byte {
		b := make([]byte, 20+len(body))
		b[3] = byte(len(body))
		sum := uint32(checksum(body))
		b[4], b[5], b[6], b[7] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
		for i := 0; i < 8; i++ {
			b[8+i] = byte(uint64(id) >> (56 - 8*i))
		}
		b[19] = byte(flag)
		copy(b[20:], body)
		return b
	}
	data := append(rec(7, []byte("hello"), 0), rec(8, body, 1)...)
	data = append(data, rec(9, []byte("partial"), 0)[:22]...)
	msgs, n, err := decodeRecords("t", Partition{0, 0}, 100, data)
	if err != nil || len(msgs) != 2 || n != 58 {
		t.Fatalf("decoded %d msgs, %d bytes, %v", len(msgs), n, err)
	}
	if msgs[0].Offset != 100 || msgs[0].NextOffset != 125 || string(msgs[0].Payload) != "hello" {
		t.Fatalf("first %+v", msgs[0])
	}
	if !msgs[1].HasAttribute || msgs[1].Attribute != "attr" || string(msgs[1].Payload) != "hello" || msgs[1].NextOffset != 158 {
		t.Fatalf("second %+v", msgs[1])
	}
	bad := rec(7, []byte("hello"), 0)
	bad[25-1] ^= 1
	if _, _, err := decodeRecords("t", Partition{0, 0}, 0, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt record: %v", err)
	}
}

// A fetch's records are decoded with one allocation (the list of messages):
// the payloads share the fetched buffer, each with a capacity of its own, so
// appending to one leaves the next record as it was.
func TestDecodeRecordsSharesTheFetchedBuffer(t *testing.T) {
	var data []byte
	for i := range 50 {
		body := []byte(fmt.Sprintf("message-%02d", i))
		rec := make([]byte, 20+len(body))
		binary.BigEndian.PutUint32(rec, uint32(len(body)))
		binary.BigEndian.PutUint32(rec[4:], uint32(checksum(body)))
		binary.BigEndian.PutUint64(rec[8:], uint64(1000+i))
		copy(rec[20:], body)
		data = append(data, rec...)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if msgs, _, err := decodeRecords("t", Partition{0, 0}, 0, data); err != nil || len(msgs) != 50 {
			t.Fatalf("decoded %d messages: %v", len(msgs), err)
		}
	})
	if allocs != 1 {
		t.Errorf("decodeRecords of 50 records: %v allocations, want 1", allocs)
	}
	msgs, _, _ := decodeRecords("t", Partition{0, 0}, 0, data)
	_ = append(msgs[0].Payload, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"...)
	for i, m := range msgs {
		if want := fmt.Sprintf("message-%02d", i); string(m.Payload) != want || m.ID != int64(1000+i) {
			t.Fatalf("message %d: %q id %d, want %q id %d", i, m.Payload, m.ID, want, 1000+i)
		}
	}
	if msgs, _, err := decodeRecords("t", Partition{0, 0}, 0, data); err != nil || string(msgs[1].Payload) != "message-01" {
		t.Fatalf("after an append to the first payload the second reads %q (%v)", msgs[1].Payload, err)
	}
}

func TestIDTime(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	id := IDForTime(now) | 5<<12 | 17
	if !IDTime(id).Equal(now) {
		t.Fatalf("IDTime %v, want %v", IDTime(id), now)
	}
}

func TestIDCacheLRU(t *testing.T) {
	c := newIDCache(3)
	for i := int64(1); i <= 3; i++ {
		c.add(idKey{"g", i})
	}
	c.add(idKey{"g", 1}) // refresh 1: 2 is now the oldest
	c.add(idKey{"g", 4})
	if c.seen(idKey{"g", 2}) || !c.seen(idKey{"g", 1}) || !c.seen(idKey{"g", 4}) || !c.seen(idKey{"g", 3}) {
		t.Fatal("LRU evicted the wrong id")
	}
	if c.seen(idKey{"other", 1}) {
		t.Fatal("ids are per group")
	}
}
