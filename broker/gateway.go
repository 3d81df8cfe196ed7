package broker

// The write gateway. A broker that refuses client writes because it is a
// slave may instead carry the puts of some topics (forwardPuts, see
// config.Topic.Forwards) to the master, so that producers at a slave site
// write to their own site's broker. Such a put passes the usual checks
// except the write gate and minSyncSites (the master checks those), is
// written at once, in its connection's order, on the one connection this
// broker keeps to the master's MetaQ port (Gateway), and is answered with
// the master's answer:
//
//   - stored: the master's id, the partition and the offset where the
//     record is stored at the master (and, once replicated, here);
//   - refused: the master's answer, code and text as the master gave them
//     (unknown topic, closed partition, full disk, ...). A refusal that says
//     the master moved (503, or 403 from a broker that is now a slave) is
//     sent again to the master ZooKeeper names then, until the put's time
//     (GatewayOptions.MaxWait) is up;
//   - not sent (no master known, the connection could not be opened): sent
//     again until its time is up, then answered 503, not stored;
//   - sent and no answer (the connection broke): 500, whether it is stored
//     is unknown. No forwarded put is answered as stored unless the master
//     said so.
//
// Puts of one client connection to one partition reach the master in the
// order they arrived here: they are written on the reader's goroutine, and
// the master serves one connection's puts to a partition in order. Batches
// that could not be sent (no master known, no connection) wait in one
// queue, oldest first, and every later batch goes behind them until the
// queue is empty, so a connection that opens late does not let later puts
// overtake earlier ones. A put the master refused because it moved, sent
// again (above), may land after puts that arrived later.
//
// A topic with storeAndForward is answered from the site's outbox instead
// and drained to the master later (storeforward.go).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/outbox"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/backoff"
)

// GatewayOptions configure a slave's forwarding of puts to its master.
type GatewayOptions struct {
	// Master returns the master's MetaQ address (host:port). It is asked
	// when there is no connection, and again after the master refused a put
	// in a way that says the master moved. Required.
	Master func(ctx context.Context) (string, error)
	// Dial opens the connection to the master's MetaQ port; nil dials TCP.
	// A deployment passes one that authenticates and compresses.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Holder is the write gate holder (RefuseWrites) whose refusal puts
	// are forwarded under: the one that says this broker is a slave.
	// Required. Puts refused only by other holders (a master's full disk, a
	// fence) are refused as before.
	Holder string
	// MaxWait bounds the time from a put's arrival to its last sending to
	// the master; 0 means DefaultHoldMaxWait (below the 3 s MetaQ's Java
	// producer waits for an answer).
	MaxWait time.Duration
	// Outbox, when not nil, takes the puts of topics with storeAndForward:
	// they are answered once in it and forwarded later (storeforward.go).
	// The gateway drains it while it is in effect; its owner closes it
	// after the broker.
	Outbox *outbox.Outbox
}

// GatewayStats counts what the gateway did with the puts it forwarded.
type GatewayStats struct {
	Forwarded int64 // answered with the master's answer (stored or refused)
	NotSent   int64 // answered 503: never sent, not stored
	Unknown   int64 // answered 500: sent, no answer
	Retried   int64 // sent again after a refusal saying the master moved
	Dials     int64 // connections opened to the master
	// Store and forward (storeforward.go).
	Accepted     int64 // answered accepted-locally: in the outbox
	Refused      int64 // refused by the outbox (a bound, a write failure)
	Drained      int64 // outbox entries confirmed stored at the master
	Deduplicated int64 // outbox entries found at the master, not sent again
}

// Gateway is a slave broker's forwarding of puts to the master (see the top
// of this file). Its methods are safe for concurrent use.
type Gateway struct {
	b    *Broker
	opts GatewayOptions

	mu     sync.Mutex
	cur    *fwdConn
	closed bool
	opaque atomic.Int32
	stats  struct {
		forwarded, notSent, unknown, retried, dials atomic.Int64
		accepted, refused, drained, deduplicated    atomic.Int64
	}

	// Store and forward (storeforward.go): ids fixed at acceptance, the
	// drain goroutine's wake-up, stop and exit, and its last failure.
	ids      idGen
	kick     chan struct{}
	quit     chan struct{}
	drained  chan struct{} // closed when drain returns; nil without an outbox
	drainMu  sync.Mutex
	drainErr string

	// unsent holds the batches not sent yet, oldest first; sendUnsent
	// (running while sending is set) sends them in that order.
	qmu     sync.Mutex
	unsent  []*fwdBatch
	sending bool
}

