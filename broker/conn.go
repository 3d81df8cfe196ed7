package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// conn is one client connection. One reader goroutine decodes requests.
// Plain puts (and a sync master's syncs) take the put route (put.go): the
// reader validates what one read brought and hands it to the store, a
// batch per partition, answered by the store when the batch's group commit
// returns, so a connection's puts to a partition are stored in the order
// sent. A get that needs no wait (at the tail, sent from the log files, or
// a result that reads nothing: getInline) is answered on the reader too.
// Every other request runs on a worker goroutine of the connection,
// concurrently, so answers go back by opaque, possibly out of order. One
// writer goroutine serialises the answers and coalesces them into few
// writes (the answers waiting when it starts a write go together, those
// sent from the log files through one pipe: writeFrames). The requests in progress or waiting to be written are bounded by
// Options.MaxInFlight, and the bytes of fetched data and put bodies by the
// connection's byte budget and the broker's (see byteBudget): when a bound
// is reached the reader stops reading, which pushes back on the client
// through TCP instead of buffering without limit. A client that stops
// reading its answers is cut off after Options.WriteTimeout; other
// connections never wait for it.
type conn struct {
	b      *Broker
	nc     net.Conn
	id     uint64
	remote string
	ip     netip.Addr // the remote address counted by connLimits
	log    *slog.Logger

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc
	// readCtx is ctx, also cancelled when Broker.Close stops reading: the
	// reader's waits for the byte budget end then too.
	readCtx    context.Context
	stopReader context.CancelFunc

	slots chan struct{} // in-flight tokens
	out   chan outFrame // answers for the writer
	// fwdSlots are the in-flight tokens of puts the write gateway carries
	// to the master (gateway.go): such a put waits a WAN round trip, not a
	// disk, so a connection may have maxForwardInFlight of them, their
	// bodies bounded by the byte budget. A forwarded batch swaps its slots
	// for these when handed to the gateway; its answer goes through
	// fwdOut, where the gateway's goroutine may wait for the writer (out
	// keeps its room for the answers sent by the store, which never wait).
	fwdSlots chan struct{}
	fwdOut   chan outFrame
	work     chan wire.Command // requests for idle workers; closed when reading stops
	waits    chan heldWait     // held gets for idle waiters (getwait.go)
	// readDone is closed once reading has stopped: idle waiters exit (no
	// new get can come; one held later gets a waiter of its own) and held
	// gets are answered at once (no client waits for them any longer).
	readDone chan struct{}
	bytes    *byteBudget    // fetched data not yet written and put bodies not yet stored
	wg       sync.WaitGroup // workers, waiters, goroutines of waiting, and put batches not yet answered

	// waiting holds, by partition, the put batches waiting for their
	// topic's registration and those that came behind them (see routeBatch).
	waiting *serialQueues[queueKey, *pendingPuts]

	storedMu sync.Mutex
	// stored holds the put batches in the store, not yet answered: a batch
	// stored alone under itself (value nil), those of one store call
	// (storeBatches) under the first, all of them as the value.
	stored map[*pendingPuts][]*pendingPuts

	// heldOut is the reader's list of answers to gets it answered
	// (getInline) and has not queued yet: queued together when it hands on
	// its puts, before it can block (sendHeld).
	heldOut []outFrame

	// woken holds the gets that waited for their partition to grow
	// (holdGet) and are to be answered together (waitGet).
	woken wokenGets

	// appends is the reader's list of a store call's appends
	// (storeBatches), reused from read to read: the store step reads it
	// during the call and keeps none of it.
	appends []store.PartitionAppend

	closeOnce sync.Once

	// stopRead is set by Broker.Close, which stops reading with a read
	// deadline in the past: the reader must not move it again.
	stopRead atomic.Bool
	// writingSince is when the writer last started or made progress on a
	// write that has not finished (unix nanoseconds), 0 while it waits for
	// answers. See Broker.relievePressure.
	writingSince atomic.Int64
	// bodySince is when the body being read (its bytes reserved by its
	// declared length) last brought bytes (unix nanoseconds), 0 while no
	// body is being read, bodyStarted while one is and no time was taken
	// yet. See Broker.relievePressure.
	bodySince atomic.Int64
	// timedOut says why the last socket read timed out (reader goroutine only).
	timedOut timeoutCause
	// zeroCopy: gets are answered from the log files with sendfile where
	// the store allows it (a plain TCP socket; TLS and other connections
	// take the copy path, their bytes must pass through the process).
	zeroCopy bool
	// syncPeer: a synchronous master's link (it sent sync), which sends no
	// heartbeats and may be quiet for long; never closed as idle (reader
	// goroutine only).
	syncPeer bool
	// gatewayPeer: a slave site's gateway link (ServeConn), whose syncs
	// are client puts keeping their ids (broker/storeforward.go).
	gatewayPeer bool
	// txLink is the gateway link this connection's transactions are
	// forwarded on (gatewaytx.go): the reader's, then closeTxLink's once
	// the connection is closed.
	txLink *fwdConn
	// txOpen holds the local transactions begun on a gateway link for
	// transactions and not ended yet (by key), txLost those whose master
	// moved before they ended, with why (gatewaytx.go). The reader's.
	txOpen map[string]*fwdConn
	txLost map[string]string
}

