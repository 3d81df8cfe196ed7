package broker

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// Texts MetaQ clients and operators see (see put, get, offset and Opaque in broker/wire/doc.go).
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
		// Plain puts take the put route from the reader (put.go): only
		// those carrying a transaction key come here.
		b.stats.cmdPut.Add(1)
		b.handleTxPut(c, cmd)
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
	case *wire.SyncUnit:
		b.handleSyncUnit(c, cmd)
	default:
		c.log.Warn("CONN: unexpected command", "cmd", cmd.Name())
		c.noAnswer()
	}
}

func (b *Broker) brokerID() int { return b.cfg.Load().System.BrokerID }

func notExists(topic string, p int32) string {
	return "The topic `" + topic + "` in partition `" + strconv.Itoa(int(p)) + "` is not exists"
}

// handleGet answers get exactly as the get notes in broker/wire/doc.go say.
func (b *Broker) handleGet(c *conn, cmd *wire.Get) {
	b.countGet(cmd)
	code, body, data, run, _ := b.get(c, cmd, false)
	if data == nil && run == nil && b.holdGet(c, cmd, code) {
		return // answered once the partition grows, or 404 after GetWait
	}
	b.answerGet(c, cmd, code, body, data, run, false)
}

// getInline answers a get on the connection's reader goroutine when that
// needs no wait: a result that reads nothing (the end of the partition, a
// moved or missing one), or records at the tail sent from the log files
// whose bytes fit the budgets now. It reports false, having answered
// nothing and kept nothing, for every other get (one the copy path must
// read, one that would wait for the byte budget, one far from the tail,
// whose index may have to be read from disk), which then goes to a worker
// as any request. A get at the tail is the common one: a consumer that
// keeps up asks for what the producers just put, and the hop to a worker
// goroutine and back was a measurable share of the broker's CPU per get.
func (b *Broker) getInline(c *conn, cmd *wire.Get) bool {
	code, body, data, run, later := b.get(c, cmd, true)
	if later {
		return false
	}
	b.countGet(cmd)
	b.stats.getsInline.Add(1)
	if data == nil && run == nil && b.holdGet(c, cmd, code) {
		return true // answered once the partition grows, or 404 after GetWait
	}
	b.answerGet(c, cmd, code, body, data, run, true)
	return true
}

func (b *Broker) countGet(cmd *wire.Get) {
	b.stats.cmdGet.Add(1)
	b.stats.realtime(cmd.Topic, statGet, 1)
}

// answerGet queues get's answer, as get returned it: at once, or with
// later (the reader's, getInline) in the reader's list of answers, which
// it queues together before it next blocks (conn.sendHeld), so that the
// writer finds the answers to one read's gets waiting together and sends
// them in one stream (conn.writeFrames).
func (b *Broker) answerGet(c *conn, cmd *wire.Get, code int, body string, data []byte, run *store.LogRun, later bool) {
	f := b.getFrame(cmd, code, body, data, run)
	if later {
		c.heldOut = append(c.heldOut, f)
		return
	}
	c.send(f)
}

// getFrame is the answer frame of get, as get returned it (answerGet).
func (b *Broker) getFrame(cmd *wire.Get, code int, body string, data []byte, run *store.LogRun) outFrame {
	var f outFrame
	switch {
	case run != nil:
		// Sent from the log files (sendfile); it holds its length of the
		// connection's budget until written, as copied data does.
		n := run.Len()
		b.stats.getsSent.Add(1)
		f = outFrame{head: wire.AppendValueHeader(make([]byte, 0, 32), n, cmd.Opaque), run: run, held: int64(n)}
	case data != nil:
		// The data holds len(data) bytes of the connection's budget until written.
		f = outFrame{head: wire.AppendValueHeader(make([]byte, 0, 32), len(data), cmd.Opaque), data: data, held: int64(len(data))}
	default:
		if code == wire.StatusNotFound || code == wire.StatusMoved || code == wire.StatusForbidden {
			b.stats.getMiss.Add(1)
			b.stats.realtime(cmd.Topic, statGetMiss, 1)
		}
		f = outFrame{head: wire.AppendResult(make([]byte, 0, 40+len(body)), code, body, cmd.Opaque)}
	}
	return f
}

