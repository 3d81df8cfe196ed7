package broker

// Transactions through the write gateway. While a slave's gateway forwards
// (gateway.go) and this site forwards at least one topic, the `transaction`
// commands of a client connection and its puts that carry a transaction
// key are carried to the master and answered with the master's answers:
// the transactions, local and XA, are the master's, exactly as if the
// producer had sent them there.
//
// MetaQ's broker keeps a local transaction per (connection, sessionId) and
// rolls back a connection's open local transactions when it closes. So a
// client connection that uses transactions gets a gateway link of its own
// (GatewayOptions.Dial, to the master GatewayOptions.Master names), opened
// at its first transaction command and closed when the connection closes:
// the master then rolls back what the producer left open, as for a
// connection of its own, and what one producer does cannot end another's
// transactions. (The plain puts of every connection share the gateway's
// one connection instead; a transaction's puts do not.)
//
// Order: the commands are written to the link from the connection's reader,
// in the order they arrived, so begin, puts, prepare, commit and rollback
// reach the master in that order; the master handles them as it handles a
// direct connection's.
//
// Outcomes: the master's answer, code and text; not sent (no master known,
// the link could not be opened): 503, not sent; sent and no answer within
// twice MaxWait (the link broke): 500, the outcome unknown, as MetaQ's
// producer reports a commit that timed out. A broken link is not reopened
// for the transactions begun on it (the master rolled them back when it
// broke): their next commands go on a new link, where the master answers
// that they have not been started.
//
// A transaction does not follow a change of master: it lives at the master
// it began at, and MetaQ has no way to move it. When that master is no
// longer the master (it answers that it moved: a 403 from a slave, a
// refusal saying it is no longer master, or a 403 or 503 while another
// master is registered; or, at a BEGIN, ZooKeeper names another master
// than the link's), the link is closed once its answers are in, which makes
// the old master roll back the local transactions open on it, as MetaQ's
// broker does for a lost connection (a demoted master stores nothing more
// anyway). Their later commands are answered here as MetaQ's broker
// answers them on a new connection after a lost one: a put into one or its
// commit or prepare 500 "Local transaction '<key>' has not been started",
// followed by why (the master it began at moved; none of its messages is
// stored; begin it again), its rollback 200 (it is rolled back), its end
// nothing. The next BEGIN goes to the master found then. A command
// already on its way to the old master is answered by it: a commit there
// after it was demoted fails (its writes are refused), never stored. XA
// transactions are not tracked: a prepared one stays at the master it was
// prepared at (recover there); a master refuses to switch over while it
// holds one (internal/bundle).
//
// A put in a transaction to a topic this site does not forward is refused
// here as any put to it is (the slave's 403); one to a topic with
// storeAndForward is forwarded, not kept in the outbox: a transaction's
// atomicity is the master's.

import (
	"context"
	"errors"
	"strings"
	"time"

	"metaq/broker/wire"
)

// txForwarding returns the gateway that carries this broker's clients'
// transactions to the master, or nil: the gateway's holder refuses writes
// here (a slave) and this site forwards at least one topic.
func (b *Broker) txForwarding() *Gateway {
	g := b.gateway.Load()
	if g == nil || !b.gate.refusedBy(g.opts.Holder) {
		return nil
	}
	cfg := b.cfg.Load()
	if cfg.Site.ForwardPuts {
		return g
	}
	for i := range cfg.Topics {
		if cfg.Topics[i].Forwards(cfg.Site) {
			return g
		}
	}
	return nil
}