// timeoutCause is why a connection's read timed out.
type timeoutCause int

const (
	notTimedOut timeoutCause = iota
	idleTimedOut
	requestTimedOut
)

// outFrame is one answer: a header (and small body) plus optional bulk
// data written without copying. release returns the in-flight token.
type outFrame struct {
	head []byte
	data []byte
	run  *store.LogRun // data sent from the log files instead (released once written or dropped)
	held int64         // bytes of the connection's byte budget to give back once written
	n    int           // requests this frame answers (0 means 1): in-flight tokens to return
	fwd  bool          // the tokens are fwdSlots' (a forwarded batch's answer)
}

func (f *outFrame) tokens() int {
	if f.n > 0 {
		return f.n
	}
	return 1
}

func (c *conn) releaseSlots(n int) {
	for range n {
		<-c.slots
	}
}

// releaseTokens returns the in-flight tokens f holds.
func (c *conn) releaseTokens(f *outFrame) {
	if f.fwd {
		for range f.tokens() {
			<-c.fwdSlots
		}
		return
	}
	c.releaseSlots(f.tokens())
}

// maxForwardInFlight bounds a connection's forwarded puts awaiting the
// master's answer: at 256 (MaxInFlight) a producer connection got at most
// 256 puts per WAN round trip through the gateway, and 16 of them kept
// under 100 KB of the link in flight, far below a 4 MiB/s link's
// bandwidth-delay product at 60 ms.
const maxForwardInFlight = 8192

// gatewayLinkInFlightFactor raises MaxInFlight for a gateway link a master
// serves (ServeConn): one connection carries a whole site's producers.
const gatewayLinkInFlightFactor = 8

func (b *Broker) newConn(nc net.Conn, ip netip.Addr, addrBytes *byteBudget, inFlight int) *conn {
	ctx, cancel := context.WithCancel(b.ctx)
	id := b.nextConn.Add(1)
	c := &conn{
		b:        b,
		nc:       nc,
		id:       id,
		remote:   nc.RemoteAddr().String(),
		ip:       ip,
		ctx:      ctx,
		cancel:   cancel,
		slots:    make(chan struct{}, inFlight),
		out:      make(chan outFrame, inFlight),
		fwdSlots: make(chan struct{}, maxForwardInFlight),
		fwdOut:   make(chan outFrame, 64),
		work:     make(chan wire.Command),
		waits:    make(chan heldWait),
		readDone: make(chan struct{}),
		stored:   make(map[*pendingPuts][]*pendingPuts),
		bytes:    newByteBudget(b.opts.MaxPendingBytes, addrBytes),
	}
	c.waiting = newSerialQueues(&c.wg, inFlight, c.registerAndStore)
	c.readCtx, c.stopReader = context.WithCancel(ctx)
	c.log = b.log.With("conn", id, "remote", c.remote)
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		c.zeroCopy = !b.opts.CopyGets
	}
	return c
}