// SetGateway makes the broker forward the puts of topics with forwardPuts
// on to the master while client writes are refused (it is a slave), and
// returns the Gateway; nil options stop forwarding. Puts being forwarded
// when it is replaced or stopped complete on their connection.
func (b *Broker) SetGateway(o *GatewayOptions) (*Gateway, error) {
	var g *Gateway
	if o != nil {
		if o.Master == nil || o.Holder == "" {
			return nil, errors.New("broker: gateway without a master address or a write gate holder")
		}
		opts := *o
		if opts.MaxWait <= 0 {
			opts.MaxWait = DefaultHoldMaxWait
		}
		if opts.Dial == nil {
			opts.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				d := net.Dialer{Timeout: time.Second}
				return d.DialContext(ctx, "tcp", addr)
			}
		}
		g = &Gateway{b: b, opts: opts, kick: make(chan struct{}, 1), quit: make(chan struct{})}
		g.ids = idGen{brokerID: int64(b.brokerID()), clock: b.opts.Clock}
	}
	if old := b.gateway.Swap(g); old != nil {
		old.close()
	}
	if g != nil {
		b.log.Info("BROKER: forwarding puts of forwarded topics to the master", "maxWait", g.opts.MaxWait, "outbox", g.opts.Outbox != nil)
		if g.opts.Outbox != nil {
			g.drained = make(chan struct{})
			if !b.routines.Go(g.drain) {
				close(g.drained)
			}
		}
	}
	return g, nil
}

// Gateway returns the gateway in effect, or nil.
func (b *Broker) Gateway() *Gateway { return b.gateway.Load() }

// Stats reports what the gateway did so far.
func (g *Gateway) Stats() GatewayStats {
	return GatewayStats{Forwarded: g.stats.forwarded.Load(), NotSent: g.stats.notSent.Load(),
		Unknown: g.stats.unknown.Load(), Retried: g.stats.retried.Load(), Dials: g.stats.dials.Load(),
		Accepted: g.stats.accepted.Load(), Refused: g.stats.refused.Load(), Drained: g.stats.drained.Load(),
		Deduplicated: g.stats.deduplicated.Load()}
}

// forwarding returns the gateway that takes a client put to te, or nil:
// the gateway's holder refuses writes here (a slave), the topic is known
// and forwarded at this site.
func (b *Broker) forwarding(te *topicEntry) *Gateway {
	g := b.gateway.Load()
	if g == nil || !te.ok || !b.gate.refusedBy(g.opts.Holder) {
		return nil
	}
	if !te.tc.Forwards(b.cfg.Load().Site) {
		return nil
	}
	return g
}

// close stops the outbox's drain and drops the connection; puts awaiting
// answers on it are answered unknown.
func (g *Gateway) close() {
	g.mu.Lock()
	already := g.closed
	g.closed = true
	c := g.cur
	g.cur = nil
	g.mu.Unlock()
	if !already {
		close(g.quit)
	}
	if c != nil {
		c.fail(errors.New("forwarding stopped"))
	}
	if g.drained != nil {
		// One drain at a time: a gateway that replaces this one starts
		// its own only once this one stopped sending.
		<-g.drained
	}
}

// conn returns the connection to the master, dialing it when there is none.
func (g *Gateway) conn(ctx context.Context) (*fwdConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("forwarding stopped")
	}
	if c := g.cur; c != nil {
		c.mu.Lock()
		ok := c.err == nil
		c.mu.Unlock()
		if ok {
			return c, nil
		}
		g.cur = nil
	}
	// Dialing under g.mu: puts wait for the one connection rather than
	// each opening its own.
	addr, err := g.opts.Master(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the master: %w", err)
	}
	g.stats.dials.Add(1)
	nc, err := g.opts.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial the master %s: %w", addr, err)
	}
	c := &fwdConn{addr: addr, nc: nc, pending: map[int32]chan *wire.Result{}}
	if !g.b.routines.Go(c.readLoop) {
		nc.Close()
		return nil, ErrClosed
	}
	stop := context.AfterFunc(g.b.ctx, func() { c.fail(errors.New("the broker is closing")) })
	c.mu.Lock()
	c.stop = stop
	c.mu.Unlock()
	g.cur = c
	g.b.log.Info("BROKER: forwarding connection to the master open", "master", addr)
	return c, nil
}

