package broker

// Store and forward at the write gateway. A topic with storeAndForward
// (config.Topic.StoresAndForwards), forwarded by a slave's gateway
// (gateway.go), has its puts answered once they are durable in the site's
// outbox (broker/outbox: fsynced, checksummed) instead of once the master
// stored them; the gateway forwards them to the master later, in order per
// partition, over its one connection to the master.
//
// The answer: `<id> <partition> -1 accepted-locally`. MetaQ's Java
// producer reads the first three fields (SimpleMessageProducer splits on
// spaces and parses [0], [1], [2]): the id the message will have at the
// master, the partition, and offset -1, the master's offset being unknown
// yet (as for a put inside a transaction). The Go client reports it as
// SendResult.AcceptedLocally.
//
// # Nothing lost, nothing twice
//
// The outbox fixes each message's id when it accepts it (MetaQ's layout,
// this broker's brokerId, which the master shares). The gateway sends an
// entry as a `sync` command on the gateway link: the master serves a sync
// there as a client put that keeps the id it carries (ServeConn), with
// every check of a put (the write gate included). So the master stores
// the entry under the id the producer was given, and the gateway can tell,
// by reading the master's partition, whether an entry is there.
//
// Per partition the outbox keeps a durable cursor: the last entry the
// master confirmed and the master's offset just past it. Before the first
// entry of a partition is ever sent, the cursor is set (fsynced) to the
// master's end, so every entry the master may hold lies past the cursor.
// On every new connection (a reconnect, a restart of this broker, a new
// master after a failover) the gateway first reconciles each partition it
// has entries for: it reads the master's partition from the cursor (or
// from the master's end, if that is lower: a new master that lacks the old
// one's tail) to its end with `get` and takes every record whose id and
// body checksum match a pending entry as stored there. Such entries are
// not sent again; the others are. Confirmations (the master's answers,
// and reconciled matches) advance the cursor over the longest prefix of
// pending entries known stored, which drops them from the outbox.
//
// Hence: kill -9 of this broker loses nothing accepted (fsynced before
// the answer) and resends only what the master lacks (reconciled first); a
// master killed after storing but before answering, or a connection that
// breaks, leads to the same reconciliation; a failover to a new master
// that received the old one's records by replication finds them there by
// id. The reconciliation reads what the master holds; an entry sent on a
// connection the gateway gave up on (no answer within DrainWait) whose
// bytes reach the master only after that reading would be stored a second
// time. So the gateway's own connection is a gateway link that names the
// gateway with a new epoch (GatewayOptions.LinkDial,
// georeplicator.GatewayDialAs), and the master serves it only once it has
// stopped reading the gateway's older link and finished what it read there
// (georeplicator.GatewayLinks): nothing of an older link is applied after
// the newer link's first request, the reconciliation's. An entry that
// reaches a master while it hands over (a switchover's
// Hold, hold.go) is passed on to the new master over a gateway link as a
// sync, keeping its id, so the same holds when its answer is lost. What is
// not covered: an entry the master confirmed and lost in a failover (it
// was not replicated before the master died) is not sent again (the
// outbox drops confirmed entries, as a producer that sent it directly
// would have moved on).
//
// Order: a partition's entries are sent in outbox order on one
// connection, a batch at a time, and the master stores a connection's
// puts to a partition in order. An entry the master refuses (a transient
// 503, its topic closed) is sent again later, after any later entry of the
// same batch that the master stored: only then may order differ.
//
// The reconciliation reads from the cursor to the master's end, which
// after a long outage includes what other producers wrote meanwhile; it
// runs once per partition per connection.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"metaq/broker/outbox"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/backoff"
)

// localOffset is the offset of a put accepted into the outbox: not known.
const localOffset = -1

// acceptedLocally ends the answer of a put accepted into the outbox.
const acceptedLocally = "accepted-locally"

