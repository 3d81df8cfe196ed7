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
//     again until its time is up, then answered 503, not stored. The
//     connection is dialed with no gateway lock held, one dial at a time;
//     a put waits for it at most until its time is up, whatever the
//     dial's own bound (a frozen master's handshake);
//   - sent and no answer (the connection broke, or stayed open and silent
//     past the put's time and MaxWait more): 500, whether it is stored is
//     unknown. A silent connection is left (a paused master keeps it
//     open), so that the next put finds the master again; and it is left
//     at once when the site learns of another master (FollowMaster: a
//     promotion elsewhere). No forwarded put is answered as stored unless
//     the master said so.
//
// Puts of one client connection to one partition reach the master in the
// order they arrived here, also across a change of master: every batch is
// queued on the connection in arrival order (under Gateway.qmu), at once on
// the reader's goroutine when nothing waits, the connection's writer writes
// them in that order (gatewaywrite.go), and the master serves one connection's puts
// to a partition in order. Batches that could not be sent (no master known,
// no connection) and batches the master refused because it moved wait in
// one queue in arrival order, and every later batch goes behind them; after
// a refusal that says the master moved, nothing is sent to the next master
// until the old connection's answers are in (at most MaxWait/4), so a batch
// sent again lands before later ones. Only a put whose outcome is unknown
// (500) when that bound passes can be overtaken.
//
// A topic with storeAndForward is answered from the site's outbox instead
// and drained to the master later (storeforward.go). Clients' transactions
// are carried to the master too, each client connection's on a link of its
// own (gatewaytx.go).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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
	// LinkDial, when not nil, opens the gateway's own connection (the
	// forwarded puts and the outbox's drain) instead of Dial: a gateway
	// link that names this gateway with a new epoch, so that the master
	// supersedes the links it opened before and never applies what
	// reaches it late on one of them (georeplicator.GatewayDialAs).
	// Transactions' links (gatewaytx.go) are opened with Dial.
	LinkDial func(ctx context.Context, addr string) (net.Conn, error)
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
	// DrainWait bounds how long the outbox's drain waits for the master's
	// answers (and for a write to the link) before it gives up on the
	// connection and opens another; 0 means 30 s.
	DrainWait time.Duration

	// MaxInFlightBytes bounds the bodies of forwarded puts awaiting the
	// master's answers, all producer connections together ([site]
	// forwardMaxInFlightBytes); 0 means DefaultForwardMaxInFlightBytes.
	// A batch that finds no room waits for it until its MaxWait is up,
	// then is answered 503, not sent, naming the bound.
	MaxInFlightBytes int64

	// drainBatch bounds the outbox entries sent per partition per drain
	// round; 0 means drainBatch (tests make it small).
	drainBatch int
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
	// Transactions (gatewaytx.go).
	TxForwarded int64 // transaction commands and puts answered with the master's answer
	TxLinks     int64 // gateway links opened for client connections' transactions
	// The gateway-wide bound (GatewayOptions.MaxInFlightBytes).
	InFlightBytes    int64 // forwarded bodies awaiting the master's answers now
	MaxInFlightBytes int64 // the bound on InFlightBytes
	Full             int64 // puts answered 503: no room under the bound in time
}

// Gateway is a slave broker's forwarding of puts to the master (see the top
// of this file). Its methods are safe for concurrent use.
type Gateway struct {
	b    *Broker
	opts GatewayOptions

	mu     sync.Mutex
	cur    *fwdConn
	closed bool
	// dialing is the dial in progress (conn), run with no gateway lock
	// held; followed is the master FollowMaster was last told, follows
	// counts its changes.
	dialing  *gwDial
	followed string
	follows  uint64
	opaque   atomic.Int32
	stats    struct {
		forwarded, notSent, unknown, retried, dials atomic.Int64
		accepted, refused, drained, deduplicated    atomic.Int64
		txForwarded, txLinks                        atomic.Int64
		full                                        atomic.Int64
	}
	inflight *inFlightBytes // forwarded bytes awaiting answers, gateway-wide

	// Store and forward (storeforward.go): ids fixed at acceptance, the
	// drain goroutine's wake-up, stop and exit, and its last failure.
	ids      idGen
	kick     chan struct{}
	quit     chan struct{}
	drained  chan struct{} // closed when drain returns; nil without an outbox
	drainMu  sync.Mutex
	drainErr string

	// Every send to the master happens under qmu, in arrival order:
	// unsent holds the batches waiting to be sent (not sent yet, or sent
	// again after the master moved), oldest first; sendUnsent (running
	// while sending is set) sends them once no connection is retiring (a
	// dropped connection some of whose puts await their answers).
	qmu      sync.Mutex
	seq      uint64
	unsent   []*fwdBatch
	sending  bool
	retiring int
}