// forwardTx takes cmd when it is a transaction command or a put with a
// transaction key and this broker forwards transactions (see the top of
// this file): it writes it to the connection's gateway link and has it
// answered later. It reports whether it took cmd. Reader goroutine only:
// the reader holds cmd's in-flight token and its body's bytes.
func (c *conn) forwardTx(cmd wire.Command) bool {
	var put *wire.Put
	var tx *wire.Transaction
	switch x := cmd.(type) {
	case *wire.Put:
		put = x
	case *wire.Transaction:
		tx = x
	default:
		return false
	}
	g := c.b.txForwarding()
	if g == nil {
		return false
	}
	defer c.bytes.release(bodyLen(cmd)) // copied into the frame, or refused
	op := g.opaque.Add(1)
	var frame []byte
	var opaque int32
	if put != nil {
		c.b.stats.cmdPut.Add(1)
		te := c.b.topicEntry(put.Topic)
		if c.b.forwarding(te) == nil {
			r := putReqOf(put)
			res := c.b.checkPut(&r, put.Partition, te)
			if res == nil {
				res = wire.NewResult(wire.StatusForbidden, c.b.putError(put.Topic, put.Partition, "this broker forwards transactions to the master, not this topic's puts"), put.Opaque)
			}
			c.b.stats.putFailed.Add(1)
			c.send(outFrame{head: res.AppendTo(nil)})
			return true
		}
		p := *put
		p.Opaque, p.Fields = op, 0 // the 1.4.4+ form, which carries the key
		frame, opaque = p.AppendTo(nil), put.Opaque
	} else {
		t := *tx
		t.Opaque = op
		frame, opaque = t.AppendTo(nil), tx.Opaque
	}
	end := tx != nil && tx.Type == wire.TxEnd // no answer, from anyone
	if tx != nil && tx.Type == wire.TxBegin {
		c.txCheckMaster(g)
	}
	c.txRetireMoved(g)
	local, key := txLocalKey(put, tx)
	if local {
		if why, lost := c.txLost[key]; lost {
			if tx == nil || tx.Type != wire.TxBegin {
				c.answerLostTx(put, tx, key, why, opaque)
				return true
			}
			delete(c.txLost, key) // begun again
		}
	}

	fc, err := c.txLinkFor(g)
	var ch chan *wire.Result
	if err == nil {
		fc.mu.Lock()
		if err = fc.err; err == nil && !end {
			ch = make(chan *wire.Result, 1)
			fc.pending[op] = ch
		}
		fc.mu.Unlock()
	}
	if err != nil {
		g.stats.notSent.Add(1)
		if end {
			c.noAnswer()
			return true
		}
		res := g.notSent(err.Error())
		if put != nil {
			c.b.stats.putFailed.Add(1)
		}
		c.sendResult(res.code, strings.Replace(res.text, "forwards puts", "forwards transactions", 1), opaque)
		return true
	}
	if local && tx != nil {
		switch tx.Type {
		case wire.TxBegin:
			if c.txOpen == nil {
				c.txOpen = map[string]*fwdConn{}
			}
			c.txOpen[key] = fc
		case wire.TxCommitOnePhase, wire.TxCommitTwoPhase, wire.TxRollback:
			delete(c.txOpen, key)
		}
	}
	fc.wmu.Lock()
	fc.nc.SetWriteDeadline(time.Now().Add(g.opts.MaxWait))
	_, werr := fc.nc.Write(frame)
	fc.wmu.Unlock()
	if werr != nil {
		fc.fail(errors.New("write to the master " + fc.addr + ": " + werr.Error()))
	}
	if end {
		c.noAnswer()
		return true
	}
	c.wg.Add(1)
	if !c.b.routines.Go(func() {
		defer c.wg.Done()
		g.answerTx(c, fc, op, ch, opaque, put != nil)
	}) {
		c.wg.Done()
		c.sendResult(wire.StatusInternalServerError, "the transaction command was forwarded to the master "+fc.addr+
			" and the broker closed before its answer: its outcome there is unknown", opaque)
	}
	return true
}