// valueCode marks a get's data answer on a gateway connection's answer
// channel (no MetaQ status is 1).
const valueCode = 1

// Store-and-forward drain bounds.
const (
	drainBatch      = 2048             // entries sent per partition per round (GatewayOptions.drainBatch)
	drainBatchBytes = 1 << 20          // body bytes sent per partition per round
	drainWait       = 30 * time.Second // GatewayOptions.DrainWait
	reconcileRead   = 1 << 20          // bytes asked per get while reconciling
)

// storedAt is where an entry was found or confirmed at the master.
type storedAt struct {
	sum uint32 // body checksum (store.RecordChecksum)
	end int64  // the master's offset past its record
}

// storesAndForwards says the gateway accepts topic's puts into its outbox.
func (g *Gateway) storesAndForwards(topic string) bool {
	if g.opts.Outbox == nil {
		return false
	}
	te := g.b.topicEntry(topic)
	return te.ok && te.tc.StoresAndForwards(g.b.cfg.Load().Site)
}

// accept is add for a store-and-forward topic: the batch is answered once
// it is in the outbox (or refused: a bound, a write failure).
func (g *Gateway) accept(topic string, partition int, msgs []store.Message, done func([]store.Appended, error)) {
	es := make([]outbox.Entry, len(msgs))
	for i, m := range msgs {
		es[i] = outbox.Entry{Key: outbox.Key{Topic: topic, Partition: partition}, ID: g.ids.next(), Flag: m.Flag, Body: m.Body}
	}
	if err := g.opts.Outbox.Append(es); err != nil {
		var be *outbox.BoundError
		var he *heldError
		if errors.As(err, &be) {
			he = &heldError{code: wire.StatusServiceUnavailable, text: "this broker stores and forwards puts to the master and its outbox is full: " +
				be.Bound + "=" + be.Limit + " reached (" + be.Now + "); not stored; retry later"}
			g.stats.refused.Add(int64(len(msgs)))
		} else {
			he = &heldError{code: wire.StatusInternalServerError, text: "this broker stores and forwards puts to the master and could not write its outbox (" +
				err.Error() + "); not stored"}
			g.stats.refused.Add(int64(len(msgs)))
		}
		errs := make(messageErrors, len(msgs))
		for i := range errs {
			errs[i] = he
		}
		done(make([]store.Appended, len(msgs)), errs)
		return
	}
	as := make([]store.Appended, len(msgs))
	for i := range es {
		as[i] = store.Appended{ID: es[i].ID, Offset: localOffset}
	}
	g.stats.accepted.Add(int64(len(msgs)))
	select {
	case g.kick <- struct{}{}:
	default:
	}
	done(as, nil)
}

// drain forwards the outbox's entries to the master until the gateway or
// the broker closes (see the top of this file).
func (g *Gateway) drain() {
	defer close(g.drained)
	wait := backoff.Backoff{Min: holdRetryEvery, Max: 20 * holdRetryEvery}
	st := &drainState{verified: map[outbox.Key]*fwdConn{}, at: map[outbox.Key]map[int64]storedAt{}}
	var failing string
	for {
		select {
		case <-g.quit:
			return
		case <-g.b.ctx.Done():
			return
		default:
		}
		keys := g.opts.Outbox.Keys()
		if len(keys) == 0 {
			select {
			case <-g.kick:
			case <-g.quit:
				return
			case <-g.b.ctx.Done():
				return
			}
			continue
		}
		err := g.drainRound(st, keys)
		if err == nil {
			if failing != "" {
				g.b.log.Info("GATEWAY: outbox draining to the master again")
				failing = ""
				g.setDrainErr("")
			}
			wait.Reset()
			continue
		}
		if msg := err.Error(); msg != failing {
			g.b.log.Warn("GATEWAY: outbox not drained to the master", "err", err)
			failing = msg
		}
		g.setDrainErr(err.Error())
		select {
		case <-time.After(wait.Next()):
		case <-g.quit:
			return
		case <-g.b.ctx.Done():
			return
		}
	}
}

