package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// forwarder sends a Hold's puts to the MetaQ port of the master its target
// names (gossip's or ZooKeeper's master of the brokerId: the new master as
// a rule, but whatever they name, which may be a master that is gone) as a
// MetaQ client does: one connection, puts pipelined, answers matched by
// opaque.
// Puts that carry an id fixed before they reached this broker (a slave
// site's outbox entries, storeforward.go) go on a second connection, a
// gateway link opened with link (HoldOptions.Dial), as syncs that keep
// their ids there; without link they are not sent (Hold.forward).
type forwarder struct {
	b      *Broker
	target func(context.Context) (string, error)
	link   func(context.Context, string) (net.Conn, error)

	mu       sync.Mutex
	cur      *fwdConn // plain puts
	curLink  *fwdConn // puts that keep their ids, on a gateway link
	inflight int      // send calls running
	idle     bool     // close the connections once no send runs (the Hold ended)
	opaque   atomic.Int32
}

// fwdConn is one connection to a master (a Hold's target, or a slave
// gateway's master).
type fwdConn struct {
	addr string
	nc   net.Conn
	wmu  sync.Mutex // frames are written whole

	mu      sync.Mutex
	pending map[int32]chan *wire.Result
	err     error       // set once broken; every pending channel is closed then
	stop    func() bool // stops the watch of the broker's context

	// moved: the master answered that it is no longer master (a client
	// connection's link for transactions, gatewaytx.go).
	moved atomic.Bool

	// w writes the gateway's forwarded batches (gatewaywrite.go); nil on
	// other connections. Set before the connection is shared.
	w *linkWriter
}

// fwdResult is the outcome of one forwarded message: the answer of the
// master at addr, or err; sent says the put may have reached it.
type fwdResult struct {
	res  *wire.Result
	err  error
	sent bool
	addr string // the master's MetaQ address ("" when none was known)
}

func newForwarder(b *Broker, target func(context.Context) (string, error), link func(context.Context, string) (net.Conn, error)) *forwarder {
	return &forwarder{b: b, target: target, link: link}
}

// keepsIDs says puts that carry an id can be sent keeping it (a gateway
// link can be opened).
func (f *forwarder) keepsIDs() bool { return f.link != nil }

// closeWhenIdle closes the connections now, or once the last send returns.
func (f *forwarder) closeWhenIdle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idle = true
	if f.inflight == 0 {
		f.closeLocked()
	}
}

func (f *forwarder) closeLocked() {
	for _, c := range []*fwdConn{f.cur, f.curLink} {
		if c != nil {
			c.fail(errors.New("forwarding ended"))
		}
	}
	f.cur, f.curLink = nil, nil
}