// serve runs the connection until it ends and returns once every goroutine
// of the connection has finished.
func (c *conn) serve() {
	c.log.Debug("CONN: open")
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	graceful := c.readLoop()
	close(c.work)     // idle workers exit; busy ones finish their request first
	close(c.readDone) // held gets are answered now; idle waiters exit
	if graceful {
		// quit or EOF: let in-flight requests finish and their answers go out
		// (bounded by the write timeout), then close.
		c.waitRequests()
		close(c.out)
		<-writerDone
		c.close()
		for f := range c.out {
			f.run.Release()
		}
		c.dropFwdOut()
	} else {
		c.close()
		c.waitRequests()
		<-writerDone
		for {
			select {
			case f := <-c.out:
				f.run.Release()
				continue
			default:
			}
			break
		}
		c.dropFwdOut()
	}
	if h := c.b.txHandler(); h != nil {
		h.ConnClosed(TxConn{ID: c.id, RemoteAddr: c.remote})
	}
	c.closeTxLink()
	// Answers the writer never took still hold their bytes: give back
	// everything the connection held.
	if n := c.bytes.detach(); n > 0 {
		c.log.Debug("CONN: released buffered bytes at close", "bytes", n)
	}
	c.log.Debug("CONN: closed")
}

// waitRequests waits until every request of the connection is finished and
// answered. Once the broker's shutdown grace period is over (its context is
// done) with puts still in the store (a stalled disk), it answers those with
// an error instead of waiting for the store.
func (c *conn) waitRequests() {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-c.b.ctx.Done():
	}
	c.storedMu.Lock()
	var stuck []*pendingPuts
	var groups [][]*pendingPuts
	for pp, group := range c.stored {
		if group == nil {
			stuck = append(stuck, pp)
		} else {
			groups = append(groups, group)
		}
	}
	c.storedMu.Unlock()
	stopped := func(pp *pendingPuts) error {
		return fmt.Errorf("append %s-%d: %w", pp.key.topic, pp.key.partition, c.b.ctx.Err())
	}
	for _, pp := range stuck {
		c.b.answerBatch(c, pp, nil, stopped(pp))
	}
	for _, group := range groups {
		// A store call's batches are answered together (answerBatches).
		outs := make([]store.AppendOutcome, len(group))
		for i, pp := range group {
			outs[i].Err = stopped(pp)
		}
		c.b.answerBatches(c, group, outs, nil)
	}
	<-done
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.stopReader()
		c.cancel()
		c.nc.Close()
	})
}