// framesPool holds the buffers batches' frames are built in: a batch's
// frames are built before it takes g.qmu (checksums and encoding are most
// of a send's work besides the write) and the buffer is reused once
// written.
var framesPool = sync.Pool{New: func() any { return new([]byte) }}

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
		if opts.DrainWait <= 0 {
			opts.DrainWait = drainWait
		}
		if opts.MaxInFlightBytes <= 0 {
			opts.MaxInFlightBytes = DefaultForwardMaxInFlightBytes
		}
		if opts.drainBatch <= 0 {
			opts.drainBatch = drainBatch
		}
		if opts.Dial == nil {
			opts.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				d := net.Dialer{Timeout: time.Second}
				return d.DialContext(ctx, "tcp", addr)
			}
		}
		g = &Gateway{b: b, opts: opts, kick: make(chan struct{}, 1), quit: make(chan struct{}), inflight: newInFlightBytes(opts.MaxInFlightBytes)}
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
	used, bound := g.inflight.load()
	return GatewayStats{Forwarded: g.stats.forwarded.Load(), NotSent: g.stats.notSent.Load(),
		Unknown: g.stats.unknown.Load(), Retried: g.stats.retried.Load(), Dials: g.stats.dials.Load(),
		Accepted: g.stats.accepted.Load(), Refused: g.stats.refused.Load(), Drained: g.stats.drained.Load(),
		Deduplicated: g.stats.deduplicated.Load(), TxForwarded: g.stats.txForwarded.Load(), TxLinks: g.stats.txLinks.Load(),
		InFlightBytes: used, MaxInFlightBytes: bound, Full: g.stats.full.Load()}
}

// SetMaxInFlightBytes changes the gateway-wide bound on forwarded bodies
// awaiting the master's answers (GatewayOptions.MaxInFlightBytes; 0 or
// less means DefaultForwardMaxInFlightBytes) without a restart: a reload
// of [site] forwardMaxInFlightBytes.
func (g *Gateway) SetMaxInFlightBytes(n int64) {
	if n <= 0 {
		n = DefaultForwardMaxInFlightBytes
	}
	g.inflight.setMax(n)
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
	g.giveUpDialLocked()
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

// current returns the connection to the master when there is one that
// has not failed, or nil (conn then finds the master and dials).
func (g *Gateway) current() *fwdConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.cur
	if g.closed || c == nil {
		return nil
	}
	c.mu.Lock()
	ok := c.err == nil
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c
}

// errNoConn is post's error when there is no connection to the master:
// the batch waits in the unsent queue while sendUnsent dials (conn) with
// no gateway lock held.
var errNoConn = errors.New("no connection to the master yet")

// gwDial is the gateway's one dial in progress (Gateway.dialing), run on
// a goroutine of its own with no gateway lock held, so that neither the
// puts queued behind it nor FollowMaster wait on a master that accepts TCP
// and never answers the handshake (a paused process).
type gwDial struct {
	addr   string
	ctx    context.Context // canceled when given up, or when the dial is over
	cancel context.CancelFunc
	left   chan struct{} // closed when given up (the master moved, forwarding stopped)
	done   chan struct{} // closed when the dial returned; err is set then
	err    error
}

// givenUp says whether the dial was given up.
func (d *gwDial) givenUp() bool {
	select {
	case <-d.left:
		return true
	default:
		return false
	}
}

// giveUpDialLocked gives up the dial in progress, if any: its waiters
// look for the master again at once, and a connection it opens later is
// closed. The caller holds g.mu.
func (g *Gateway) giveUpDialLocked() *gwDial {
	d := g.dialing
	if d == nil {
		return nil
	}
	g.dialing = nil
	close(d.left)
	d.cancel()
	return d
}