// drop stops sending on c if it is still the current connection (the
// master moved): the next put finds the master again. c is closed once no
// put awaits an answer on it, or after twice MaxWait.
func (g *Gateway) drop(c *fwdConn, why error) {
	g.mu.Lock()
	if g.cur != c {
		g.mu.Unlock()
		return
	}
	g.cur = nil
	g.mu.Unlock()
	until := time.Now().Add(2 * g.opts.MaxWait)
	retire := func() {
		t := time.NewTicker(holdRetryEvery)
		defer t.Stop()
		for time.Now().Before(until) {
			c.mu.Lock()
			idle := c.err != nil || len(c.pending) == 0
			c.mu.Unlock()
			if idle {
				break
			}
			select {
			case <-t.C:
			case <-g.b.ctx.Done():
				c.fail(why)
				return
			}
		}
		c.fail(why)
	}
	if !g.b.routines.Go(retire) {
		c.fail(why)
	}
}

// fwdBatch is one partition's batch of a connection's forwarded puts.
type fwdBatch struct {
	topic     string
	partition int
	msgs      []store.Message // bodies copied: the put route reuses its buffers
	deadline  time.Time
	done      func([]store.Appended, error)
	gone      func() bool
}

// add forwards a validated batch and calls done once with its outcome. The
// put route calls it on the connection's reader, in order: the batch is
// written to the master before it returns (when a connection is there),
// so a connection's batches to a partition reach the master in order.
func (g *Gateway) add(topic string, partition int, msgs []store.Message, gone func() bool, done func([]store.Appended, error)) {
	if g.storesAndForwards(topic) {
		g.accept(topic, partition, msgs, done)
		return
	}
	fb := &fwdBatch{topic: topic, partition: partition, msgs: make([]store.Message, len(msgs)), done: done, gone: gone,
		deadline: time.Now().Add(g.opts.MaxWait)}
	for i, m := range msgs {
		fb.msgs[i] = m
		fb.msgs[i].Body = append([]byte(nil), m.Body...)
	}
	g.qmu.Lock()
	if len(g.unsent) > 0 {
		// Behind the batches still waiting to be sent.
		g.unsent = append(g.unsent, fb)
		g.qmu.Unlock()
		return
	}
	g.qmu.Unlock()
	c, chans, err := g.post(fb, fb.all())
	if err != nil {
		g.queueUnsent(fb, err)
		return
	}
	g.goComplete(fb, c, chans)
}

// all lists every message of fb, for post.
func (fb *fwdBatch) all() []int {
	idx := make([]int, len(fb.msgs))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// goComplete waits for the answers of a sent batch on a goroutine of its own.
func (g *Gateway) goComplete(fb *fwdBatch, c *fwdConn, chans []chan *wire.Result) {
	if !g.b.routines.Go(func() { g.complete(fb, c, chans, nil) }) {
		// Sent, but nobody can wait for the answers: whether they are
		// stored is unknown.
		errs := make(messageErrors, len(fb.msgs))
		for i := range errs {
			errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the put was forwarded to the master " + c.addr +
				" and the broker closed before its answer: whether it is stored there is unknown"}
		}
		g.stats.unknown.Add(int64(len(fb.msgs)))
		fb.done(make([]store.Appended, len(fb.msgs)), errs)
	}
}

// queueUnsent puts fb, which could not be sent (why), at the end of the
// unsent queue and starts sendUnsent if it does not run.
func (g *Gateway) queueUnsent(fb *fwdBatch, why error) {
	g.qmu.Lock()
	g.unsent = append(g.unsent, fb)
	if g.sending {
		g.qmu.Unlock()
		return
	}
	g.sending = true
	g.qmu.Unlock()
	if !g.b.routines.Go(func() { g.sendUnsent(why) }) {
		g.failUnsent("the broker is closing")
	}
}