// get returns the answer to a get: a code and text, or data, which holds
// len(data) bytes of the connection's byte budget, or a run of the log
// files sent without copying (see conn.zeroCopy), which holds its length.
// With inline (getInline) it never waits, reads no file and answers only
// what it can answer so; for any other get it reports later, holding
// nothing. The answers it gives are the ones it gives without inline.
func (b *Broker) get(c *conn, cmd *wire.Get, inline bool) (code int, body string, data []byte, run *store.LogRun, later bool) {
	if b.isClosed(cmd.Topic, int(cmd.Partition)) {
		return wire.StatusForbidden, "Partition[" + strconv.Itoa(b.brokerID()) + "-" + strconv.Itoa(int(cmd.Partition)) + "] has been closed", nil, nil, false
	}
	info, err := b.store.Partition(cmd.Topic, int(cmd.Partition))
	if err != nil {
		if errors.Is(err, store.ErrNoPartition) {
			return wire.StatusNotFound, notExists(cmd.Topic, cmd.Partition), nil, nil, false
		}
		if inline {
			return 0, "", nil, nil, true
		}
		return wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), nil, nil, false
	}
	if cmd.MaxSize <= 0 {
		return wire.StatusBadRequest, "Bad request,invalid max size:" + strconv.Itoa(int(cmd.MaxSize)), nil, nil, false
	}
	max := int(cmd.MaxSize)
	if mt := b.cfg.Load().System.MaxTransferSize; mt > 0 && max > mt {
		max = mt
	}
	// One answer holds at most the connection's share of the byte budget:
	// the client fetches the rest next time, as after any short answer.
	// The share holds a record of the largest message, so none is cut off
	// for good.
	if share := c.bytes.total; int64(max) > share {
		max = int(share)
	}
	// While the broker's budget is half used, answers are smaller, so that
	// many clients that do not read fill it much more slowly: at most
	// pressuredAnswer, or the first record whole if it is longer (a MetaQ
	// consumer that gets no whole record several times skips a record,
	// see get in broker/wire/doc.go).
	limit := max
	if inline && cmd.Offset >= info.Min && cmd.Offset < info.Max && info.Max-cmd.Offset > int64(max) {
		// Far from the tail: its chunks may have to be read from a
		// sealed segment's index on disk.
		return 0, "", nil, nil, true
	}
	if to, moved := b.divergedGet(cmd.Group, cmd.Topic, cmd.Partition, cmd.Offset, info.Max); moved {
		return wire.StatusMoved, strconv.FormatInt(to, 10), nil, nil, false
	}
	if b.underPressure() {
		max = min(max, pressuredAnswer)
	}
	for range 3 {
		if code, body, ok := b.outOfRange(cmd.Offset, info.Min, info.Max); ok {
			return code, body, nil, nil, false
		}
		if max == limit && c.zeroCopy {
			if run, err := b.readRunReserved(c, cmd, max, info.Max, inline); err == nil && run != nil {
				return 0, "", nil, run, false
			}
			// No run (the bytes must be copied) or an error: the copy
			// path reads again and answers either.
		}
		if inline {
			return 0, "", nil, nil, true
		}
		data, err := b.readReserved(c, cmd, max, info.Max)
		if err == nil && max < limit {
			if need := firstRecordLen(data); need > len(data) && need <= limit {
				c.bytes.release(int64(len(data)))
				data, err = b.readReserved(c, cmd, need, info.Max)
			}
		}
		var re *store.RangeError
		var de *store.DamagedError
		switch {
		case err == nil && len(data) > 0:
			return 0, "", data, nil, false
		case errors.As(err, &de):
			// Records lost to disk damage: the client moves past them, as
			// past a retention gap (get in broker/wire/doc.go 301).
			return wire.StatusMoved, strconv.FormatInt(de.Next, 10), nil, nil, false
		case err == nil:
			// Never send `value 0` (see get in broker/wire/doc.go).
			return wire.StatusNotFound, "Could not find message at position " + strconv.FormatInt(cmd.Offset, 10), nil, nil, false
		case errors.As(err, &re):
			// Retention or a flush moved the bounds between the two calls.
			info.Min, info.Max = re.Min, re.Max
			continue
		case errors.Is(err, store.ErrNoPartition):
			return wire.StatusNotFound, notExists(cmd.Topic, cmd.Partition), nil, nil, false
		default:
			return wire.StatusInternalServerError, b.putError(cmd.Topic, cmd.Partition, err.Error()), nil, nil, false
		}
	}
	return wire.StatusNotFound, "Could not find message at position " + strconv.FormatInt(cmd.Offset, 10), nil, nil, false
}