// curLocked returns g.cur when it has not failed, else nil (and forgets a
// failed one). The caller holds g.mu.
func (g *Gateway) curLocked() *fwdConn {
	c := g.cur
	if c == nil {
		return nil
	}
	c.mu.Lock()
	ok := c.err == nil
	c.mu.Unlock()
	if !ok {
		g.cur = nil
		return nil
	}
	return c
}

// conn returns the connection to the master, dialing it when there is
// none, until ctx ends. One dial runs at a time, on its own goroutine and
// with no gateway lock held (others wait for it, rather than each opening
// a connection of its own); a caller stops waiting when ctx ends, whether
// or not the dial honors its context (a handshake with a frozen master).
func (g *Gateway) conn(ctx context.Context) (*fwdConn, error) {
	for {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return nil, errors.New("forwarding stopped")
		}
		if c := g.curLocked(); c != nil {
			g.mu.Unlock()
			return c, nil
		}
		d := g.dialing
		follows := g.follows
		g.mu.Unlock()
		if d == nil {
			addr, err := g.opts.Master(ctx)
			if err != nil {
				return nil, fmt.Errorf("find the master: %w", err)
			}
			if d, err = g.startDial(addr, follows); err != nil {
				return nil, err
			}
			if d == nil {
				continue // another dial, a connection, or another master named meanwhile
			}
		}
		select {
		case <-d.done:
			if d.err != nil && !d.givenUp() {
				return nil, d.err
			}
		case <-d.left:
		case <-ctx.Done():
			return nil, fmt.Errorf("dial the master %s: no connection within the time (%w)", d.addr, context.Cause(ctx))
		}
	}
}

