package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// Texts MetaQ clients and operators see (spec §1.5, §1.6, §1.7, §1.2).
const (
	txtChecksum      = "Checksum failure,message may be corrupted when transfering on networking."
	txtNoProcessor   = "未注册请求处理器，请求处理器类为com.taobao.metamorphosis.network.SyncCommand"
	txtNoTransaction = "Transactions are not supported by this broker: no transaction handler is configured"
)

// handle runs one request and queues its answer. It is called on its own
// goroutine and must answer (or call noAnswer) exactly once.
func (b *Broker) handle(c *conn, cmd wire.Command) {
	switch cmd := cmd.(type) {
	case *wire.Put:
		b.stats.cmdPut.Add(1)
		if cmd.TxKey != "" {
			b.handleTxPut(c, cmd)
			return
		}
		// The broker's context, not the connection's: a put that reached the
		// store completes even if its client goes away.
		code, body := b.put(b.ctx, cmd)
		c.sendResult(code, body, cmd.Opaque)
	case *wire.Get:
		b.handleGet(c, cmd)
	case *wire.Offset:
		b.handleOffset(c, cmd)
	case *wire.Version:
		c.sendResult(wire.StatusOK, b.opts.Version, cmd.Opaque)
	case *wire.Stats:
		b.handleStats(c, cmd)
	case *wire.Transaction:
		b.handleTransaction(c, cmd)
	case *wire.Sync:
		b.handleSync(c, cmd)
	default:
		c.log.Warn("CONN: unexpected command", "cmd", cmd.Name())
		c.noAnswer()
	}
}

func (b *Broker) putError(topic string, p int32, detail string) string {
	s := "Put message to [broker '" + b.URL() + "'] [partition '" + topic + "-" + strconv.Itoa(int(p)) + "'] failed."
	if detail != "" {
		s += "Detail:" + detail
	}
	return s
}

// put stores one non-transactional message (spec §1.5) and returns the
// answer's code and body.
func (b *Broker) put(ctx context.Context, cmd *wire.Put) (int, string) {
	code, body := b.put0(ctx, cmd)
	b.countPut(cmd, code)
	return code, body
}

func (b *Broker) countPut(cmd *wire.Put, code int) {
	if code != wire.StatusOK {
		b.stats.putFailed.Add(1)
		b.stats.realtime(cmd.Topic, statPutFailed, 1)
		return
	}
	b.stats.realtime(cmd.Topic, statPut, 1)
	b.stats.realtime(cmd.Topic, statMessageSize, int64(len(cmd.Body)))
}

// resolvePartition returns the put's partition, choosing one at random
// for -1 (spec §1.5 step 2) among the topic's partitions.
func (b *Broker) resolvePartition(cmd *wire.Put) int32 {
	if cmd.Partition != -1 {
		return cmd.Partition
	}
	te := b.topicEntry(cmd.Topic)
	n := b.cfg.Load().System.NumPartitions
	if te.ok {
		n = te.tc.NumPartitions
	}
	if n <= 0 {
		return -1
	}
	return int32(rand.IntN(n))
}