// readLoop decodes requests until the connection ends. It reports whether
// answers still owed should be sent before closing (EOF, quit, malformed
// input) rather than the connection being unusable (I/O error, Close).
func (c *conn) readLoop() bool {
	// The puts decoded from what one read brought are handed on together
	// before the reader can block on the socket or for an in-flight slot:
	// one store call per partition.
	var held []putReq // puts not yet handed on
	handOff := func() {
		defer c.sendHeld()
		if len(held) == 0 {
			return
		}
		c.routePuts(held)
		clear(held)
		held = held[:0]
	}
	defer handOff()
	var frame frameClock
	r := bufio.NewReaderSize(readerFunc(func(p []byte) (int, error) {
		handOff()
		return c.readSocket(p, &frame)
	}), 64<<10)
	d := wire.NewDecoder(r)
	d.MaxBodySize = c.b.opts.MaxMessageSize
	// Only plain puts (copied into held at once, putReqOf, never
	// dispatched: they carry no transaction key) and results (dropped
	// below) come back reused; whatever goes to a worker is its own.
	d.Reuse = true
	// A body's bytes are reserved before it is read (see byteBudget); the
	// reader waits here while the budgets are used up, after handing on
	// the puts it holds so that they can give theirs back.
	var reserved int64 // by the frame being decoded
	d.Alloc = func(n int) []byte {
		if !c.bytes.tryAcquire(int64(n)) {
			handOff()
			if err := c.bytes.acquire(c.readCtx, int64(n)); err != nil {
				c.bytes.acquireOver(int64(n)) // closing: keep the count right
			}
		}
		reserved += int64(n)
		// Not time.Now per body (a clock read per put): relievePressure
		// stamps the body's start the first time it sees it, and a socket
		// read that brings bytes restamps it (readSocket).
		c.bodySince.Store(bodyStarted)
		return allocBody(n)
	}
	for {
		if len(c.slots) == cap(c.slots) {
			handOff()
		}
		select {
		case c.slots <- struct{}{}:
		case <-c.readCtx.Done():
			// Close stopped reading (answer what was read), or the
			// connection is closing.
			return !c.closing()
		}
		frame.next(r.Buffered() > 0)
		cmd, err := d.Decode()
		c.bodySince.Store(0)
		got := reserved
		reserved = 0
		if err != nil {
			c.bytes.release(got)
			<-c.slots
			return c.readFailed(err)
		}
		// From here the reservation belongs to the command's body and is
		// given back where the body is done with (see bodyLen).
		if n := bodyLen(cmd); n != got {
			if n < got {
				c.bytes.release(got - n)
			} else {
				c.bytes.acquireOver(n - got)
			}
		}
		switch x := cmd.(type) {
		case *wire.Put:
			if x.TxKey == "" {
				if held = append(held, putReqOf(x)); len(held) == maxHeldPuts {
					handOff() // a long read: let the store start on these
				}
				continue
			}
		case *wire.Sync:
			if c.gatewayPeer {
				r := syncReqOf(x)
				r.sync = false // a client's put, with every check of one
				if held = append(held, r); len(held) == maxHeldPuts {
					handOff()
				}
				continue
			}
			if !c.b.opts.SyncReceiver {
				// A plain MetaQ broker has no processor for sync.
				c.bytes.release(bodyLen(cmd))
				c.sendResult(wire.StatusServiceUnavailable, txtNoProcessor, x.Opaque)
				continue
			}
			// A sync slave stores a master's records in order per connection
			// and partition, as MetaQ's OrderedThreadPoolExecutor does: the
			// put route keeps that order.
			c.syncPeer = true
			if held = append(held, syncReqOf(x)); len(held) == maxHeldPuts {
				handOff()
			}
			continue
		case *wire.SyncUnit:
			if c.gatewayPeer || !c.b.opts.SyncReceiver {
				// Only a sync slave offers units (`stats sync_units`).
				c.bytes.release(bodyLen(cmd))
				c.sendResult(wire.StatusServiceUnavailable, txtNoProcessor, x.Opaque)
				continue
			}
			// A worker stores it (handleSyncUnit); the master sends it only
			// once its partitions' earlier syncs were answered.
			c.syncPeer = true
		case *wire.Quit:
			<-c.slots
			return true
		case *wire.Result, *wire.Value:
			// Responses sent to the broker match no pending request: gecko drops them.
			c.bytes.release(bodyLen(cmd))
			<-c.slots
			c.log.Debug("CONN: dropped a response frame sent by the client", "cmd", cmd.Name())
			continue
		}
		if c.forwardTx(cmd) {
			continue // a slave's gateway carries the transaction to the master
		}
		if g, ok := cmd.(*wire.Get); ok && c.zeroCopy && !c.b.opts.noInlineGets && c.b.getInline(c, g) {
			continue // answered here: no wait was needed (getInline)
		}
		c.dispatch(cmd)
	}
}

// readerFunc adapts a function to io.Reader.
type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// readFailed handles a decode error and reports whether answers still owed
// should be sent before closing.
func (c *conn) readFailed(err error) bool {
	var fe *wire.FatalError
	switch {
	case errors.As(err, &fe):
		// MetaQ closes the connection on any decoder error, answering
		// nothing for it. Requests decoded before it still get their
		// answers (graceful close): nothing more is read.
		c.log.Warn("CONN: malformed request, closing connection", "err", err)
		c.b.stats.protocolErrors.Add(1)
		return true
	case errors.Is(err, io.EOF):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF):
		c.log.Info("CONN: connection ended inside a frame", "err", err)
		return false
	default:
		if c.b.closing.Load() {
			// Close stopped reading: answer what was read, then close.
			return true
		}
		if c.timedOut != notTimedOut {
			// Idle, or too slow to send a request: answer what was read.
			c.timedOutRead()
			return true
		}
		if !c.closing() {
			c.log.Debug("CONN: read failed", "err", err)
		}
		return false
	}
}