// sendUnsent sends the unsent batches in order, each once a connection to
// the master is there, and answers 503 those whose time ran out first.
// It returns when the queue is empty.
func (g *Gateway) sendUnsent(last error) {
	wait := backoff.Backoff{Min: holdRetryEvery, Max: 20 * holdRetryEvery}
	for {
		g.qmu.Lock()
		if len(g.unsent) == 0 {
			g.sending = false
			g.qmu.Unlock()
			return
		}
		fb := g.unsent[0]
		g.qmu.Unlock()
		if why := g.expired(fb); why != "" {
			g.popUnsent()
			g.answerNotSent(fb, fmt.Sprintf("%s (%v)", why, last))
			continue
		}
		c, chans, err := g.post(fb, fb.all())
		if err != nil {
			last = err
			select {
			case <-time.After(min(wait.Next(), time.Until(fb.deadline))):
			case <-g.b.ctx.Done():
			}
			continue
		}
		wait.Reset()
		// Off the queue only once written: a batch arriving meanwhile
		// goes behind it.
		g.popUnsent()
		g.goComplete(fb, c, chans)
	}
}

// expired says why fb will not be sent any more, or "".
func (g *Gateway) expired(fb *fwdBatch) string {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	switch {
	case g.b.ctx.Err() != nil:
		return "the broker is closing"
	case closed:
		return "forwarding stopped"
	case fb.gone():
		return "its client closed the connection"
	case !time.Now().Before(fb.deadline):
		return fmt.Sprintf("no connection to the master within %v", g.opts.MaxWait)
	}
	return ""
}

func (g *Gateway) popUnsent() {
	g.qmu.Lock()
	g.unsent[0] = nil
	g.unsent = g.unsent[1:]
	g.qmu.Unlock()
}

// failUnsent answers every unsent batch 503 (why).
func (g *Gateway) failUnsent(why string) {
	g.qmu.Lock()
	q := g.unsent
	g.unsent, g.sending = nil, false
	g.qmu.Unlock()
	for _, fb := range q {
		g.answerNotSent(fb, why)
	}
}

func (g *Gateway) answerNotSent(fb *fwdBatch, why string) {
	errs := make(messageErrors, len(fb.msgs))
	for i := range errs {
		errs[i] = g.notSent(why)
	}
	g.stats.notSent.Add(int64(len(fb.msgs)))
	fb.done(make([]store.Appended, len(fb.msgs)), errs)
}

// post writes fb.msgs[i] for each i of idx to the master and returns the
// channels their answers come on (nil and the error when not sent).
func (g *Gateway) post(fb *fwdBatch, idx []int) (*fwdConn, []chan *wire.Result, error) {
	ctx, cancel := context.WithDeadline(g.b.ctx, fb.deadline)
	defer cancel()
	c, err := g.conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	chans := make([]chan *wire.Result, len(idx))
	frames := make([]byte, 0, 64*len(idx))
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, nil, err
	}
	for k, i := range idx {
		m := &fb.msgs[i]
		op := g.opaque.Add(1)
		ch := make(chan *wire.Result, 1)
		c.pending[op] = ch
		chans[k] = ch
		sum := wire.Checksum(m.Body)
		if m.ChecksumSet {
			sum = int32(m.Checksum)
		}
		if m.ID != 0 {
			// An id fixed before (a gateway link's put forwarded again):
			// kept, as a sync on the gateway link keeps it (ServeConn).
			s := wire.Sync{Topic: fb.topic, Partition: int32(fb.partition), Flag: m.Flag, MsgID: m.ID, Checksum: sum, Opaque: op, Body: m.Body}
			frames = s.AppendTo(frames)
			continue
		}
		p := wire.Put{Topic: fb.topic, Partition: int32(fb.partition), Flag: m.Flag, Checksum: sum, Opaque: op, Body: m.Body}
		frames = p.AppendTo(frames)
	}
	c.mu.Unlock()
	c.wmu.Lock()
	c.nc.SetWriteDeadline(fb.deadline)
	_, werr := c.nc.Write(frames)
	c.wmu.Unlock()
	if werr != nil {
		// Part of it may have gone: the answers say, or the failure
		// makes them unknown.
		c.fail(fmt.Errorf("write to the master %s: %w", c.addr, werr))
	}
	return c, chans, nil
}