// checkPut runs steps 1, 3, 4 and 5 of spec §1.5 (everything but the
// append) for the put resolved to partition p, and returns an error
// answer, or 200 and "".
func (b *Broker) checkPut(ctx context.Context, cmd *wire.Put, p int32) (int, string) {
	topic := cmd.Topic
	if b.isClosed(topic, int(cmd.Partition)) {
		closed := "partition[" + strconv.Itoa(b.brokerID()) + "-" + strconv.Itoa(int(cmd.Partition)) + "] has been closed"
		if b.syncOut != nil {
			// A MetaQ samsa master answers the bare text, capitalised.
			return wire.StatusForbidden, "P" + closed[1:]
		}
		return wire.StatusForbidden, b.putError(topic, cmd.Partition, closed)
	}
	te := b.topicEntry(topic)
	tc, accepted := te.tc, te.ok
	if !accepted {
		return wire.StatusInternalServerError, b.putError(topic, p, "The server do not accept topic "+topic)
	}
	if p < 0 || int(p) >= tc.NumPartitions {
		return wire.StatusInternalServerError, b.putError(topic, p, "wrong partition "+strconv.Itoa(int(p)))
	}
	if cmd.Checksum != wire.NoChecksum && wire.Checksum(cmd.Body) != cmd.Checksum {
		b.log.Warn("TOPIC("+topic+"): put refused, checksum mismatch", "partition", p, "bytes", len(cmd.Body), "checksum", cmd.Checksum)
		return wire.StatusInternalServerError, b.putError(topic, p, txtChecksum)
	}
	if max := b.cfg.Load().System.MaxTransferSize; max > 0 && len(cmd.Body) > max-20 {
		// Spec §11: such a message can never be fetched by a Java consumer.
		// Said once per topic and configuration, not per message.
		if te.oversizeWarned.CompareAndSwap(false, true) {
			b.log.Warn("TOPIC("+topic+"): message larger than maxTransferSize-20 cannot be fetched by MetaQ consumers", "bytes", len(cmd.Body), "maxTransferSize", max)
		}
	}
	b.ensureTopic(ctx, topic, te)
	return wire.StatusOK, ""
}

func putAnswer(a store.Appended, p int32) string {
	return strconv.FormatInt(a.ID, 10) + " " + strconv.Itoa(int(p)) + " " + strconv.FormatInt(a.Offset, 10)
}

func (b *Broker) put0(ctx context.Context, cmd *wire.Put) (int, string) {
	return b.putResolved(ctx, cmd, b.resolvePartition(cmd))
}

func (b *Broker) putResolved(ctx context.Context, cmd *wire.Put, p int32) (int, string) {
	if code, body := b.checkPut(ctx, cmd, p); code != wire.StatusOK {
		return code, body
	}
	topic := cmd.Topic
	if b.syncOut != nil {
		a, slaveErr, err := b.syncOut.putReplicated(ctx, topic, int(p), cmd.Flag, cmd.Body)
		if err != nil {
			if slaveErr {
				return wire.StatusInternalServerError, err.Error()
			}
			b.logAppendError(topic, p, err)
			return wire.StatusInternalServerError, b.putError(topic, p, "")
		}
		return wire.StatusOK, putAnswer(a, p)
	}
	as, err := b.store.Append(ctx, topic, int(p), []store.Message{{Flag: cmd.Flag, Body: cmd.Body}})
	if err != nil {
		b.logAppendError(topic, p, err)
		return wire.StatusInternalServerError, b.putError(topic, p, "")
	}
	return wire.StatusOK, putAnswer(as[0], p)
}

// pendingPuts is one batch of a connection's puts to partition p, in order:
// each was checked (and a refusal answered) on its own, and the accepted
// ones are in the store's queue as one append (see conn.storePuts).
type pendingPuts struct {
	p    int32
	n    int    // puts the batch answers
	out  []byte // answers of the puts refused before the store
	ok   []*wire.Put
	size int64 // body bytes of ok
	// answered is set by whoever sends the batch's answers: the store's
	// notify when the commit returns, or a shutdown that stops waiting.
	answered atomic.Bool
}