// workerIdle is how long a connection's idle worker goroutine waits for
// another request before it exits.
const workerIdle = 2 * time.Second

// dispatch hands cmd to an idle worker of this connection, or starts a new
// one. Workers are reused because a fresh goroutine per request pays for
// growing its stack on every put; their number never exceeds MaxInFlight,
// since each holds one in-flight request.
func (c *conn) dispatch(cmd wire.Command) {
	select {
	case c.work <- cmd:
		return
	default:
	}
	c.wg.Add(1)
	go c.worker(cmd)
}

func (c *conn) worker(cmd wire.Command) {
	defer c.wg.Done()
	c.handle(cmd)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case cmd, ok := <-c.work:
			if !ok {
				return
			}
			c.handle(cmd)
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		}
	}
}

// handle runs one request on a worker and gives back its body's bytes.
func (c *conn) handle(cmd wire.Command) {
	held := bodyLen(cmd)
	c.b.handle(c, cmd)
	c.bytes.release(held)
}

func (c *conn) closing() bool { return c.ctx.Err() != nil }

// sendForwarded queues the answer of a forwarded batch (its tokens are
// fwdSlots'): it may wait for the writer, never past the connection's end.
func (c *conn) sendForwarded(f outFrame) {
	select {
	case c.fwdOut <- f:
	case <-c.ctx.Done():
		c.releaseTokens(&f)
	}
}

// dropFwdOut empties fwdOut once the writer is gone.
func (c *conn) dropFwdOut() {
	for {
		select {
		case f := <-c.fwdOut:
			c.releaseTokens(&f)
		default:
			return
		}
	}
}

// send queues an answer; it consumes the in-flight token taken for the
// request, which the writer returns once the answer is written. It never
// waits for the writer: every frame in out holds at least one of the
// MaxInFlight tokens, and out has room for MaxInFlight frames.
func (c *conn) send(f outFrame) {
	select {
	case c.out <- f:
	case <-c.ctx.Done():
		f.run.Release()
		c.releaseTokens(&f)
	}
}

// sendHeld queues the answers in heldOut (reader goroutine only).
func (c *conn) sendHeld() {
	for i := range c.heldOut {
		c.send(c.heldOut[i])
		c.heldOut[i] = outFrame{}
	}
	c.heldOut = c.heldOut[:0]
}

// noAnswer returns the token of a request that gets no answer (END).
func (c *conn) noAnswer() { <-c.slots }

func (c *conn) sendResult(code int, body string, opaque int32) {
	c.send(outFrame{head: wire.AppendResult(make([]byte, 0, 40+len(body)), code, body, opaque)})
}

func (c *conn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	wt := c.b.opts.WriteTimeout
	var bw batchWriter
	out := c.out // nil once closed
	for {
		var f outFrame
		if out == nil {
			// Every request is answered (serve waited for them before
			// closing out): forwarded answers may still wait in fwdOut.
			select {
			case f = <-c.fwdOut:
			default:
				return
			}
		} else {
			select {
			case g, ok := <-out:
				if !ok {
					out = nil
					continue
				}
				f = g
			case f = <-c.fwdOut:
			case <-c.ctx.Done():
				return
			}
		}
		c.nc.SetWriteDeadline(time.Now().Add(wt))
		c.writingSince.Store(time.Now().UnixNano())
		// Take the answers already waiting too: they are written together.
		batch := append(bw.frames[:0], f)
	gather:
		for len(batch) < maxWriteBatch {
			select {
			case g, ok := <-out:
				if !ok {
					out = nil
					break gather
				}
				batch = append(batch, g)
			case f = <-c.fwdOut:
				batch = append(batch, f)
			default:
				break gather
			}
		}
		bw.frames = batch
		err := c.writeFrames(w, &bw)
		for i := range batch {
			batch[i].run.Release()
			c.bytes.release(batch[i].held)
			c.releaseTokens(&batch[i])
			batch[i] = outFrame{}
		}
		if err == nil {
			err = w.Flush()
		}
		c.writingSince.Store(0)
		if err != nil {
			c.writeFailed(err)
			return
		}
	}
}