// pressuredAnswer bounds a get's answer while the broker's byte budget is
// half used: MetaQ's default fetch size.
const pressuredAnswer = 1 << 20

// underPressure reports whether half the broker's byte budget is in use.
func (b *Broker) underPressure() bool {
	return b.mem.used()*2 >= b.opts.MaxBufferedBytes
}

// firstRecordLen is the length of the record data starts with (20 bytes of
// header and its body), or 0 when data is too short to tell.
func firstRecordLen(data []byte) int {
	if len(data) < 4 {
		return 0
	}
	n := int32(binary.BigEndian.Uint32(data))
	if n < 0 {
		return 0
	}
	return 20 + int(n)
}

// readReserved reads up to max bytes of the get's partition, holding them
// in the connection's byte budget until the answer is written: it reserves
// what the read may return before reading, and keeps only what it
// returned. On error nothing stays reserved.
func (b *Broker) readReserved(c *conn, cmd *wire.Get, max int, end int64) ([]byte, error) {
	want := int64(max)
	if rest := end - cmd.Offset; rest > 0 && rest < want {
		// The run may go past the readable end up to the segment's end
		// (see Visibility in broker/wire/doc.go), but rarely by much: reserve the expected size.
		want = rest
	}
	if err := c.bytes.acquire(c.ctx, want); err != nil {
		return nil, err
	}
	data, err := b.readAnswer(cmd.Topic, cmd.Partition, cmd.Offset, max, int(want))
	if err != nil {
		data = nil
	}
	if int64(len(data)) > want {
		// The run went past the end seen before the read: answer what was
		// reserved, the client fetches the rest next time.
		data = data[:want]
	}
	c.bytes.release(want - int64(len(data)))
	return data, err
}

// readRunReserved is readReserved for an answer sent from the log files
// (store.ReadRun): nil when the bytes must be copied instead.
// With noWait it takes the bytes only if they are free now (nil when not).
func (b *Broker) readRunReserved(c *conn, cmd *wire.Get, max int, end int64, noWait bool) (*store.LogRun, error) {
	rr, ok := b.store.(RunReader)
	if !ok {
		return nil, nil
	}
	want := int64(max)
	if rest := end - cmd.Offset; rest > 0 && rest < want {
		want = rest
	}
	if noWait {
		if !c.bytes.tryAcquire(want) {
			return nil, nil
		}
	} else if err := c.bytes.acquire(c.ctx, want); err != nil {
		return nil, err
	}
	run, err := rr.ReadRun(cmd.Topic, int(cmd.Partition), cmd.Offset, max)
	if err != nil || run == nil {
		c.bytes.release(want)
		return nil, err
	}
	if int64(run.Len()) > want {
		run.Truncate(int(want))
	}
	c.bytes.release(want - int64(run.Len()))
	return run, nil
}

// readPiece is the most a get reads from the store with one call. A store
// read briefly needs about twice what it returns (its scratch buffer and
// the answer); reading a large answer piece by piece into one buffer keeps
// that extra to one piece, so the byte budget stays close to the memory
// used.
const readPiece = 4 << 20

// readAnswer reads up to max bytes at offset as a get returns them. An
// answer up to readPiece is the store's own buffer; a longer one is
// assembled from pieces, stopping early where the store does (the end of
// what is readable, or damage); expect is its likely length.
func (b *Broker) readAnswer(topic string, partition int32, offset int64, limit, expect int) ([]byte, error) {
	if limit <= readPiece {
		return b.store.Read(topic, int(partition), offset, limit)
	}
	first, err := b.store.Read(topic, int(partition), offset, readPiece)
	if err != nil || len(first) < readPiece {
		return first, err
	}
	out := make([]byte, len(first), min(limit, max(expect, 2*readPiece)))
	copy(out, first)
	for len(out) < limit {
		want := min(limit-len(out), readPiece)
		piece, err := b.store.Read(topic, int(partition), offset+int64(len(out)), want)
		if err != nil {
			// The answer so far is good: the client asks again from its end.
			break
		}
		out = append(out, piece...)
		if len(piece) < want {
			break
		}
	}
	return out, nil
}

// outOfRange applies the 301/404 rules of get (broker/wire/doc.go).
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

// handleOffset answers offset (see offset in broker/wire/doc.go).
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
