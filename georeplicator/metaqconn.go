package georeplicator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/wire"
)

// metaqConn is one MetaQ protocol connection to a master, used for one
// request at a time (as the Java slave's fetch runners use theirs).
type metaqConn struct {
	c   net.Conn
	r   *bufio.Reader
	dec *wire.Decoder
	buf []byte
}

// metaqAnswer is a get, offset or stats answer: a value (data) or a result.
type metaqAnswer struct {
	value bool
	code  int
	body  []byte
}

var metaqOpaque atomic.Int32

func (c *metaqConn) do(ctx context.Context, cmd wire.Command, timeout time.Duration) (metaqAnswer, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Now()) })
	defer stop()
	type appender interface{ AppendTo([]byte) []byte }
	c.buf = cmd.(appender).AppendTo(c.buf[:0])
	if _, err := c.c.Write(c.buf); err != nil {
		return metaqAnswer{}, err
	}
	ans, err := c.dec.Decode()
	if err != nil {
		return metaqAnswer{}, err
	}
	if ans.OpaqueID() != cmd.OpaqueID() {
		return metaqAnswer{}, fmt.Errorf("%w: answer for opaque %d, sent %d", ErrProtocol, ans.OpaqueID(), cmd.OpaqueID())
	}
	switch a := ans.(type) {
	case *wire.Value:
		return metaqAnswer{value: true, code: 200, body: a.Data}, nil
	case *wire.Result:
		return metaqAnswer{code: a.Code, body: a.Body}, nil
	}
	return metaqAnswer{}, fmt.Errorf("%w: unexpected %s answer", ErrProtocol, ans.Name())
}

// metaqPool holds up to max connections to one master address.
type metaqPool struct {
	addr    string
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration
	slots   chan struct{} // one token per connection that may exist
	mu      sync.Mutex
	idle    []*metaqConn
	closed  bool
}

func newMetaqPool(addr string, max int, timeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *metaqPool {
	p := &metaqPool{addr: addr, dial: dial, timeout: timeout, slots: make(chan struct{}, max)}
	if p.dial == nil {
		d := net.Dialer{KeepAlive: 15 * time.Second}
		p.dial = d.DialContext
	}
	return p
}

// do sends cmd on an idle connection, dialling one when fewer than max exist.
// A connection that failed is closed, not reused.
func (p *metaqPool) do(ctx context.Context, cmd wire.Command) (metaqAnswer, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return metaqAnswer{}, ctx.Err()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return metaqAnswer{}, net.ErrClosed
	}
	var c *metaqConn
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		dctx, cancel := context.WithTimeout(ctx, p.timeout)
		nc, err := p.dial(dctx, "tcp", p.addr)
		cancel()
		if err != nil {
			<-p.slots
			return metaqAnswer{}, fmt.Errorf("georeplicator: dial master %s: %w", p.addr, err)
		}
		r := bufio.NewReaderSize(nc, 64<<10)
		dec := wire.NewDecoder(r)
		dec.MaxBodySize = maxFetchSize + 1<<20
		c = &metaqConn{c: nc, r: r, dec: dec}
	}
	ans, err := c.do(ctx, cmd, p.timeout)
	p.mu.Lock()
	if err != nil || p.closed {
		c.c.Close()
	} else {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	<-p.slots
	if err != nil {
		return ans, fmt.Errorf("georeplicator: %s to master %s: %w", cmd.Name(), p.addr, err)
	}
	return ans, nil
}

func (p *metaqPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.c.Close()
	}
}

// get sends `get topic group partition offset maxSize`.
func (p *metaqPool) get(ctx context.Context, topic, group string, partition int, offset int64, maxSize int) (metaqAnswer, error) {
	return p.do(ctx, &wire.Get{Topic: topic, Group: group, Partition: int32(partition), Offset: offset,
		MaxSize: int32(maxSize), Opaque: metaqOpaque.Add(1)})
}

// offset sends `offset topic group partition offset` and returns the
// number answered; errNoMasterStore when the master has no such partition.
func (p *metaqPool) offset(ctx context.Context, topic, group string, partition int, offset int64) (int64, error) {
	ans, err := p.do(ctx, &wire.Offset{Topic: topic, Group: group, Partition: int32(partition), Offset: offset,
		Opaque: metaqOpaque.Add(1)})
	if err != nil {
		return 0, err
	}
	switch ans.code {
	case 200:
		v, err := strconv.ParseInt(strings.TrimSpace(string(ans.body)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: offset answer %q from %s", ErrProtocol, ans.body, p.addr)
		}
		return v, nil
	case 404:
		return 0, errNoMasterStore
	}
	return 0, fmt.Errorf("georeplicator: offset %s-%d at master %s: %d %s", topic, partition, p.addr, ans.code, ans.body)
}

var errNoMasterStore = errors.New("georeplicator: the master has no store for this partition")