func (g *Gateway) setDrainErr(s string) {
	g.drainMu.Lock()
	g.drainErr = s
	g.drainMu.Unlock()
}

// drainState is the drain goroutine's: the connection each partition was
// reconciled on, and the pending entries known stored at the master (by
// id) that the cursor has not passed yet.
type drainState struct {
	verified map[outbox.Key]*fwdConn
	at       map[outbox.Key]map[int64]storedAt
}

// drainRound reconciles the partitions not reconciled on the current
// connection, then sends one batch of each partition's pending entries and
// confirms what the master stored.
func (g *Gateway) drainRound(st *drainState, keys []outbox.Key) error {
	ctx, cancel := context.WithTimeout(g.b.ctx, g.opts.DrainWait)
	defer cancel()
	c, err := g.conn(ctx)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	type sent struct {
		key   outbox.Key
		es    []outbox.Entry
		chans []chan *wire.Result
	}
	var batches []sent
	for _, k := range keys {
		if st.verified[k] != c {
			if err := g.reconcile(ctx, c, k, st); err != nil {
				return fmt.Errorf("outbox: reconcile %s with the master %s: %w", k, c.addr, err)
			}
			st.verified[k] = c
		}
		if err := g.confirmPrefix(k, st); err != nil {
			return err
		}
		var es []outbox.Entry
		for _, e := range g.opts.Outbox.Pending(k, g.opts.drainBatch, drainBatchBytes) {
			if _, ok := st.at[k][e.ID]; !ok {
				es = append(es, e)
			}
		}
		if len(es) == 0 {
			continue
		}
		chans, err := g.postEntries(c, k, es)
		if err != nil {
			delete(st.verified, k)
			return fmt.Errorf("outbox: send %s to the master %s: %w", k, c.addr, err)
		}
		batches = append(batches, sent{k, es, chans})
	}
	var firstErr error
	for _, b := range batches {
		for i, ch := range b.chans {
			var r *wire.Result
			select {
			case res, ok := <-ch:
				if ok {
					r = res
				}
			case <-ctx.Done():
				c.fail(fmt.Errorf("no answer from the master %s within %v", c.addr, g.opts.DrainWait))
			case <-g.quit:
				// The gateway is replaced or stopped: the connection may
				// have been dropped from it (the master moved), so it is
				// not closed with it.
				c.fail(errors.New("forwarding stopped"))
			}
			e := &b.es[i]
			switch {
			case r == nil:
				// The outcome is unknown: reconcile before sending again.
				delete(st.verified, b.key)
				firstErr = cmp(firstErr, fmt.Errorf("outbox: %s: no answer from the master %s (%v)", b.key, c.addr, c.failure()))
			case r.Code == wire.StatusOK:
				a, err := parsePutAnswer(r.Body)
				if err != nil {
					delete(st.verified, b.key)
					firstErr = cmp(firstErr, fmt.Errorf("outbox: %s: the master %s answered %w", b.key, c.addr, err))
					continue
				}
				st.mark(b.key, e.ID, storedAt{sum: store.RecordChecksum(e.Body), end: a.Offset + store.RecordHeaderLen + int64(len(e.Body))})
			default:
				// Refused: later entries of the batch may be stored;
				// reconcile before sending again.
				delete(st.verified, b.key)
				if g.masterMoved(r, c.addr) {
					g.dropMoved(c, errors.New("the master refused an outbox entry: it moved"))
				}
				firstErr = cmp(firstErr, fmt.Errorf("outbox: %s: the master %s refused: %d %s", b.key, c.addr, r.Code, r.Body))
			}
		}
		if err := g.confirmPrefix(b.key, st); err != nil {
			return err
		}
	}
	return firstErr
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (st *drainState) mark(k outbox.Key, id int64, at storedAt) {
	m := st.at[k]
	if m == nil {
		m = map[int64]storedAt{}
		st.at[k] = m
	}
	m[id] = at
}

// confirmPrefix confirms k's longest prefix of pending entries known
// stored at the master.
func (g *Gateway) confirmPrefix(k outbox.Key, st *drainState) error {
	m := st.at[k]
	if len(m) == 0 {
		return nil
	}
	var seq uint64
	var end int64
	n := 0
	for _, e := range g.opts.Outbox.Pending(k, len(m)+1, 1<<62) {
		at, ok := m[e.ID]
		if !ok || at.sum != store.RecordChecksum(e.Body) {
			break
		}
		seq, end = e.Seq, max(end, at.end)
		delete(m, e.ID)
		n++
	}
	if n == 0 {
		return nil
	}
	if err := g.opts.Outbox.Confirm(k, seq, end); err != nil {
		return fmt.Errorf("outbox: confirm %s: %w", k, err)
	}
	g.stats.drained.Add(int64(n))
	return nil
}

// reconcile finds which of k's pending entries the master at c holds (see
// the top of this file); a partition never sent to gets its cursor at the
// master's end.
func (g *Gateway) reconcile(ctx context.Context, c *fwdConn, k outbox.Key, st *drainState) error {
	// What was learnt on an earlier connection (perhaps to another
	// master) is learnt again from this master's records.
	delete(st.at, k)
	end, err := g.masterEnd(ctx, c, k)
	if err != nil {
		return err
	}
	cur, ok := g.opts.Outbox.Cursor(k)
	if !ok || cur.Offset > end {
		// Nothing sent yet, or a master without the old one's tail:
		// what it holds of ours lies past its end.
		return g.opts.Outbox.SetCursor(k, end)
	}
	pending := map[int64]uint32{}
	for _, e := range g.opts.Outbox.Pending(k, 1<<30, 1<<62) {
		pending[e.ID] = store.RecordChecksum(e.Body)
	}
	found := 0
	for pos, size := cur.Offset, reconcileRead; pos < end; {
		r, err := g.request(ctx, c, &wire.Get{Topic: k.Topic, Group: "metaq-outbox", Partition: int32(k.Partition), Offset: pos, MaxSize: int32(size)})
		if err != nil {
			return err
		}
		switch r.Code {
		case valueCode:
		case wire.StatusNotFound:
			pos = end
			continue
		case wire.StatusMoved:
			to, perr := strconv.ParseInt(string(r.Body), 10, 64)
			if perr != nil || to <= pos {
				pos = end
			} else {
				pos = to // records gone to retention or damage
			}
			continue
		default:
			return fmt.Errorf("get at %d: %d %s", pos, r.Code, r.Body)
		}
		used := 0
		for used < len(r.Body) {
			rec, n, err := store.DecodeRecord(r.Body[used:])
			if err != nil {
				break // cut off by the answer's size: asked for next
			}
			if sum, ok := pending[rec.ID]; ok && sum == store.RecordChecksum(rec.Body) {
				st.mark(k, rec.ID, storedAt{sum: sum, end: pos + int64(used+n)})
				found++
			}
			used += n
		}
		if used == 0 {
			if size >= 4*store.MaxRecordBody {
				return fmt.Errorf("get at %d: no whole record in %d bytes", pos, len(r.Body))
			}
			size *= 4
			continue
		}
		pos += int64(used)
	}
	if found > 0 {
		g.stats.deduplicated.Add(int64(found))
		g.b.log.Info("GATEWAY: outbox entries found stored at the master, not sent again", "partition", k.String(), "entries", found, "master", c.addr)
	}
	return nil
}

// masterEnd asks the master at c for k's end offset (0 when it has no
// such partition yet).
func (g *Gateway) masterEnd(ctx context.Context, c *fwdConn, k outbox.Key) (int64, error) {
	r, err := g.request(ctx, c, &wire.Get{Topic: k.Topic, Group: "metaq-outbox", Partition: int32(k.Partition), Offset: 1<<63 - 1, MaxSize: 1})
	if err != nil {
		return 0, err
	}
	switch r.Code {
	case wire.StatusMoved:
		end, err := strconv.ParseInt(string(r.Body), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("the master's end of %s: %q", k, r.Body)
		}
		return end, nil
	case wire.StatusNotFound:
		return 0, nil
	}
	return 0, fmt.Errorf("the master's end of %s: %d %s", k, r.Code, r.Body)
}

// request sends one command on c and waits for its answer.
func (g *Gateway) request(ctx context.Context, c *fwdConn, cmd interface {
	AppendTo([]byte) []byte
}) (*wire.Result, error) {
	op := g.opaque.Add(1)
	ch := make(chan *wire.Result, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[op] = ch
	c.mu.Unlock()
	if gc, ok := cmd.(*wire.Get); ok {
		gc.Opaque = op
	}
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(g.opts.DrainWait))
	_, err := c.nc.Write(cmd.AppendTo(nil))
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("write to the master %s: %w", c.addr, err))
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, c.failure()
		}
		return r, nil
	case <-ctx.Done():
		c.fail(fmt.Errorf("no answer from the master %s: %w", c.addr, ctx.Err()))
		return nil, ctx.Err()
	case <-g.quit:
		c.fail(errors.New("forwarding stopped"))
		return nil, errors.New("forwarding stopped")
	}
}