// complete waits for the answers of fb's puts, sends again those the
// master refused because it moved or that could not be sent, and answers
// the batch once.
func (g *Gateway) complete(fb *fwdBatch, c *fwdConn, chans []chan *wire.Result, sendErr error) {
	out := make([]store.Appended, len(fb.msgs))
	errs := make(messageErrors, len(fb.msgs))
	failed := 0
	left := fb.all()
	for {
		var retry []int
		var last error
		if sendErr != nil {
			retry, last = left, sendErr
		} else {
			ctx, cancel := context.WithDeadline(g.b.ctx, fb.deadline.Add(g.opts.MaxWait))
			for k, i := range left {
				var r *wire.Result
				select {
				case res, ok := <-chans[k]:
					if ok {
						r = res
					}
				case <-ctx.Done():
				}
				switch {
				case r == nil:
					errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the put was forwarded to the master " + c.addr +
						" and no answer came (" + c.failure().Error() + "): whether it is stored there is unknown"}
					failed++
					g.stats.unknown.Add(1)
				case r.Code == wire.StatusOK:
					a, err := parsePutAnswer(r.Body)
					if err != nil {
						errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the master " + c.addr + " answered " + err.Error() +
							": whether the put is stored there is unknown"}
						failed++
						g.stats.unknown.Add(1)
						continue
					}
					out[i] = a
					g.stats.forwarded.Add(1)
				case time.Now().Before(fb.deadline) && g.masterMoved(r, c.addr):
					retry = append(retry, i)
					last = &heldError{code: r.Code, text: string(r.Body), raw: true}
				default:
					errs[i] = &heldError{code: r.Code, text: string(r.Body), raw: true}
					failed++
					g.stats.forwarded.Add(1)
				}
			}
			cancel()
			if len(retry) > 0 {
				// Ask ZooKeeper again: the master may have moved.
				g.drop(c, errors.New("the master refused a put: it moved"))
			}
		}
		if len(retry) == 0 {
			break
		}
		if time.Now().After(fb.deadline) || g.b.ctx.Err() != nil || fb.gone() {
			why := fmt.Sprintf("no master took it within %v (%v)", g.opts.MaxWait, last)
			switch {
			case g.b.ctx.Err() != nil:
				why = "the broker is closing"
			case fb.gone():
				why = "its client closed the connection"
			}
			var he *heldError
			for _, i := range retry {
				if errors.As(last, &he) && he.raw {
					errs[i] = he // the master's last refusal, as it gave it
				} else {
					errs[i] = g.notSent(why)
				}
				failed++
			}
			g.stats.notSent.Add(int64(len(retry)))
			break
		}
		g.stats.retried.Add(int64(len(retry)))
		select {
		case <-time.After(holdRetryEvery):
		case <-g.b.ctx.Done():
		}
		left = retry
		c, chans, sendErr = g.post(fb, left)
	}
	if failed == 0 {
		fb.done(out, nil)
		return
	}
	fb.done(out, errs)
}

// masterMoved says the refusal r of the broker at addr means the put
// should be sent again, to the master found then: 503 (retriable by
// contract: a master handing over, its sites not connected yet), or 403
// from a broker that is a slave now, or while the master is registered at
// another address than addr.
func (g *Gateway) masterMoved(r *wire.Result, addr string) bool {
	switch r.Code {
	case wire.StatusServiceUnavailable:
		return true
	case wire.StatusForbidden:
		if strings.Contains(string(r.Body), "slave") || strings.Contains(string(r.Body), "no longer master") {
			return true
		}
		ctx, cancel := context.WithTimeout(g.b.ctx, time.Second)
		defer cancel()
		now, err := g.opts.Master(ctx)
		return err == nil && now != addr
	}
	return false
}

func (g *Gateway) notSent(why string) *heldError {
	return &heldError{code: wire.StatusServiceUnavailable, text: "this broker forwards puts to the master; the put was not sent to it and not stored (" + why + "); retry"}
}