// startPuts checks a batch of puts to partition p and queues the accepted
// ones in the store with one call, without waiting for their group commit:
// the connection's next batch can then join the same commit. The batch is
// answered as one frame the moment its commit returns, by the store's
// notify on the store's goroutine (no goroutine of ours has to be woken and
// scheduled first), or at once when every put is refused.
func (b *Broker) startPuts(c *conn, p int32, puts []*wire.Put) {
	pp := &pendingPuts{p: p, n: len(puts), out: make([]byte, 0, 48*len(puts))}
	c.wg.Add(1) // done by answerBatch
	for _, cmd := range puts {
		b.stats.cmdPut.Add(1)
		if code, body := b.checkPut(b.ctx, cmd, p); code != wire.StatusOK {
			b.countPut(cmd, code)
			pp.out = wire.AppendResult(pp.out, code, body, cmd.Opaque)
			continue
		}
		pp.ok = append(pp.ok, cmd)
	}
	if len(pp.ok) > 0 {
		msgs := make([]store.Message, len(pp.ok))
		for i, cmd := range pp.ok {
			msgs[i] = store.Message{Flag: cmd.Flag, Body: cmd.Body}
			if cmd.Checksum != wire.NoChecksum {
				// checkPut verified it: the same CRC the record carries.
				msgs[i].Checksum, msgs[i].ChecksumSet = uint32(cmd.Checksum), true
			}
			pp.size += int64(len(cmd.Body))
		}
		c.pmu.Lock()
		c.stored[pp] = struct{}{} // before the store can answer it
		c.pmu.Unlock()
		// The broker's context, not the connection's: puts that reached
		// the store complete even if their client goes away.
		b.store.AppendAsync(b.ctx, pp.ok[0].Topic, int(p), msgs, func(as []store.Appended, err error) {
			b.answerBatch(c, pp, as, err)
		})
	} else {
		b.answerBatch(c, pp, nil, nil)
	}
	// Encoded by the store (it keeps no body): the buffers can take the
	// next bodies.
	for _, cmd := range puts {
		freeBody(cmd.Body)
		cmd.Body = nil
	}
}

// answerBatch sends the answers of all of a batch started by startPuts as
// one frame (one writer hand-off), with the store's result as, err, once:
// the store's notify and a shutdown that stops waiting for the store
// (conn.waitRequests) may both try. It never blocks (see conn.send), as the
// store's notify must not.
func (b *Broker) answerBatch(c *conn, pp *pendingPuts, as []store.Appended, err error) {
	if !pp.answered.CompareAndSwap(false, true) {
		return
	}
	c.pmu.Lock()
	delete(c.stored, pp)
	c.pmu.Unlock()
	out := pp.out
	if len(pp.ok) > 0 {
		out = b.answerPuts(out, pp, as, err)
	}
	c.send(outFrame{head: out, n: pp.n})
	c.wg.Done()
}

// answerPuts appends the answers of a batch's stored puts to out.
func (b *Broker) answerPuts(out []byte, pp *pendingPuts, as []store.Appended, err error) []byte {
	topic, p := pp.ok[0].Topic, pp.p
	if err == nil && len(as) != len(pp.ok) {
		err = fmt.Errorf("store returned %d results for %d messages", len(as), len(pp.ok))
	}
	n := int64(len(pp.ok))
	if err != nil {
		b.logAppendError(topic, p, err)
		b.stats.putFailed.Add(n)
		b.stats.realtimeN(topic, statPutFailed, n, n)
		failed := b.putError(topic, p, "")
		for _, cmd := range pp.ok {
			out = wire.AppendResult(out, wire.StatusInternalServerError, failed, cmd.Opaque)
		}
		return out
	}
	var scratch [64]byte
	for i, cmd := range pp.ok {
		ans := strconv.AppendInt(scratch[:0], as[i].ID, 10)
		ans = append(ans, ' ')
		ans = strconv.AppendInt(ans, int64(p), 10)
		ans = append(ans, ' ')
		ans = strconv.AppendInt(ans, as[i].Offset, 10)
		out = wire.AppendResult(out, wire.StatusOK, ans, cmd.Opaque)
	}
	b.stats.realtimeN(topic, statPut, n, n)
	b.stats.realtimeN(topic, statMessageSize, n, pp.size)
	return out
}

// putEach stores puts one at a time: sync replication goes message by
// message under a partition lock.
func (b *Broker) putEach(c *conn, p int32, puts []*wire.Put) {
	for _, cmd := range puts {
		b.stats.cmdPut.Add(1)
		code, body := b.putResolved(b.ctx, cmd, p)
		b.countPut(cmd, code)
		c.sendResult(code, body, cmd.Opaque)
	}
}

func (b *Broker) logAppendError(topic string, p int32, err error) {
	if errors.Is(err, context.Canceled) && b.closing.Load() {
		b.log.Info("TOPIC("+topic+"): append cancelled by shutdown", "partition", p)
		return
	}
	b.log.Error("TOPIC("+topic+"): append failed", "partition", p, "err", err)
}

func (b *Broker) brokerID() int { return b.cfg.Load().System.BrokerID }