// postEntries writes es to the master as syncs (puts keeping their ids)
// and returns the channels their answers come on.
func (g *Gateway) postEntries(c *fwdConn, k outbox.Key, es []outbox.Entry) ([]chan *wire.Result, error) {
	chans := make([]chan *wire.Result, len(es))
	frames := make([]byte, 0, 64*len(es))
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	for i := range es {
		e := &es[i]
		op := g.opaque.Add(1)
		ch := make(chan *wire.Result, 1)
		c.pending[op] = ch
		chans[i] = ch
		s := wire.Sync{Topic: k.Topic, Partition: int32(k.Partition), Flag: e.Flag, MsgID: e.ID, Checksum: wire.Checksum(e.Body), Opaque: op, Body: e.Body}
		frames = s.AppendTo(frames)
	}
	c.mu.Unlock()
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(g.opts.DrainWait))
	_, werr := c.nc.Write(frames)
	c.wmu.Unlock()
	if werr != nil {
		// Part of it may have gone: reconciled before the next send.
		c.fail(fmt.Errorf("write to the master %s: %w", c.addr, werr))
	}
	return chans, nil
}

// OutboxStats is the state of a gateway's outbox.
type OutboxStats struct {
	Entries    int64   // accepted, not yet confirmed by the master
	Bytes      int64   // their bytes in the outbox
	OldestAge  float64 // seconds since the oldest of them was accepted; 0 when none
	MaxBytes   int64   // the bound on Bytes (outboxMaxBytes)
	MaxAge     float64 // the bound on OldestAge, seconds (outboxMaxAgeMs)
	DrainError string  // why the last drain round failed; "" when it did not
}

// OutboxStats reports the gateway's outbox, and false without one.
func (g *Gateway) OutboxStats() (OutboxStats, bool) {
	ob := g.opts.Outbox
	if ob == nil {
		return OutboxStats{}, false
	}
	s := ob.Stats()
	mb, ma := ob.Bounds()
	out := OutboxStats{Entries: s.Entries, Bytes: s.Bytes, MaxBytes: mb, MaxAge: ma.Seconds()}
	if !s.Oldest.IsZero() {
		out.OldestAge = time.Since(s.Oldest).Seconds()
	}
	g.drainMu.Lock()
	out.DrainError = g.drainErr
	g.drainMu.Unlock()
	return out, true
}
