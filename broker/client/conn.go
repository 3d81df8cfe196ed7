package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("client: closed")

// ConnError reports a failure of the connection to a broker. Written tells
// whether the request had been fully handed to the socket: when it had not,
// the broker cannot have acted on it and a retry cannot duplicate it.
type ConnError struct {
	Addr    string
	Written bool
	// Silent is set when the peer closed the connection without ever
	// answering: most likely not a MetaQ broker port at all (a replication,
	// admin or dashboard port, say), which the error then says.
	Silent bool
	Err    error
}

func (e *ConnError) Error() string {
	if e.Silent {
		return fmt.Sprintf("client: %s closed the connection without answering anything: is it a MetaQ broker port (serverPort)? A replication, admin or dashboard port closes like this (%v)",
			e.Addr, e.Err)
	}
	state := "before the request was written"
	if e.Written {
		state = "after the request was written (outcome unknown)"
	}
	return fmt.Sprintf("client: connection to %s failed %s: %v", e.Addr, state, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// opaques are shared by all connections of the process and count up from
// MinInt32 like gecko's OpaqueGenerator, wrapping before MaxInt32.
var opaqueCounter atomic.Int64

func init() { opaqueCounter.Store(math.MinInt32) }

func nextOpaque() int32 {
	for {
		v := opaqueCounter.Add(1) - 1
		if v < math.MaxInt32-10 {
			return int32(v)
		}
		opaqueCounter.CompareAndSwap(v+1, math.MinInt32)
	}
}

// conn is one pipelined TCP connection to a broker. Requests are written
// under wmu in the order callers arrive; one reader goroutine matches
// answers to callers by opaque, since a broker may answer out of order.
type conn struct {
	addr  string
	nc    net.Conn
	codec codec
	log   *slog.Logger

	wmu     sync.Mutex   // serialises writes to nc
	buf     []byte       // bytes not yet written, guarded by wmu
	waiting atomic.Int32 // writers waiting for wmu

	mu      sync.Mutex // guards pending, err
	pending map[int32]chan frame
	err     error

	lastIO    atomic.Int64  // unix nanos of the last read or write
	answered  atomic.Bool   // a frame was read: the peer speaks MetaQ
	hbTimeout time.Duration // wait for a heartbeat answer (gecko: 5s)
	done      chan struct{}
	wg        sync.WaitGroup
}

// maxFrameBody bounds a response body (a get answer is at most maxSize,
// which the client caps at 16 MiB).
const maxFrameBody = 32 << 20

// dialFunc opens a connection (Config.Dial).
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func dialConn(ctx context.Context, addr string, cd codec, timeout time.Duration, dial dialFunc, heartbeat time.Duration, log *slog.Logger) (*conn, error) {
	if dial == nil {
		d := net.Dialer{Timeout: timeout}
		dial = d.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	nc, err := dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, &ConnError{Addr: addr, Err: err}
	}
	c := &conn{addr: addr, nc: nc, codec: cd, log: log, pending: make(map[int32]chan frame), done: make(chan struct{}),
		hbTimeout: 5 * time.Second}
	if heartbeat > 0 && heartbeat < c.hbTimeout {
		c.hbTimeout = heartbeat // short intervals (tests) get short timeouts
	}
	c.lastIO.Store(time.Now().UnixNano())
	c.wg.Add(1)
	go c.readLoop()
	if heartbeat > 0 {
		c.wg.Add(1)
		go c.heartbeatLoop(heartbeat)
	}
	return c, nil
}

func (c *conn) readLoop() {
	defer c.wg.Done()
	read := c.codec.newReader(bufio.NewReaderSize(c.nc, 64<<10), maxFrameBody)
	for {
		f, err := read()
		if err != nil {
			c.fail(err)
			return
		}
		c.lastIO.Store(time.Now().UnixNano())
		c.answered.Store(true)
		c.mu.Lock()
		ch := c.pending[f.opaque]
		delete(c.pending, f.opaque)
		c.mu.Unlock()
		if ch != nil {
			ch <- f // buffered, never blocks
		}
	}
}

// heartbeatLoop sends `version` on a connection idle for the interval, and
// closes the connection after three failed heartbeats in a row, as gecko does.
func (c *conn) heartbeatLoop(interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, c.lastIO.Load())) < interval {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.hbTimeout)
		f, err := c.roundTrip(ctx, func(dst []byte, op int32) []byte { return c.codec.appendVersion(dst, op) })
		cancel()
		if err == nil && f.code == 200 {
			failures = 0
			continue
		}
		var ce *ConnError
		if errors.As(err, &ce) {
			return // already failed
		}
		failures++
		if failures >= 3 {
			c.log.Warn("BROKER("+c.addr+"): heartbeat failed 3 times, closing", "err", err)
			c.fail(errors.New("heartbeat failed"))
			return
		}
	}
}