// conn returns the connection to the master the target names (a gateway
// link when link is set), dialing it when there is none or the target
// moved.
func (f *forwarder) conn(ctx context.Context, link bool) (*fwdConn, error) {
	addr, err := f.target(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := &f.cur
	if link {
		cur = &f.curLink
	}
	if c := *cur; c != nil {
		c.mu.Lock()
		ok := c.err == nil && c.addr == addr
		c.mu.Unlock()
		if ok {
			return c, nil
		}
		c.fail(errors.New("the master moved from " + c.addr + " to " + addr))
		*cur = nil
	}
	var nc net.Conn
	if link {
		nc, err = f.link(ctx, addr)
	} else {
		d := net.Dialer{Timeout: time.Second}
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial the master %s: %w", addr, err)
	}
	c := &fwdConn{addr: addr, nc: nc, pending: map[int32]chan *wire.Result{}}
	if !f.b.routines.Go(c.readLoop) {
		nc.Close()
		return nil, errors.New("the broker is closing")
	}
	// Closing the broker closes the connection, which ends readLoop.
	stop := context.AfterFunc(f.b.ctx, func() { c.fail(errors.New("the broker is closing")) })
	c.mu.Lock()
	c.stop = stop
	c.mu.Unlock()
	*cur = c
	f.b.log.Info("BROKER: connected to the master to pass held puts on", "addr", addr, "gatewayLink", link)
	return c, nil
}

// send forwards msgs[i] for each i of idx to topic-partition and returns
// their outcomes in idx's order, waiting for answers until waitUntil. When
// one of them carries an id, all go on the gateway link, those with an id
// as syncs that keep it (the caller checked keepsIDs).
func (f *forwarder) send(topic string, partition int, msgs []store.Message, idx []int, waitUntil time.Time) []fwdResult {
	f.mu.Lock()
	f.inflight++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		if f.inflight == 0 && f.idle {
			f.closeLocked()
		}
		f.mu.Unlock()
	}()
	out := make([]fwdResult, len(idx))
	ctx, cancel := context.WithDeadline(f.b.ctx, waitUntil)
	defer cancel()
	link := false
	for _, i := range idx {
		link = link || msgs[i].ID != 0
	}
	c, err := f.conn(ctx, link)
	if err != nil {
		for k := range out {
			out[k].err = err
		}
		return out
	}
	for k := range out {
		out[k].addr = c.addr
	}
	chans := make([]chan *wire.Result, len(idx))
	var frames []byte
	c.mu.Lock()
	broken := c.err
	for k, i := range idx {
		m := &msgs[i]
		op := f.opaque.Add(1)
		ch := make(chan *wire.Result, 1)
		if broken == nil {
			c.pending[op] = ch
		}
		chans[k] = ch
		sum := wire.Checksum(m.Body)
		if m.ChecksumSet {
			sum = int32(m.Checksum)
		}
		if m.ID != 0 {
			// Served on the gateway link as a put that keeps its id.
			s := wire.Sync{Topic: topic, Partition: int32(partition), Flag: m.Flag, MsgID: m.ID, Checksum: sum, Opaque: op, Body: m.Body}
			frames = s.AppendTo(frames)
			continue
		}
		p := wire.Put{Topic: topic, Partition: int32(partition), Flag: m.Flag, Checksum: sum, Opaque: op, Body: m.Body}
		frames = p.AppendTo(frames)
	}
	c.mu.Unlock()
	if broken != nil {
		for k := range out {
			out[k].err = broken
		}
		return out
	}
	c.wmu.Lock()
	c.nc.SetWriteDeadline(waitUntil)
	_, werr := c.nc.Write(frames)
	c.wmu.Unlock()
	if werr != nil {
		c.fail(werr)
	}
	for k, ch := range chans {
		out[k].sent = true
		select {
		case r, ok := <-ch:
			if !ok {
				out[k].err = c.failure()
				continue
			}
			out[k].res = r
		case <-ctx.Done():
			out[k].err = fmt.Errorf("no answer from %s: %w", c.addr, ctx.Err())
		}
	}
	return out
}

// readLoop matches the master's answers to the puts sent.
func (c *fwdConn) readLoop() {
	d := wire.NewDecoder(bufio.NewReader(c.nc))
	for {
		cmd, err := d.Decode()
		if err != nil {
			c.fail(fmt.Errorf("connection to the master %s: %w", c.addr, err))
			return
		}
		var r *wire.Result
		switch x := cmd.(type) {
		case *wire.Result:
			r = x
		case *wire.Value:
			// A get's data (the gateway's outbox reconciliation).
			r = &wire.Result{Code: valueCode, Body: x.Data, Opaque: x.Opaque}
		default:
			continue
		}
		c.mu.Lock()
		ch := c.pending[r.Opaque]
		delete(c.pending, r.Opaque)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// fail breaks the connection: every put awaiting an answer gets err.
func (c *fwdConn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.nc.Close()
	if c.w != nil {
		c.w.close()
	}
	for _, ch := range pending {
		close(ch)
	}
}

func (c *fwdConn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("connection closed")
	}
	return c.err
}