func notExists(topic string, p int32) string {
	return "The topic `" + topic + "` in partition `" + strconv.Itoa(int(p)) + "` is not exists"
}

// handleGet answers get exactly as spec §1.6.
func (b *Broker) handleGet(c *conn, cmd *wire.Get) {
	b.stats.cmdGet.Add(1)
	b.stats.realtime(cmd.Topic, statGet, 1)
	code, body, data := b.get(c, cmd)
	if data != nil {
		// The data holds len(data) bytes of the connection's budget until written.
		c.send(outFrame{head: wire.AppendValueHeader(make([]byte, 0, 32), len(data), cmd.Opaque), data: data, held: int64(len(data))})
		return
	}
	if code == wire.StatusNotFound || code == wire.StatusMoved || code == wire.StatusForbidden {
		b.stats.getMiss.Add(1)
		b.stats.realtime(cmd.Topic, statGetMiss, 1)
	}
	c.sendResult(code, body, cmd.Opaque)
}

// get returns the answer to a get: a code and text, or data, which holds
// len(data) bytes of the connection's byte budget.
func (b *Broker) get(c *conn, cmd *wire.Get) (int, string, []byte) {
	if b.isClosed(cmd.Topic, int(cmd.Partition)) {
		return wire.StatusForbidden, "Partition[" + strconv.Itoa(b.brokerID()) + "-" + strconv.Itoa(int(cmd.Partition)) + "] has been closed", nil
	}
	info, err := b.store.Partition(cmd.Topic, int(cmd.Partition))
	if err != nil {
		if errors.Is(err, store.ErrNoPartition) {
			return wire.StatusNotFound, notExists(cmd.Topic, cmd.Partition), nil
		}
		return wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), nil
	}
	if cmd.MaxSize <= 0 {
		return wire.StatusBadRequest, "Bad request,invalid max size:" + strconv.Itoa(int(cmd.MaxSize)), nil
	}
	max := int(cmd.MaxSize)
	if mt := b.cfg.Load().System.MaxTransferSize; mt > 0 && max > mt {
		max = mt
	}
	for range 3 {
		if code, body, ok := b.outOfRange(cmd.Offset, info.Min, info.Max); ok {
			return code, body, nil
		}
		// Reserve what the read may return; keep only what it returned.
		want := int64(max)
		if rest := info.Max - cmd.Offset; rest > 0 && rest < want {
			// The run may go past the readable end up to the segment's
			// end (spec §2.3), but rarely by much: reserve the expected size.
			want = rest
		}
		if err := c.bytes.acquire(c.ctx, want); err != nil {
			return wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), nil
		}
		data, err := b.store.Read(cmd.Topic, int(cmd.Partition), cmd.Offset, max)
		if d := int64(len(data)) - want; err == nil && len(data) > 0 {
			if d < 0 {
				c.bytes.release(-d)
			} else if d > 0 {
				c.bytes.acquireOver(d)
			}
		} else {
			c.bytes.release(want)
		}
		var re *store.RangeError
		switch {
		case err == nil && len(data) > 0:
			return 0, "", data
		case err == nil:
			// Never send `value 0` (spec §1.6, §7.6).
			return wire.StatusNotFound, "Could not find message at position " + strconv.FormatInt(cmd.Offset, 10), nil
		case errors.As(err, &re):
			// Retention or a flush moved the bounds between the two calls.
			info.Min, info.Max = re.Min, re.Max
			continue
		case errors.Is(err, store.ErrNoPartition):
			return wire.StatusNotFound, notExists(cmd.Topic, cmd.Partition), nil
		default:
			return wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), nil
		}
	}
	return wire.StatusNotFound, "Could not find message at position " + strconv.FormatInt(cmd.Offset, 10), nil
}

// outOfRange applies the 301/404 rules of spec §1.6 step 4.
func (b *Broker) outOfRange(off, min, max int64) (int, string, bool) {
	if off < min {
		return wire.StatusMoved, strconv.FormatInt(min, 10), true
	}
	if off >= max {
		if off > max && (b.cfg.Load().System.UpdateConsumerOffsets || off == math.MaxInt64) {
			return wire.StatusMoved, strconv.FormatInt(max, 10), true
		}
		return wire.StatusNotFound, "Could not find message at position " + strconv.FormatInt(off, 10), true
	}
	return 0, "", false
}