// maxWriteBatch is the most answers the writer takes from its queue for
// one write.
const maxWriteBatch = 64

// batchWriter holds the writer goroutine's scratch space, reused from
// batch to batch.
type batchWriter struct {
	frames []outFrame
	pieces []store.Piece
	bytes  []byte
}

// batchInlineData is the largest copied answer body a batch copies into
// its own buffer, beside the small answers around it; a longer one is a
// piece of its own.
const batchInlineData = 4 << 10

// writeFrames writes the answers in bw.frames, in order, through w (which
// is empty on entry and may hold bytes on return). Where answers sent from
// the log files are among several ready at once, the batch goes to the
// socket as one stream (store.SendBatch: headers, small answers and the
// runs' sections through one pipe, one send to the socket) instead of a
// flush, a header and a send per answer.
func (c *conn) writeFrames(w *bufio.Writer, bw *batchWriter) error {
	batch := bw.frames
	runs := 0
	for i := range batch {
		if batch[i].run != nil {
			runs++
		}
	}
	if runs > 0 && len(batch) > 1 && c.zeroCopy {
		pieces, buf := bw.pieces[:0], bw.bytes[:0]
		from := 0 // buf[from:] is not in a piece yet
		for i := range batch {
			f := &batch[i]
			buf = append(buf, f.head...)
			switch {
			case f.run != nil:
				pieces = append(pieces, store.Piece{Bytes: buf[from:len(buf):len(buf)], Run: f.run})
				from = len(buf)
			case len(f.data) > batchInlineData:
				pieces = append(pieces, store.Piece{Bytes: buf[from:len(buf):len(buf)]}, store.Piece{Bytes: f.data})
				from = len(buf)
			default:
				buf = append(buf, f.data...)
			}
		}
		if from < len(buf) {
			pieces = append(pieces, store.Piece{Bytes: buf[from:]})
		}
		_, sent, err := store.SendBatch(c.nc, pieces, func() { c.writingSince.Store(time.Now().UnixNano()) })
		clear(pieces) // keep no run or answer body alive
		bw.pieces, bw.bytes = pieces[:0], buf[:0]
		if sent {
			c.b.stats.getsBatched.Add(int64(runs))
			return err
		}
		// Not sent (no pipe free): one by one.
	}
	for i := range batch {
		if err := c.writeFrame(w, batch[i]); err != nil {
			return err
		}
	}
	return nil
}

// writePiece is how much of a large answer is written at a time, so that
// writingSince shows whether the client takes its answers at all.
const writePiece = 256 << 10

func (c *conn) writeFrame(w *bufio.Writer, f outFrame) error {
	if f.run != nil {
		return c.writeRun(w, f.head, f.run)
	}
	if _, err := w.Write(f.head); err != nil {
		return err
	}
	for data := f.data; len(data) > 0; {
		n := min(len(data), writePiece)
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
		if len(data) > 0 {
			c.writingSince.Store(time.Now().UnixNano())
		}
	}
	return nil
}

// writeRun sends a get's data from the log files (sendfile): the answers
// before it go first, then its header and the run straight to the socket
// (the header in the same packet as the run's first bytes), under the same
// write deadline.
func (c *conn) writeRun(w *bufio.Writer, head []byte, run *store.LogRun) error {
	defer run.Release()
	if err := w.Flush(); err != nil {
		return err
	}
	run.Head = head
	run.Progress = func() { c.writingSince.Store(time.Now().UnixNano()) }
	_, err := run.WriteTo(c.nc)
	return err
}

func (c *conn) writeFailed(err error) {
	if !c.closing() {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.log.Warn("CONN: client does not read its answers, closing connection", "timeout", c.b.opts.WriteTimeout)
		} else {
			c.log.Debug("CONN: write failed", "err", err)
		}
	}
	c.close()
}