// startDial starts the dial of the master at addr, which Master gave
// after follows FollowMaster changes, unless a dial or a connection is
// there already or FollowMaster named another master since (nil, nil: the
// caller looks again).
func (g *Gateway) startDial(addr string, follows uint64) (*gwDial, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.dialing != nil || g.curLocked() != nil || (g.follows != follows && g.followed != addr) {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(g.b.ctx)
	d := &gwDial{addr: addr, ctx: ctx, cancel: cancel, left: make(chan struct{}), done: make(chan struct{})}
	if !g.b.routines.Go(func() { g.runDial(d) }) {
		cancel()
		return nil, ErrClosed
	}
	g.dialing = d
	g.stats.dials.Add(1)
	return d, nil
}

// runDial dials d.addr and, unless the dial was given up meanwhile, makes
// the connection the gateway's.
func (g *Gateway) runDial(d *gwDial) {
	defer close(d.done)
	defer d.cancel()
	dial := g.opts.Dial
	if g.opts.LinkDial != nil {
		dial = g.opts.LinkDial
	}
	nc, err := dial(d.ctx, d.addr)
	g.mu.Lock()
	if g.dialing != d {
		// Given up: the master moved while the dial hung, or
		// forwarding stopped.
		g.mu.Unlock()
		if nc != nil {
			nc.Close()
		}
		d.err = fmt.Errorf("dial the master %s: given up (the master moved, or forwarding stopped)", d.addr)
		return
	}
	g.dialing = nil
	if err != nil {
		g.mu.Unlock()
		d.err = fmt.Errorf("dial the master %s: %w", d.addr, err)
		return
	}
	c := &fwdConn{addr: d.addr, nc: nc, pending: map[int32]chan *wire.Result{}, w: newLinkWriter()}
	if !g.b.routines.Go(c.readLoop) {
		g.mu.Unlock()
		nc.Close()
		d.err = ErrClosed
		return
	}
	if !g.b.routines.Go(func() { c.w.loop(c) }) {
		g.mu.Unlock()
		c.fail(ErrClosed)
		d.err = ErrClosed
		return
	}
	stop := context.AfterFunc(g.b.ctx, func() { c.fail(errors.New("the broker is closing")) })
	c.mu.Lock()
	c.stop = stop
	c.mu.Unlock()
	g.cur = c
	g.mu.Unlock()
	g.b.log.Info("BROKER: forwarding connection to the master open", "master", d.addr)
}

// drop stops sending on c if it is still the current connection (the
// master moved): the next put finds the master again. c is closed once no
// put awaits an answer on it, or after twice MaxWait; until then (at most a
// quarter of MaxWait) it counts as retiring, and nothing is sent on another
// connection (sendUnsent waits), so that a put c's master refuses and that
// is sent again cannot land behind later puts. The caller holds g.qmu.
func (g *Gateway) drop(c *fwdConn, why error) {
	g.mu.Lock()
	if g.cur != c {
		g.mu.Unlock()
		return
	}
	g.cur = nil
	g.mu.Unlock()
	g.retiring++
	// Sends wait for c's answers at most a quarter of MaxWait, so that a
	// master that stopped answering does not make every later put wait
	// out its time; c itself stays open for its answers up to 2 MaxWait.
	holdSends := time.Now().Add(g.opts.MaxWait / 4)
	until := time.Now().Add(2 * g.opts.MaxWait)
	retire := func() {
		var once sync.Once
		released := func() {
			once.Do(func() {
				g.qmu.Lock()
				g.retiring--
				g.qmu.Unlock()
			})
		}
		defer released()
		t := time.NewTicker(holdRetryEvery)
		defer t.Stop()
		for time.Now().Before(until) {
			c.mu.Lock()
			idle := c.err != nil || len(c.pending) == 0
			c.mu.Unlock()
			if idle {
				break
			}
			if !time.Now().Before(holdSends) {
				released()
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
		g.retiring--
		c.fail(why)
	}
}

// FollowMaster tells the gateway the master's MetaQ address (host:port) as
// its site sees it now (the bundle watches ids/<brokerId>/master): a
// connection to another address is dropped at once, as after a refusal
// that says the master moved, so that the next puts go to the master found
// then instead of waiting on a paused old master until their time and
// MaxWait are up. Puts already sent on the dropped connection keep their
// rules (answered with what comes back within their time, else 500,
// outcome unknown); none is sent twice. A dial to another address in
// progress is given up at once (a frozen old master accepts TCP and never
// answers the handshake): the puts waiting for it ask for the master
// again, and a connection it opens later is closed. An empty address, or
// the address of the connection in use, changes nothing.
func (g *Gateway) FollowMaster(addr string) {
	if addr == "" {
		return
	}
	g.mu.Lock()
	if g.followed != addr {
		g.followed = addr
		g.follows++
	}
	// A dial to another address is given up at once, with no lock of the
	// puts' (g.qmu) needed: it may hang on a frozen old master's
	// handshake while the puts wait for it.
	var gaveUp *gwDial
	if d := g.dialing; d != nil && d.addr != addr {
		gaveUp = g.giveUpDialLocked()
	}
	c := g.cur
	g.mu.Unlock()
	if gaveUp != nil {
		g.b.log.Info("BROKER: the master moved; giving up the dial to the old one", "old", gaveUp.addr, "master", addr)
	}
	if c == nil || c.addr == addr {
		return
	}
	g.qmu.Lock()
	defer g.qmu.Unlock()
	g.b.log.Info("BROKER: the master moved; leaving the forwarding connection to the old one", "old", c.addr, "master", addr)
	g.drop(c, fmt.Errorf("the master moved from %s to %s", c.addr, addr))
}

// dropMoved is drop for a caller that does not hold g.qmu (the outbox's
// drain): the master moved, c is no longer used.
func (g *Gateway) dropMoved(c *fwdConn, why error) {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	g.drop(c, why)
}

// fwdBatch is one partition's batch of a connection's forwarded puts, with
// its outcome so far: a batch sent again keeps what the first sending
// settled.
type fwdBatch struct {
	seq       uint64 // arrival order at the gateway
	topic     string
	partition int
	msgs      []store.Message // bodies copied: the put route reuses its buffers
	deadline  time.Time
	done      func([]store.Appended, error)
	gone      func() bool

	left   []int               // the messages to send (next)
	frames *[]byte             // left's frames, built by build; nil once written
	ops    []int32             // the opaques in frames, one per message of left
	chans  []chan *wire.Result // where their answers are to come
	out    []store.Appended
	errs   messageErrors
	failed int
	last   error // why the messages in left were not stored yet
}

// add forwards a validated batch and calls done once with its outcome. The
// put route calls it on the connection's reader, in order. Every batch is
// queued for the master under g.qmu, in the order of the unsent queue:
// when the queue is empty and no connection is retiring, at once, on the
// reader (so a connection's batches to a partition reach the master in
// order); otherwise behind the batches waiting there.
func (g *Gateway) add(topic string, partition int, msgs []store.Message, gone func() bool, done func([]store.Appended, error)) {
	if g.storesAndForwards(topic) {
		g.accept(topic, partition, msgs, done)
		return
	}
	deadline := time.Now().Add(g.opts.MaxWait)
	size := 0
	for _, m := range msgs {
		size += len(m.Body)
	}
	// The gateway-wide bound: the reader waits for room (its connection's
	// next requests with it), at most until the batch's time is up.
	if !g.inflight.acquire(int64(size), deadline, gone, g.b.ctx.Done()) {
		why := "its client closed the connection, or the broker is closing, while it waited for room"
		if !gone() && g.b.ctx.Err() == nil {
			why = g.inflight.full(int64(size))
			g.stats.full.Add(int64(len(msgs)))
		}
		errs := make(messageErrors, len(msgs))
		for i := range errs {
			errs[i] = g.notSent(why)
		}
		done(make([]store.Appended, len(msgs)), errs)
		return
	}
	answer := done
	done = func(as []store.Appended, err error) {
		g.inflight.release(int64(size))
		answer(as, err)
	}
	fb := &fwdBatch{topic: topic, partition: partition, msgs: make([]store.Message, len(msgs)), done: done, gone: gone,
		deadline: deadline, out: make([]store.Appended, len(msgs)), errs: make(messageErrors, len(msgs))}
	// One copy of all the bodies, not one allocation per put.
	slab := make([]byte, 0, size)
	for i, m := range msgs {
		fb.msgs[i] = m
		at := len(slab)
		slab = append(slab, m.Body...)
		fb.msgs[i].Body = slab[at:len(slab):len(slab)]
	}
	fb.left = make([]int, len(msgs))
	for i := range fb.left {
		fb.left[i] = i
	}
	g.build(fb)
	g.qmu.Lock()
	g.seq++
	fb.seq = g.seq
	if len(g.unsent) == 0 && g.retiring == 0 {
		c, chans, err := g.post(fb)
		if err == nil {
			g.qmu.Unlock()
			g.goComplete(fb, c, chans)
			return
		}
		fb.last = err
	}
	closing := g.queueLocked(fb)
	g.qmu.Unlock()
	g.answerClosing(closing)
}

// goComplete waits for the answers of a sent batch on a goroutine of its own.
func (g *Gateway) goComplete(fb *fwdBatch, c *fwdConn, chans []chan *wire.Result) {
	if !g.b.routines.Go(func() { g.complete(fb, c, chans) }) {
		// Sent, but nobody can wait for the answers: whether they are
		// stored is unknown.
		for _, i := range fb.left {
			fb.errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the put was forwarded to the master " + c.addr +
				" and the broker closed before its answer: whether it is stored there is unknown"}
			fb.failed++
		}
		g.stats.unknown.Add(int64(len(fb.left)))
		fb.finish()
	}
}

// queueLocked puts fb into the unsent queue in arrival order (a batch sent
// again goes before those that arrived after it) and starts sendUnsent if
// it does not run. The caller holds g.qmu, and answers the batches it
// returns (the broker is closing) once it released it.
func (g *Gateway) queueLocked(fb *fwdBatch) (closing []*fwdBatch) {
	i := len(g.unsent)
	for i > 0 && g.unsent[i-1].seq > fb.seq {
		i--
	}
	g.unsent = slices.Insert(g.unsent, i, fb)
	if g.sending {
		return nil
	}
	g.sending = true
	if !g.b.routines.Go(g.sendUnsent) {
		closing = g.unsent
		g.unsent, g.sending = nil, false
	}
	return closing
}

// answerClosing answers batches queueLocked could not queue.
func (g *Gateway) answerClosing(fbs []*fwdBatch) {
	for _, fb := range fbs {
		g.answerNotSent(fb, "the broker is closing")
	}
}

// sendUnsent sends the unsent batches in order, each once a connection to
// the master is there and no connection is retiring, and answers 503 those
// whose time ran out first. It returns when the queue is empty.
func (g *Gateway) sendUnsent() {
	wait := backoff.Backoff{Min: holdRetryEvery, Max: 20 * holdRetryEvery}
	for {
		g.qmu.Lock()
		if len(g.unsent) == 0 {
			g.sending = false
			g.qmu.Unlock()
			return
		}
		fb := g.unsent[0]
		if why := g.expired(fb); why != "" {
			g.popLocked()
			g.qmu.Unlock()
			g.answerNotSent(fb, why)
			continue
		}
		var err error
		if g.retiring == 0 {
			var c *fwdConn
			var chans []chan *wire.Result
			if c, chans, err = g.post(fb); err == nil {
				wait.Reset()
				g.popLocked()
				g.qmu.Unlock()
				g.goComplete(fb, c, chans)
				continue
			}
			fb.last = err
		}
		g.qmu.Unlock()
		if errors.Is(err, errNoConn) {
			// Dialed with no gateway lock held: later batches queue
			// behind fb meanwhile, and FollowMaster can give the dial up.
			// The wait ends with fb's time.
			ctx, cancel := context.WithDeadline(g.b.ctx, fb.deadline)
			_, err = g.conn(ctx)
			cancel()
			if err == nil {
				continue
			}
			fb.last = err
		}
		pause := holdRetryEvery // a retiring connection: its answers come soon
		if err != nil {
			pause = wait.Next()
		}
		select {
		case <-time.After(min(pause, max(time.Until(fb.deadline), 0))):
		case <-g.b.ctx.Done():
		}
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
		return fmt.Sprintf("no master took it within %v (%v)", g.opts.MaxWait, fb.last)
	}
	return ""
}

func (g *Gateway) popLocked() {
	g.unsent[0] = nil
	g.unsent = g.unsent[1:]
}

// answerNotSent answers the messages of fb still to send 503 (why), or
// with the master's last refusal when that is why they were not stored,
// and calls done.
func (g *Gateway) answerNotSent(fb *fwdBatch, why string) {
	var he *heldError
	for _, i := range fb.left {
		if errors.As(fb.last, &he) && he.raw {
			fb.errs[i] = he // the master's last refusal, as it gave it
		} else {
			fb.errs[i] = g.notSent(why)
		}
		fb.failed++
	}
	g.stats.notSent.Add(int64(len(fb.left)))
	fb.finish()
}

// finish answers the batch once.
func (fb *fwdBatch) finish() {
	if fb.failed == 0 {
		fb.done(fb.out, nil)
		return
	}
	fb.done(fb.out, fb.errs)
}

// build encodes fb.left's frames (with opaques of their own) into
// fb.frames, without any lock held: only the write of a batch needs
// g.qmu's order.
func (g *Gateway) build(fb *fwdBatch) {
	size := 0
	for _, i := range fb.left {
		size += frameOverhead + len(fb.topic) + len(fb.msgs[i].Body)
	}
	buf := framesPool.Get().(*[]byte)
	frames := (*buf)[:0]
	if cap(frames) < size || cap(frames) > max(4*size, 1<<20) {
		// Sized for this batch: growing while appending cleared and
		// copied it again and again (log lines are ~200 bytes, not 64).
		frames = make([]byte, 0, size)
	}
	fb.ops = slices.Grow(fb.ops[:0], len(fb.left))[:len(fb.left)]
	fb.chans = make([]chan *wire.Result, len(fb.left))
	for k, i := range fb.left {
		m := &fb.msgs[i]
		op := g.opaque.Add(1)
		fb.ops[k] = op
		fb.chans[k] = make(chan *wire.Result, 1)
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
	*buf = frames
	fb.frames = buf
}

// post queues fb's frames (build) on the connection to the master, whose
// writer sends them in the order queued, and returns the channels their
// answers come on (nil and the error when not sent; the frames are then
// kept for the next try). The caller holds g.qmu: sends happen in the
// queue's order.
func (g *Gateway) post(fb *fwdBatch) (*fwdConn, []chan *wire.Result, error) {
	c := g.current()
	if c == nil {
		// Not dialed here: a dial under g.qmu held every later put and
		// FollowMaster for as long as a frozen master's handshake hung.
		return nil, nil, errNoConn
	}
	chans := fb.chans
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, nil, err
	}
	for k, op := range fb.ops {
		c.pending[op] = chans[k]
	}
	c.mu.Unlock()
	// Queued in the order of sends and written by c's writer: a write
	// that fails, or a connection that fails first, answers them unknown
	// (part of them may have gone).
	c.w.queue(*fb.frames, fb.deadline)
	framesPool.Put(fb.frames)
	fb.frames = nil
	return c, chans, nil
}

// complete waits for the answers of fb's puts sent on c, settles them, and
// queues again those the master refused because it moved (they go to the
// master found then, before every batch that arrived after fb); once
// nothing is left to send it answers the batch.
func (g *Gateway) complete(fb *fwdBatch, c *fwdConn, chans []chan *wire.Result) {
	var retry []int
	wait := time.Until(fb.deadline.Add(g.opts.MaxWait))
	// A timer, not a context under the broker's: a context per batch
	// locked the broker context's mutex twice (as its child, and at its
	// cancel), which every producer connection's batches shared.
	timer := time.NewTimer(wait)
	defer timer.Stop()
	over := false   // the wait is over: only answers already in are taken
	silent := false // the master kept the connection open and did not answer in time
	for k, i := range fb.left {
		// r stays nil without an answer: a closed channel gives nil too.
		var r *wire.Result
		if over {
			select {
			case r = <-chans[k]:
			default:
			}
		} else {
			select {
			case r = <-chans[k]:
			case <-timer.C:
				over, silent = true, g.b.ctx.Err() == nil
			case <-g.b.ctx.Done():
				over = true
			}
		}
		switch {
		case r == nil:
			why := c.failure().Error()
			if silent {
				why = fmt.Sprintf("none within %v on an open connection", wait.Round(time.Millisecond))
			}
			fb.errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the put was forwarded to the master " + c.addr +
				" and no answer came (" + why + "): whether it is stored there is unknown"}
			fb.failed++
			g.stats.unknown.Add(1)
		case r.Code == wire.StatusOK:
			a, err := parsePutAnswer(r.Body)
			if err != nil {
				fb.errs[i] = &heldError{code: wire.StatusInternalServerError, text: "the master " + c.addr + " answered " + err.Error() +
					": whether the put is stored there is unknown"}
				fb.failed++
				g.stats.unknown.Add(1)
				continue
			}
			fb.out[i] = a
			g.stats.forwarded.Add(1)
		case time.Now().Before(fb.deadline) && g.masterMoved(r, c.addr):
			retry = append(retry, i)
			fb.last = &heldError{code: r.Code, text: string(r.Body), raw: true}
		default:
			fb.errs[i] = &heldError{code: r.Code, text: string(r.Body), raw: true}
			fb.failed++
			g.stats.forwarded.Add(1)
		}
	}
	if silent {
		// A master that stopped answering (a paused process: its kernel
		// keeps the connection open) would get every later put too and
		// never fail the connection; leave it, so that the next put asks
		// for the master again (another site may have been promoted).
		g.qmu.Lock()
		g.drop(c, fmt.Errorf("the master %s did not answer a forwarded put within %v", c.addr, wait.Round(time.Millisecond)))
		g.qmu.Unlock()
	}
	if len(retry) == 0 {
		fb.finish()
		return
	}
	g.stats.retried.Add(int64(len(retry)))
	fb.left = retry
	g.build(fb)
	g.qmu.Lock()
	// Ask ZooKeeper again: the master may have moved. Queued before the
	// connection is dropped, so no later batch is sent in between.
	closing := g.queueLocked(fb)
	g.drop(c, errors.New("the master refused a put: it moved"))
	g.qmu.Unlock()
	g.answerClosing(closing)
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

// frameOverhead bounds a put's or sync's frame beside its topic and body:
// the command, flag, checksum, id, partition, opaque and length in
// decimal, spaces and CRLF.
const frameOverhead = 96

func (g *Gateway) notSent(why string) *heldError {
	return &heldError{code: wire.StatusServiceUnavailable, text: "this broker forwards puts to the master; the put was not sent to it and not stored (" + why + "); retry"}
}