// handleOffset answers offset (spec §1.7).
func (b *Broker) handleOffset(c *conn, cmd *wire.Offset) {
	b.stats.cmdOffset.Add(1)
	b.stats.realtime(cmd.Topic, statOffset, 1)
	off, err := b.store.NearestOffset(cmd.Topic, int(cmd.Partition), cmd.Offset)
	switch {
	case err == nil:
		c.sendResult(wire.StatusOK, strconv.FormatInt(off, 10), cmd.Opaque)
	case errors.Is(err, store.ErrNoPartition):
		c.sendResult(wire.StatusNotFound, notExists(cmd.Topic, cmd.Partition), cmd.Opaque)
	default:
		c.sendResult(wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), cmd.Opaque)
	}
}

func (c *conn) txConn() TxConn { return TxConn{ID: c.id, RemoteAddr: c.remote} }

func (b *Broker) handleTransaction(c *conn, cmd *wire.Transaction) {
	h := b.txHandler()
	if h == nil {
		if cmd.Type == wire.TxEnd {
			c.noAnswer()
			return
		}
		c.sendResult(wire.StatusInternalServerError, txtNoTransaction, cmd.Opaque)
		return
	}
	res := h.Transaction(c.ctx, c.txConn(), cmd)
	if res == nil {
		c.noAnswer()
		return
	}
	if res.OK() {
		switch cmd.Type {
		case wire.TxBegin:
			if cmd.Tx.Kind == wire.TxXA {
				b.stats.txXABegin.Add(1)
			} else {
				b.stats.txBegin.Add(1)
			}
		case wire.TxCommitOnePhase, wire.TxCommitTwoPhase:
			b.stats.txCommit.Add(1)
		case wire.TxRollback:
			b.stats.txRollback.Add(1)
		}
	}
	res.Opaque = cmd.Opaque
	c.send(outFrame{head: res.AppendTo(nil)})
}

func (b *Broker) handleTxPut(c *conn, cmd *wire.Put) {
	h := b.txHandler()
	if h == nil {
		b.stats.putFailed.Add(1)
		c.sendResult(wire.StatusInternalServerError, txtNoTransaction, cmd.Opaque)
		return
	}
	res := h.Put(c.ctx, c.txConn(), cmd)
	if res == nil {
		res = wire.NewResult(wire.StatusInternalServerError, "transaction handler gave no answer", cmd.Opaque)
	}
	if !res.OK() {
		b.stats.putFailed.Add(1)
	}
	res.Opaque = cmd.Opaque
	c.send(outFrame{head: res.AppendTo(nil)})
}

// CheckPut runs the checks a put gets before it is stored (closed
// partition, accepted topic, partition range, checksum) and returns the
// answer code and text MetaQ gives when one fails, or 200 and "". A
// TxHandler uses it for transactional puts; partition -1 is not resolved.
func (b *Broker) CheckPut(cmd *wire.Put) (int, string) {
	topic, p := cmd.Topic, cmd.Partition
	if b.isClosed(topic, int(p)) {
		return wire.StatusForbidden, b.putError(topic, p, "partition["+strconv.Itoa(b.brokerID())+"-"+strconv.Itoa(int(p))+"] has been closed")
	}
	tc, ok := b.topicFor(topic)
	if !ok {
		return wire.StatusInternalServerError, b.putError(topic, p, "The server do not accept topic "+topic)
	}
	if p < 0 || int(p) >= tc.NumPartitions {
		return wire.StatusInternalServerError, b.putError(topic, p, "wrong partition "+strconv.Itoa(int(p)))
	}
	if cmd.Checksum != wire.NoChecksum && wire.Checksum(cmd.Body) != cmd.Checksum {
		return wire.StatusInternalServerError, b.putError(topic, p, txtChecksum)
	}
	return wire.StatusOK, ""
}