// fail closes the connection once and fails every pending request.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pend := c.pending
	c.pending = nil
	c.mu.Unlock()
	close(c.done)
	c.nc.Close()
	for _, ch := range pend {
		close(ch)
	}
}

func (c *conn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

func (c *conn) close() {
	c.fail(ErrClosed)
	c.wg.Wait()
}

// roundTrip writes one request built by build and waits for its answer.
func (c *conn) roundTrip(ctx context.Context, build func(dst []byte, opaque int32) []byte) (frame, error) {
	cl, err := c.start(ctx, build)
	if err != nil {
		return frame{}, err
	}
	return cl.wait(ctx)
}

// call is a request that has been written and awaits its answer.
type call struct {
	c  *conn
	op int32
	ch chan frame
}

// start writes one request; requests are written in the order start is
// called, so a caller that calls start sequentially keeps its order.
func (c *conn) start(ctx context.Context, build func(dst []byte, opaque int32) []byte) (*call, error) {
	op := nextOpaque()
	ch := make(chan frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, &ConnError{Addr: c.addr, Err: err}
	}
	c.pending[op] = ch
	c.mu.Unlock()

	// Writers that queue up behind one another share one write: a writer
	// that sees another waiting leaves its bytes in buf for that one to
	// send. The last in line always writes, so nothing is left behind.
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	c.buf = build(c.buf, op)
	if c.waiting.Load() > 0 && len(c.buf) < 256<<10 {
		c.wmu.Unlock()
		return &call{c: c, op: op, ch: ch}, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
	} else {
		c.nc.SetWriteDeadline(time.Time{})
	}
	n, err := c.nc.Write(c.buf)
	full := n == len(c.buf)
	if cap(c.buf) > 1<<20 {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
		// The broker acts only on a complete frame, so a request cut short
		// cannot have been run and is safe to retry. Requests of writers
		// that left their bytes to us fail through their pending channel
		// as "outcome unknown", which never retries them.
		return nil, &ConnError{Addr: c.addr, Written: full && n > 0, Err: err}
	}
	c.lastIO.Store(time.Now().UnixNano())
	return &call{c: c, op: op, ch: ch}, nil
}

// wait returns the answer, or an error when the connection failed (outcome
// unknown) or ctx ended.
func (cl *call) wait(ctx context.Context) (frame, error) {
	c := cl.c
	select {
	case f, ok := <-cl.ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			silent := !c.answered.Load() && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
			return frame{}, &ConnError{Addr: c.addr, Written: true, Silent: silent, Err: err}
		}
		return f, nil
	case <-ctx.Done():
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, cl.op)
		}
		c.mu.Unlock()
		return frame{}, fmt.Errorf("client: waiting for %s: %w", c.addr, ctx.Err())
	}
}

// pool keeps one connection per broker address, shared by every producer
// and consumer of a Client (as the Java session factory does), and redials
// a broken one on the next use.
type pool struct {
	codec     codec
	dial      time.Duration
	dialer    dialFunc // nil: net.Dialer
	heartbeat time.Duration
	log       *slog.Logger

	mu     sync.Mutex
	conns  map[string]*conn
	dialMu map[string]*sync.Mutex
	closed bool
}

func newPool(cd codec, dial time.Duration, dialer dialFunc, heartbeat time.Duration, log *slog.Logger) *pool {
	return &pool{codec: cd, dial: dial, dialer: dialer, heartbeat: heartbeat, log: log,
		conns: make(map[string]*conn), dialMu: make(map[string]*sync.Mutex)}
}

func (p *pool) get(ctx context.Context, addr string) (*conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if c := p.conns[addr]; c != nil && !c.broken() {
		p.mu.Unlock()
		return c, nil
	}
	dm := p.dialMu[addr]
	if dm == nil {
		dm = new(sync.Mutex)
		p.dialMu[addr] = dm
	}
	p.mu.Unlock()

	dm.Lock() // one dial per address at a time
	defer dm.Unlock()
	p.mu.Lock()
	if c := p.conns[addr]; c != nil && !c.broken() {
		p.mu.Unlock()
		return c, nil
	}
	old := p.conns[addr]
	delete(p.conns, addr)
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	c, err := dialConn(ctx, addr, p.codec, p.dial, p.dialer, p.heartbeat, p.log)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return nil, ErrClosed
	}
	p.conns[addr] = c
	p.mu.Unlock()
	return c, nil
}

// do sends one request to addr and waits for its answer.
func (p *pool) do(ctx context.Context, addr string, build func(dst []byte, opaque int32) []byte) (frame, error) {
	c, err := p.get(ctx, addr)
	if err != nil {
		return frame{}, err
	}
	return c.roundTrip(ctx, build)
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	cs := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}