// txLinkFor returns the connection's gateway link for transactions,
// opening one when there is none, the last one broke, or its master moved
// (that one is closed once its answers are in).
func (c *conn) txLinkFor(g *Gateway) (*fwdConn, error) {
	if fc := c.txLink; fc != nil {
		fc.mu.Lock()
		broken := fc.err != nil
		fc.mu.Unlock()
		if !broken && !fc.moved.Load() {
			return fc, nil
		}
		c.txLink = nil
		if !broken {
			g.retireTxLink(fc)
		}
		for key, at := range c.txOpen {
			if at == fc {
				delete(c.txOpen, key) // rolled back by the master when fc broke
			}
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, g.opts.MaxWait)
	defer cancel()
	// As a put waits for its master (up to MaxWait), so does a
	// transaction: the site's ZooKeeper may not name the master yet.
	addr, err := g.opts.Master(ctx)
	for err != nil {
		select {
		case <-ctx.Done():
			return nil, errors.New("find the master: " + err.Error())
		case <-time.After(50 * time.Millisecond):
		}
		addr, err = g.opts.Master(ctx)
	}
	nc, err := g.opts.Dial(ctx, addr)
	if err != nil {
		return nil, errors.New("dial the master " + addr + ": " + err.Error())
	}
	g.stats.txLinks.Add(1)
	fc := &fwdConn{addr: addr, nc: nc, pending: map[int32]chan *wire.Result{}}
	if !c.b.routines.Go(fc.readLoop) {
		nc.Close()
		return nil, ErrClosed
	}
	stop := context.AfterFunc(c.b.ctx, func() { fc.fail(errors.New("the broker is closing")) })
	fc.mu.Lock()
	fc.stop = stop
	fc.mu.Unlock()
	c.txLink = fc
	return fc, nil
}

// txLocalKey says whether the command (put or tx) belongs to a local
// transaction, and its key.
func txLocalKey(put *wire.Put, tx *wire.Transaction) (bool, string) {
	if put != nil {
		return put.Tx.Kind == wire.TxLocal, put.Tx.String()
	}
	return tx.Tx.Kind == wire.TxLocal, tx.Tx.String()
}

// txCheckMaster marks the connection's link for transactions moved when
// ZooKeeper names another master than the link's, so that a transaction
// begun now begins at the master (a BEGIN is answered by a demoted master
// too). Reader goroutine only.
func (c *conn) txCheckMaster(g *Gateway) {
	fc := c.txLink
	if fc == nil || fc.moved.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	if addr, err := g.opts.Master(ctx); err == nil && addr != fc.addr {
		fc.moved.Store(true)
	}
}

// txRetireMoved retires the connection's link for transactions when its
// master moved, recording the local transactions open on it as lost.
// Reader goroutine only.
func (c *conn) txRetireMoved(g *Gateway) {
	fc := c.txLink
	if fc == nil || !fc.moved.Load() {
		return
	}
	fc.mu.Lock()
	broken := fc.err != nil
	fc.mu.Unlock()
	if broken {
		return // txLinkFor opens another; the master rolled back what was open
	}
	c.txLink = nil
	c.txInterrupted(fc)
	g.retireTxLink(fc)
}

// txInterrupted records the local transactions open on fc, a link being
// retired because its master moved, as lost: the old master rolls them
// back when fc closes. Reader goroutine only.
func (c *conn) txInterrupted(fc *fwdConn) {
	for key, at := range c.txOpen {
		if at != fc {
			continue
		}
		delete(c.txOpen, key)
		if c.txLost == nil {
			c.txLost = map[string]string{}
		}
		c.txLost[key] = "it was begun at the master " + fc.addr + ", which is no longer the master: it was rolled back there " +
			"when this broker closed its link, and none of its messages is stored; begin it again"
	}
}

// answerLostTx answers a command of a local transaction whose master moved
// before it ended (see the top of this file).
func (c *conn) answerLostTx(put *wire.Put, tx *wire.Transaction, key, why string, opaque int32) {
	switch {
	case tx != nil && tx.Type == wire.TxEnd:
		c.noAnswer()
		return
	case tx != nil && tx.Type == wire.TxRollback:
		delete(c.txLost, key)
		c.sendResult(wire.StatusOK, "", opaque)
		return
	case tx != nil && (tx.Type == wire.TxCommitOnePhase || tx.Type == wire.TxCommitTwoPhase):
		delete(c.txLost, key)
	}
	if put != nil {
		c.b.stats.putFailed.Add(1)
	}
	c.sendResult(wire.StatusInternalServerError, "Local transaction '"+key+"' has not been started: "+why+".", opaque)
}

// closeTxLink closes the connection's gateway link for transactions, once
// the connection is closed and its requests answered: the master rolls
// back the local transactions left open on it.
func (c *conn) closeTxLink() {
	if fc := c.txLink; fc != nil {
		c.txLink = nil
		fc.fail(errors.New("its client closed the connection"))
	}
}

// retireTxLink closes fc once no command awaits an answer on it, or after
// twice MaxWait.
func (g *Gateway) retireTxLink(fc *fwdConn) {
	retire := func() {
		until := time.Now().Add(2 * g.opts.MaxWait)
		t := time.NewTicker(holdRetryEvery)
		defer t.Stop()
		for time.Now().Before(until) {
			fc.mu.Lock()
			idle := fc.err != nil || len(fc.pending) == 0
			fc.mu.Unlock()
			if idle {
				break
			}
			select {
			case <-t.C:
			case <-g.b.ctx.Done():
			}
		}
		fc.fail(errors.New("the master moved"))
	}
	if !g.b.routines.Go(retire) {
		fc.fail(errors.New("the master moved"))
	}
}

// answerTx waits for the master's answer to the command sent on fc as op
// and answers the client with it (opaque), or 500 when none came.
func (g *Gateway) answerTx(c *conn, fc *fwdConn, op int32, ch chan *wire.Result, opaque int32, isPut bool) {
	t := time.NewTimer(2 * g.opts.MaxWait)
	defer t.Stop()
	var r *wire.Result
	select {
	case res, ok := <-ch:
		if ok {
			r = res
		}
	case <-t.C:
	case <-g.b.ctx.Done():
	}
	var res *wire.Result
	if r == nil {
		why := "no answer within " + (2 * g.opts.MaxWait).String()
		fc.mu.Lock()
		delete(fc.pending, op) // nil once broken: a no-op
		if fc.err != nil {
			why = fc.err.Error()
		}
		fc.mu.Unlock()
		g.stats.unknown.Add(1)
		res = wire.NewResult(wire.StatusInternalServerError, "the transaction command was forwarded to the master "+fc.addr+
			" and no answer came ("+why+"): its outcome there is unknown", opaque)
	} else {
		g.stats.txForwarded.Add(1)
		if g.txMasterMoved(r, fc.addr) {
			fc.moved.Store(true)
		}
		res = &wire.Result{Code: r.Code, Body: r.Body, Opaque: opaque}
	}
	if isPut && !res.OK() {
		g.b.stats.putFailed.Add(1)
	}
	c.send(outFrame{head: res.AppendTo(nil)})
}

// txMasterMoved says the answer r of the master at addr says it is no
// longer the master: a refusal saying so, 403 from a slave, or a 403 or 503 while ZooKeeper
// names another master. (A 503 alone does not: a master answers it for
// other reasons too, and the link's transactions live there.)
func (g *Gateway) txMasterMoved(r *wire.Result, addr string) bool {
	if r.Code != wire.StatusOK && strings.Contains(string(r.Body), "no longer master") {
		return true // a demoted master's refusal, of a put or of a commit's writes
	}
	if r.Code != wire.StatusForbidden && r.Code != wire.StatusServiceUnavailable {
		return false
	}
	if r.Code == wire.StatusForbidden && (strings.Contains(string(r.Body), "slave") || strings.Contains(string(r.Body), "no longer master")) {
		return true
	}
	ctx, cancel := context.WithTimeout(g.b.ctx, time.Second)
	defer cancel()
	now, err := g.opts.Master(ctx)
	return err == nil && now != addr
}
