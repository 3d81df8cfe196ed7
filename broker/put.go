package broker

// The put route. Every message a client asks this broker to store takes
// it, top to bottom in this file:
//
//  1. read: a connection's reader collects the plain puts (and, on a sync
//     slave, the master's syncs) that one read brought and hands them on
//     together (conn.readLoop -> conn.routePuts), grouped by partition.
//  2. validate: checkPut, the one copy of the checks (the write gate,
//     closed partition, accepted topic, partition range, checksum),
//     answers a refusal as a *wire.Result. The read's gatePass, taken
//     before, is compared again when the batch reaches the store (step 5)
//     and when it is answered: a switchover or a fence that stopped
//     writes in between is seen (see gatePass), the batch checked at the
//     gate again when it has not reached the store yet, answered as of
//     unknown outcome when it may have.
//  3. register: the first put to a topic under a configuration pushes its
//     policy to the store and registers it in ZooKeeper (ensureTopic). That
//     may wait, so until it is done the partition's batches queue on the
//     connection (conn.waiting) and keep their order.
//  4. batch: a connection's accepted puts to one partition from one read
//     go to the store as one call (storeBatch); when the store step takes
//     several partitions at once (groupStore: the store itself, not a
//     samsa master), all of a read's batches that need no registration go
//     as one call and are answered as one frame (storeBatches), so a
//     topic of 10,000 partitions costs one hand-off per read, not one per
//     partition.
//  5. store: b.puts stores the batch without waiting for its group commit
//     and answers it, as one frame, from the store's notify when the commit
//     returns (answerBatch). b.puts is the store itself, or on a
//     synchronous-replication master the syncMaster in front of it, which
//     has the slave store every message too (sync.go). On a slave whose
//     write gateway forwards the topic (gateway.go), the batch skipped the
//     write gate at step 2 and is sent to the master here instead, and
//     answered with the master's answer.
//
// A transaction's messages were validated when they were put; at commit
// they join the route at step 3 (Broker.StoreValidated).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
)

// putReq is one message on the put route: a client's plain put, or a
// record a synchronous-replication master sent with `sync` under the id it
// chose.
type putReq struct {
	topic     string
	partition int32 // as sent; -1 asks the broker to pick one
	flag      int32
	checksum  int32 // wire.NoChecksum when absent
	id        int64 // a sync's id; 0 lets the store assign one
	opaque    int32
	body      []byte
	sync      bool
}

func putReqOf(cmd *wire.Put) putReq {
	return putReq{topic: cmd.Topic, partition: cmd.Partition, flag: cmd.Flag, checksum: cmd.Checksum, opaque: cmd.Opaque, body: cmd.Body}
}

func syncReqOf(cmd *wire.Sync) putReq {
	return putReq{topic: cmd.Topic, partition: cmd.Partition, flag: cmd.Flag, checksum: cmd.Checksum, id: cmd.MsgID, opaque: cmd.Opaque, body: cmd.Body, sync: true}
}

// maxHeldPuts bounds the puts the reader decodes before handing them on.
const maxHeldPuts = 64

// maxPutBatch bounds the puts stored with one store call.
const maxPutBatch = 256

// queueKey names a connection's batches to one partition: a struct, so
// grouping a read's puts allocates nothing per put. Syncs and plain puts
// are batched apart because their failures read differently.
type queueKey struct {
	topic     string
	partition int32 // resolved
	sync      bool
}

// routePuts is step 1: it takes the puts one read brought, in order,
// groups them by partition (in order of first appearance), validates them
// and hands each partition's batch on. The reader calls it with no lock
// held, before it can block on the socket or for an in-flight slot.
//
// The reader stores the batches itself rather than handing them to a
// goroutine: with no goroutine between the reader and the store a put
// reaches the page cache a scheduling hop sooner, and under a pipelined
// load that round trip bounds how much each group commit carries (a
// drainer goroutine per partition gave 14-18% fewer msgs/s, COMPARE.md run
// K). The in-flight slots bound the batches in the store; a full store
// queue blocks the reader, which pushes back on the client.
//
// Its cost per partition matters as much as per put: at 10,000 partitions
// a read's puts (up to maxHeldPuts) are mostly one per partition. So the
// grouping allocates no slice per partition (one slice of the puts in
// group order, cut per group), and the batches, their messages and their
// opaques are cut from one allocation each for the whole read (batchSlab).
func (c *conn) routePuts(reqs []putReq) {
	// The grouping's slices live on the stack for a read's puts (at most
	// maxHeldPuts); only a longer list spills to the heap.
	var keyBuf [maxHeldPuts]queueKey
	var groupBuf, countBuf [maxHeldPuts]int32
	var orderedBuf [maxHeldPuts]*putReq
	keys := keyBuf[:0]
	group := groupBuf[:0]  // keys[group[i]] is the key of reqs[i]
	counts := countBuf[:0] // puts per key
	var seen keyTable
	for i := range reqs {
		r := &reqs[i]
		key := queueKey{topic: r.topic, partition: c.b.resolvePartition(r), sync: r.sync}
		k := seen.find(keys, key)
		if k < 0 {
			k = len(keys)
			keys = append(keys, key)
			counts = append(counts, 0)
			seen.add(key, k)
		}
		group = append(group, int32(k))
		counts[k]++
	}
	// The puts in group order, each group in arrival order.
	var startBuf [maxHeldPuts + 1]int32
	starts := append(startBuf[:0], make([]int32, len(keys)+1)...)
	for k, n := range counts {
		starts[k+1] = starts[k] + n
	}
	next := counts // each group's next place; the counts are no longer needed
	copy(next, starts[:len(keys)])
	ordered := append(orderedBuf[:0], make([]*putReq, len(reqs))...)
	for i := range reqs {
		k := group[i]
		ordered[next[k]] = &reqs[i]
		next[k]++
	}
	slab := newBatchSlab(len(keys)+len(reqs)/maxPutBatch, len(reqs))
	pass := c.b.gate.pass() // before any of the read's puts reads the gate
	gs, _ := c.b.puts.(groupStore)
	direct := slab.direct // batches for one store call, when gs can take them
	counted := 0          // of direct, those already in c.wg
	var te *topicEntry    // of the last key's topic: a read's keys mostly share one
	for k, key := range keys {
		if te == nil || key.topic != keys[k-1].topic {
			te = c.b.topicEntry(key.topic)
		}
		g := ordered[starts[k]:starts[k+1]]
		for len(g) > 0 {
			n := min(len(g), maxPutBatch)
			held := reqBodies(g[:n])
			pp := c.b.newBatch(key, te, g[:n:n], slab, pass)
			// The refused bodies are gone; storeBatch gives back the rest.
			c.bytes.release(held - pp.size)
			switch wait := pp.needsRegistration(); {
			case gs == nil || len(pp.msgs) == 0 || pp.waitsForSites() || pp.held != nil || pp.fwd != nil:
				c.routeBatch(pp)
			case !wait && c.waiting.idle():
				// Nothing of the connection's waits (push would queue
				// nothing): counted in c.wg with the others below, one
				// atomic operation per read instead of one per batch.
				direct = appendBatch(direct, pp, len(keys)-k)
			default:
				c.wg.Add(1) // done by answerBatches or answerBatch
				if !c.waiting.push(pp.key, pp, wait) {
					direct = appendBatch(direct, pp, len(keys)-k)
					counted++
				}
			}
			g = g[n:]
		}
	}
	if len(direct) > 0 {
		// Done by answerBatches; the reader alone waits for c.wg
		// (waitRequests), after it stopped routing.
		c.wg.Add(len(direct) - counted)
		var reuse *batchSlab
		if len(direct) == slab.taken && len(direct) <= cap(slab.direct) {
			// Every batch goes with this store call, answered by one
			// frame, after which the slab is free again.
			reuse = slab
		}
		c.b.storeBatches(c, gs, direct, pass, reuse)
	}
}

// appendBatch appends pp to direct, made with room for left batches.
func appendBatch(direct []*pendingPuts, pp *pendingPuts, left int) []*pendingPuts {
	if direct == nil {
		direct = make([]*pendingPuts, 0, left)
	}
	return append(direct, pp)
}

// keyTable finds a read's queue keys by partition number: an open
// addressing table of their places in keys (plus one, 0 = empty), hashed
// by partition alone since a read's keys mostly share their topic. Past
// its size (more keys than maxHeldPuts brings) find falls back to a scan.
type keyTable struct {
	slot [keySlots]uint16
	n    int
}

const keySlots = 256 // a power of two, at least twice maxHeldPuts

func (t *keyTable) find(keys []queueKey, key queueKey) int {
	if t.n >= keySlots/2 {
		return slices.Index(keys, key)
	}
	for h := uint32(key.partition) & (keySlots - 1); ; h = (h + 1) & (keySlots - 1) {
		s := t.slot[h]
		if s == 0 {
			return -1
		}
		if keys[s-1] == key {
			return int(s - 1)
		}
	}
}

func (t *keyTable) add(key queueKey, k int) {
	if t.n >= keySlots/2 {
		return
	}
	h := uint32(key.partition) & (keySlots - 1)
	for t.slot[h] != 0 {
		h = (h + 1) & (keySlots - 1)
	}
	t.slot[h] = uint16(k + 1)
	t.n++
}

// batchSlab is where the batches of one read are cut from: one allocation
// each for the batches, their messages, their opaques and the list of
// those stored together, whatever the number of partitions the read's puts
// go to. A slab whose batches were all stored with one store call is
// reused (batchSlabs) once their answer frame went out: at 10,000
// partitions every put is a batch of its own, and a fresh slab per read
// was the largest share of what a put allocated (broker/store/BENCH.md).
type batchSlab struct {
	pps     []pendingPuts
	msgs    []store.Message
	opaques []int32
	direct  []*pendingPuts
	// all* are the whole arrays the slices above are cut from, kept to
	// reuse them.
	allPPs     []pendingPuts
	allMsgs    []store.Message
	allOpaques []int32
	taken      int // batches cut off by take
	// refs counts who still reads the batches of a slab handed to
	// storeBatches: the reader until storeBatches returns (the store may
	// answer before it does) and the answer; the last one recycles it.
	refs atomic.Int32
}

// batchSlabs holds slabs whose batches were all answered (recycle).
var batchSlabs sync.Pool

// maxPooledPuts bounds the slabs kept for reuse: a read brings at most
// maxHeldPuts puts, and a rare longer list should not pin its memory.
const maxPooledPuts = 4 * maxHeldPuts

// newBatchSlab makes room for batches batches of puts puts in all, in a
// reused slab when one is large enough.
func newBatchSlab(batches, puts int) *batchSlab {
	s, _ := batchSlabs.Get().(*batchSlab)
	if s == nil {
		s = &batchSlab{}
	}
	// A reused slab's batches as take would have made them: the messages
	// and opaques are overwritten whole by newBatch, the list by append.
	clear(s.allPPs[:s.taken])
	s.direct, s.taken = s.direct[:0], 0
	if cap(s.allPPs) < batches {
		s.allPPs = make([]pendingPuts, batches)
		s.direct = make([]*pendingPuts, 0, batches)
	}
	if cap(s.allMsgs) < puts {
		s.allMsgs = make([]store.Message, puts)
		s.allOpaques = make([]int32, puts)
	}
	s.pps, s.msgs, s.opaques = s.allPPs[:batches], s.allMsgs[:puts], s.allOpaques[:puts]
	return s
}

// take cuts a batch with room for n puts off the slab (nil: allocate).
func (s *batchSlab) take(n int) *pendingPuts {
	if s == nil || len(s.pps) == 0 || len(s.msgs) < n {
		return &pendingPuts{msgs: make([]store.Message, 0, n), opaques: make([]int32, 0, n)}
	}
	pp := &s.pps[0]
	s.pps = s.pps[1:]
	pp.msgs, s.msgs = s.msgs[:0:n], s.msgs[n:]
	pp.opaques, s.opaques = s.opaques[:0:n], s.opaques[n:]
	s.taken++
	return pp
}

// release drops one reference of storeBatches' (see refs) and recycles the
// slab after the last one.
func (s *batchSlab) release() {
	if s != nil && s.refs.Add(-1) == 0 {
		s.recycle()
	}
}

// recycle gives the slab back for another read once nothing refers to its
// batches: the answer frame of all of them went out, no shutdown can still
// be answering them, and the reader is done with them (release). The
// batches are zeroed by the reader that takes the slab next (newBatchSlab),
// not here, where the store's writer goroutine may be the caller.
func (s *batchSlab) recycle() {
	if cap(s.allMsgs) > maxPooledPuts {
		return
	}
	s.pps, s.msgs, s.opaques = nil, nil, nil
	batchSlabs.Put(s)
}

// reqBodies is the bytes the bodies of reqs hold in the connection's byte
// budget (see conn.readLoop).
func reqBodies(reqs []*putReq) int64 {
	var n int64
	for _, r := range reqs {
		n += int64(len(r.body))
	}
	return n
}

// resolvePartition returns the put's partition, choosing one at random
// among the topic's partitions for -1 (MetaQ's producer sends -1 to let
// the broker pick).
func (b *Broker) resolvePartition(r *putReq) int32 {
	if r.partition != -1 || r.sync {
		return r.partition
	}
	te := b.topicEntry(r.topic)
	n := b.cfg.Load().System.NumPartitions
	if te.ok {
		n = te.tc.NumPartitions
	}
	if n <= 0 {
		return -1
	}
	return int32(rand.IntN(n))
}

// pendingPuts is one batch of a connection's puts to one partition, in
// order: the refused ones already answered in out, the accepted ones as
// msgs for one store call.
type pendingPuts struct {
	key     queueKey
	te      *topicEntry
	n       int    // puts the batch answers
	out     []byte // answers of the refused puts
	msgs    []store.Message
	opaques []int32 // of msgs
	size    int64   // body bytes of msgs
	// answered is set by whoever sends the batch's answers: the store's
	// notify when the commit returns, or a shutdown that stops waiting.
	answered atomic.Bool
	// held is the Hold in effect when the batch was validated: its puts
	// skipped the write gate and go to it instead of the store (hold.go).
	held *Hold
	// fwd is the gateway that forwards the batch to the master, when this
	// broker is a slave and the topic is forwarded (gateway.go): its puts
	// skipped the write gate too.
	fwd *Gateway
	// fwdHeld: the batch, handed to fwd, holds n of the connection's
	// fwdSlots instead of its slots, and size bytes of its byte budget
	// (the gateway's copies of the bodies) until its answer is written.
	fwdHeld bool
	// pass is the batch's passage through the write gate, taken before
	// its puts read the gate (see gatePass).
	pass gatePass
	// handedOff is set once the store took the batch with no refusal
	// since pass (for a batch stored with others by storeBatches, on the
	// first of them, for all): its answer need not ask again.
	handedOff atomic.Bool
}

// newBatch is step 2 for a batch: it validates each put on its own,
// answering a refusal at once, and keeps the accepted ones in order.
//
// The batch is cut from slab (nil: allocated on its own). te is
// b.topicEntry(key.topic), looked up by the caller once for a read's
// batches of the same topic. pass was taken before the gate is read here.
func (b *Broker) newBatch(key queueKey, te *topicEntry, reqs []*putReq, slab *batchSlab, pass gatePass) *pendingPuts {
	pp := slab.take(len(reqs))
	pp.key, pp.te, pp.n, pp.pass = key, te, len(reqs), pass
	if !key.sync {
		pp.held = b.holding() // decided once for the batch
		if pp.held == nil {
			pp.fwd = b.forwarding(te)
		}
	}
	for _, r := range reqs {
		b.stats.cmdPut.Add(1)
		ref := b.writeRefusal()
		if ref != nil && pp.held == nil && pp.fwd == nil && !key.sync {
			// A handover holds puts before it refuses writes: a refusal
			// seen now means the Hold (if the handover still runs) is
			// in place, though it was not when the batch began.
			pp.held = b.holding()
		}
		if res := b.checkPutWith(r, key.partition, te, pp.held != nil || pp.fwd != nil, ref); res != nil {
			b.stats.putFailed.Add(1)
			b.stats.realtime(r.topic, statPutFailed, 1)
			if pp.out == nil {
				pp.out = make([]byte, 0, 48*len(reqs)) // room for every answer
			}
			pp.out = res.AppendTo(pp.out)
			freeBody(r.body)
			continue
		}
		m := store.Message{ID: r.id, Flag: r.flag, Body: r.body}
		if r.checksum != wire.NoChecksum {
			// checkPut verified it: the same CRC the record carries.
			m.Checksum, m.ChecksumSet = uint32(r.checksum), true
		}
		pp.msgs = append(pp.msgs, m)
		pp.opaques = append(pp.opaques, r.opaque)
		pp.size += int64(len(r.body))
	}
	return pp
}

// checkPut is the put route's validation, the one copy of the checks a
// message gets before it is stored, resolved to partition p: the write
// gate (client writes only, see Refusal), closed partitions, accepted
// topic, partition range and checksum. It returns the refusal with MetaQ's code and text, or
// nil.
func (b *Broker) checkPut(r *putReq, p int32, te *topicEntry) *wire.Result {
	return b.checkPutWith(r, p, te, false, b.writeRefusal())
}

// checkPutWith is checkPut with the write gate's refusal read by the caller
// (nil: writes allowed), so that the gate is read once per put, for a put
// that a Hold or the gateway takes when held: the write gate and
// minSyncSites are then the new master's to check.
func (b *Broker) checkPutWith(r *putReq, p int32, te *topicEntry, held bool, ref *Refusal) *wire.Result {
	topic := r.topic
	if ref != nil && !r.sync && !held {
		return wire.NewResult(ref.code(), b.putError(topic, p, ref.Reason), r.opaque)
	}
	if b.isClosed(topic, int(r.partition)) {
		closed := "artition[" + strconv.Itoa(b.brokerID()) + "-" + strconv.Itoa(int(r.partition)) + "] has been closed"
		var body string
		switch {
		case r.sync:
			body = b.putError(topic, r.partition, "P"+closed)
		case b.opts.SyncSlave != "":
			// A MetaQ samsa master answers the bare text, capitalised.
			body = "P" + closed
		default:
			body = b.putError(topic, r.partition, "p"+closed)
		}
		return wire.NewResult(wire.StatusForbidden, body, r.opaque)
	}
	n := 0
	switch {
	case te.ok:
		n = te.tc.NumPartitions
	case r.sync && topic == slaveStatusTopic:
		n = 1 // the master's health probe
	default:
		return wire.NewResult(wire.StatusInternalServerError, b.putError(topic, p, "The server do not accept topic "+topic), r.opaque)
	}
	if p < 0 || int(p) >= n {
		return wire.NewResult(wire.StatusInternalServerError, b.putError(topic, p, "wrong partition "+strconv.Itoa(int(p))), r.opaque)
	}
	if res := b.checkSyncSites(r, p, te); res != nil && !held {
		return res
	}
	if r.checksum != wire.NoChecksum && wire.Checksum(r.body) != r.checksum {
		b.log.Warn("TOPIC("+topic+"): put refused, checksum mismatch", "partition", p, "bytes", len(r.body), "checksum", r.checksum)
		return wire.NewResult(wire.StatusInternalServerError, b.putError(topic, p, txtChecksum), r.opaque)
	}
	if max := b.cfg.Load().System.MaxTransferSize; te.ok && max > 0 && len(r.body) > max-20 {
		// Such a message can never be fetched by a Java consumer, whose
		// fetch buffer is maxTransferSize including the 20-byte header.
		// Said once per topic and configuration, not per message.
		if te.oversizeWarned.CompareAndSwap(false, true) {
			b.log.Warn("TOPIC("+topic+"): message larger than maxTransferSize-20 cannot be fetched by MetaQ consumers", "bytes", len(r.body), "maxTransferSize", max)
		}
	}
	return nil
}

// CheckPut runs checkPut for a put that carries a transaction key, at its
// own partition (-1 is not resolved): the TxHandler calls it before it
// keeps the message for the commit.
func (b *Broker) CheckPut(cmd *wire.Put) *wire.Result {
	r := putReqOf(cmd)
	return b.checkPut(&r, cmd.Partition, b.topicEntry(cmd.Topic))
}

// needsRegistration reports whether a batch must wait for step 3: its
// topic is accepted and not yet registered under this configuration.
func (pp *pendingPuts) needsRegistration() bool { return pp.te.ok && !pp.te.ready.Load() }

// waitsForSites says the batch is answered only once slave sites hold it
// (minSyncSites). It takes a store call and an answer frame of its own, so
// that the other batches of the same read (a Java producer sends every
// topic over one connection) are not held a WAN round trip behind it.
func (pp *pendingPuts) waitsForSites() bool { return pp.te.ok && pp.te.tc.MinSyncSites > 0 }

// routeBatch sends a validated batch on to steps 3 to 5: straight to the
// store when its topic is registered and no earlier batch of the partition
// is still waiting, otherwise behind them on the connection's queue for
// the partition, whose goroutine registers the topic first. A slow
// registration holds up neither the connection's other partitions nor its
// reader.
func (c *conn) routeBatch(pp *pendingPuts) {
	c.wg.Add(1) // done by answerBatch
	if len(pp.msgs) == 0 {
		c.b.answerBatch(c, pp, nil, nil)
		return
	}
	if pp.held != nil || pp.fwd != nil {
		// Not registered in ZooKeeper here: the (new) master has it.
		c.b.storeBatch(c, pp)
		return
	}
	if !c.waiting.push(pp.key, pp, pp.needsRegistration()) {
		c.b.storeBatch(c, pp)
	}
}

// registerAndStore is steps 3 to 5 for batches that waited on the
// connection's queue.
func (c *conn) registerAndStore(_ queueKey, pps []*pendingPuts) {
	for _, pp := range pps {
		c.b.ensureTopic(c.b.ctx, pp.key.topic, pp.te)
		c.b.storeBatch(c, pp)
	}
}

// batchStore is step 5: it stores one partition's batch and calls done
// exactly once with the outcome, quickly and without blocking, possibly
// before it returns. It keeps no msgs[i].Body after it returns. On
// failure err is either one error for the whole batch, or messageErrors
// with one entry per message (the stored ones nil, their results in as).
type batchStore interface {
	storeBatch(ctx context.Context, topic string, partition int, msgs []store.Message, done func(as []store.Appended, err error))
}

// localStore is the batchStore of a broker without a synchronous slave:
// the store itself, which answers from its writer goroutine when the
// batch's group commit returns.
type localStore struct{ s Store }

func (l localStore) storeBatch(ctx context.Context, topic string, partition int, msgs []store.Message, done func([]store.Appended, error)) {
	l.s.AppendAsync(ctx, topic, partition, msgs, done)
}

// groupStore is a batchStore that also takes the batches of several
// partitions with one call and answers them with one done: with a read's
// puts spread over many partitions (a topic of 10,000), the broker then
// pays one store hand-off and one answer frame per read, not one per
// partition. The put route uses it when b.puts has it.
type groupStore interface {
	storeGroup(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome))
}

// manyAppender is a Store that queues several partitions' appends at once
// (store.Store.AppendManyAsync).
type manyAppender interface {
	AppendManyAsync(ctx context.Context, appends []store.PartitionAppend, notify func([]store.AppendOutcome))
}

// unitStore is a groupStore that also stores the batches of several
// partitions as one unit, a transaction's at its commit: one log write,
// durable all or none, which replication ships in one piece
// (store.Store.AppendUnitAsync), and on topics with minSyncSites one wait
// for the slave sites covering all of it.
type unitStore interface {
	storeUnit(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome))
}

// unitAppender is a Store that appends several partitions as one unit
// (store.Store.AppendUnitAsync).
type unitAppender interface {
	AppendUnitAsync(ctx context.Context, appends []store.PartitionAppend, notify func([]store.AppendOutcome))
}

func (l localStore) storeUnit(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	if u, ok := l.s.(unitAppender); ok {
		u.AppendUnitAsync(ctx, appends, done)
		return
	}
	l.storeGroup(ctx, appends, done)
}

func (l localStore) storeGroup(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	if m, ok := l.s.(manyAppender); ok {
		m.AppendManyAsync(ctx, appends, done)
		return
	}
	// A Store without it: one AppendAsync each, done after the last.
	outs := make([]store.AppendOutcome, len(appends))
	var left atomic.Int32
	left.Store(int32(len(appends)))
	for i, a := range appends {
		l.s.AppendAsync(ctx, a.Topic, a.Partition, a.Msgs, func(as []store.Appended, err error) {
			outs[i] = store.AppendOutcome{Appended: as, Err: err}
			if left.Add(-1) == 0 {
				done(outs)
			}
		})
	}
}

// messageErrors fails some messages of a batch: one entry per message,
// nil for those stored.
type messageErrors []error

func (e messageErrors) Error() string {
	var parts []string
	for i, err := range e {
		if err != nil {
			parts = append(parts, fmt.Sprintf("message %d: %v", i, err))
		}
	}
	return strings.Join(parts, "; ")
}

// storeBatch hands a batch to the store without waiting for its group
// commit, so the connection's next batch can join the same commit.
func (b *Broker) storeBatch(c *conn, pp *pendingPuts) {
	c.storedMu.Lock()
	c.stored[pp] = nil // before the store can answer it
	c.storedMu.Unlock()
	done := func(as []store.Appended, err error) { b.answerBatch(c, pp, as, err) }
	var refused *Refusal
	if pp.held == nil && pp.fwd == nil && !pp.key.sync && b.gate.stoppedSince(pp.pass) {
		// Writes were stopped since the batch passed the gate (while
		// its topic registered, or its read was routed): ask again.
		refused = b.regate(pp)
	}
	switch {
	case refused != nil:
		done(nil, &heldError{code: refused.code(), text: refused.Reason})
	case pp.held != nil:
		pp.held.add(pp.key.topic, int(pp.key.partition), pp.msgs, func() bool { return c.ctx.Err() != nil }, done)
	case pp.fwd != nil:
		pp.fwdHeld = c.swapForForwarding(pp.n)
		pp.fwd.add(pp.key.topic, int(pp.key.partition), pp.msgs, func() bool { return c.ctx.Err() != nil }, done)
	default:
		// The broker's context, not the connection's: puts that reached
		// the store complete even if their client goes away.
		b.puts.storeBatch(b.ctx, pp.key.topic, int(pp.key.partition), pp.msgs, done)
		if !pp.key.sync && b.storesAtOnce(pp.te) && !b.gate.stoppedSince(pp.pass) {
			pp.handedOff.Store(true)
		}
	}
	// The store keeps no body: the buffers can take the next bodies, and
	// their bytes go back to the connection's byte budget.
	for i := range pp.msgs {
		freeBody(pp.msgs[i].Body)
		pp.msgs[i].Body = nil
	}
	if !pp.fwdHeld {
		c.bytes.release(pp.size)
	}
}

// swapForForwarding makes n requests the reader read count against the
// connection's fwdSlots instead of its slots (see conn.fwdSlots), so that
// forwarded puts waiting a WAN round trip do not stop the reader at
// MaxInFlight. It waits for fwdSlots to have room, and reports false
// (nothing swapped) when the connection ends first. The reader calls it.
func (c *conn) swapForForwarding(n int) bool {
	for k := range n {
		select {
		case c.fwdSlots <- struct{}{}:
		case <-c.ctx.Done():
			for range k {
				<-c.fwdSlots
			}
			return false
		}
	}
	c.releaseSlots(n)
	return true
}

// storeBatches is storeBatch for the batches of several partitions that
// one read brought: one store call, answered with one frame (answerBatches).
// pass is the read's (every batch's) passage through the gate. slab, when
// not nil, holds pps and nothing else: it is recycled once they are
// answered through the store's notify.
//
// The batches are listed in c.stored once, under the first, not once each.
func (b *Broker) storeBatches(c *conn, gs groupStore, pps []*pendingPuts, pass gatePass, slab *batchSlab) {
	if b.gate.stoppedSince(pass) {
		// Not recycled: each batch is answered on its own.
		// Writes were stopped since the read's puts passed the gate:
		// each batch asks again, and is stored (or not) on its own.
		for _, pp := range pps {
			b.storeBatch(c, pp)
		}
		return
	}
	if slab != nil {
		slab.refs.Store(2) // this call's and the answer's
		defer slab.release()
	}
	c.storedMu.Lock()
	c.stored[pps[0]] = pps // before the store can answer them
	c.storedMu.Unlock()
	// The connection's reader alone calls this: its list of appends is
	// reused (the store step keeps none of it after the call).
	appends := slices.Grow(c.appends[:0], len(pps))[:len(pps)]
	for i, pp := range pps {
		// Field by field: a literal is copied from the stack in moves the
		// CPU cannot forward from the stores that built it, per partition.
		a := &appends[i]
		a.Topic, a.Partition, a.Msgs = pp.key.topic, int(pp.key.partition), pp.msgs
	}
	gs.storeGroup(b.ctx, appends, func(outs []store.AppendOutcome) {
		b.answerBatches(c, pps, outs, slab)
	})
	if !b.gate.stoppedSince(pass) && !b.awaitingSites() {
		// Taken at once (no batch of a topic with minSyncSites waits
		// for its sites: see storesAtOnce) before any refusal.
		pps[0].handedOff.Store(true)
	}
	clear(appends) // they point at the batches' messages
	c.appends = appends[:0]
	var size int64
	for _, pp := range pps {
		for i := range pp.msgs {
			freeBody(pp.msgs[i].Body)
			pp.msgs[i].Body = nil
		}
		size += pp.size
	}
	c.bytes.release(size)
}

// answerBatches is answerBatch for the batches of one storeBatches, with
// their outcomes in order: their answers go out as one frame. The store's
// notify and a shutdown that stops waiting for the store
// (conn.waitRequests) may both try; the first batch's answered flag stands
// for all of them (one atomic operation per read, not per partition), and
// the loser returns. slab, when not nil, is where pps were cut from, given
// back once their frame went out (sendBatchesAnswer).
func (b *Broker) answerBatches(c *conn, pps []*pendingPuts, outs []store.AppendOutcome, slab *batchSlab) {
	if !pps[0].answered.CompareAndSwap(false, true) {
		return
	}
	size := 0
	for _, pp := range pps {
		size += len(pp.out) + storedAnswerSize*len(pp.opaques)
	}
	c.storedMu.Lock()
	delete(c.stored, pps[0])
	c.storedMu.Unlock()
	ac := &ackCheck{b: b, lead: pps[0]}
	stored := 0 // client puts stored here, whose answer asks the write check
	for i, pp := range pps {
		if len(pp.opaques) > 0 && i < len(outs) && pp.needsAck(outs[i].Appended, outs[i].Err) {
			stored += len(pp.opaques)
		}
	}
	if stored > 0 && b.ackWaits(ac) {
		outs := slices.Clone(outs)
		if b.holdAck(ac, stored, b.batchesCovered(pps, outs), func(ac *ackCheck) { b.sendBatchesAnswer(c, pps, outs, size, ac, slab) }) {
			return
		}
	} else if stored > 0 && ac.writesStopped() && b.holding() != nil {
		outs := slices.Clone(outs)
		if b.handoverAck(ac, stored, b.batchesCovered(pps, outs), func(ac *ackCheck) { b.sendBatchesAnswer(c, pps, outs, size, ac, slab) }) {
			return
		}
	}
	b.sendBatchesAnswer(c, pps, outs, size, ac, slab)
}

// batchesCovered reports, for a handed-over end, whether every client put
// of pps stored here (outs: the store's outcomes) lies in the log below it.
func (b *Broker) batchesCovered(pps []*pendingPuts, outs []store.AppendOutcome) func(end int64) bool {
	return func(end int64) bool {
		for i, pp := range pps {
			if len(pp.opaques) > 0 && i < len(outs) && pp.needsAck(outs[i].Appended, outs[i].Err) &&
				!b.storedBelow(end, pp.key.topic, int(pp.key.partition), outs[i].Appended, outs[i].Err) {
				return false
			}
		}
		return true
	}
}

// sendBatchesAnswer is answerBatches' answer frame (size: room for it),
// sent once answered is set, with ac's acknowledgement check. It recycles
// slab (when not nil) after the last read of pps.
func (b *Broker) sendBatchesAnswer(c *conn, pps []*pendingPuts, outs []store.AppendOutcome, size int, ac *ackCheck, slab *batchSlab) {
	n := 0
	out := make([]byte, 0, size)
	type topicTally struct {
		topic string
		putTally
	}
	var tallies []topicTally // a read's puts are mostly to one topic
	for i, pp := range pps {
		out = append(out, pp.out...)
		if len(pp.opaques) > 0 {
			var o store.AppendOutcome
			if i < len(outs) {
				o = outs[i]
			} else {
				o.Err = fmt.Errorf("store returned %d outcomes for %d batches", len(outs), len(pps))
			}
			var t putTally
			out, t = b.answerStored(out, pp, o.Appended, o.Err, ac)
			k := slices.IndexFunc(tallies, func(x topicTally) bool { return x.topic == pp.key.topic })
			if k < 0 {
				k = len(tallies)
				tallies = append(tallies, topicTally{topic: pp.key.topic})
			}
			tallies[k].stored += t.stored
			tallies[k].failed += t.failed
			tallies[k].size += t.size
		}
		n += pp.n
	}
	for _, t := range tallies {
		b.countPuts(t.topic, t.putTally)
	}
	if n > 0 {
		c.send(outFrame{head: out, n: n})
	}
	batches := len(pps)
	// A shutdown that stops waiting for the store (conn.waitRequests)
	// takes the batches from c.stored once the broker's context is done,
	// and still reads them (answerBatches, which loses to this answer).
	// answerBatches removed them from c.stored under its lock before
	// this: a shutdown that took them had the context done before, so a
	// context still alive here means no one else holds them.
	if b.ctx.Err() == nil {
		slab.release()
	}
	c.wg.Add(-batches)
}

// answerBatch sends the answers of a whole batch as one frame (one writer
// hand-off), with the store's result as, err, once: the store's notify and
// a shutdown that stops waiting for the store (conn.waitRequests) may both
// try. It never blocks (see conn.send), as the store's notify must not.
func (b *Broker) answerBatch(c *conn, pp *pendingPuts, as []store.Appended, err error) {
	if !pp.answered.CompareAndSwap(false, true) {
		return
	}
	c.storedMu.Lock()
	delete(c.stored, pp)
	c.storedMu.Unlock()
	ac := &ackCheck{b: b, lead: pp}
	if len(pp.opaques) > 0 && pp.needsAck(as, err) {
		// The store's slice is not kept past this call: a later answer
		// takes a copy.
		if b.ackWaits(ac) {
			as := slices.Clone(as)
			covered := func(end int64) bool { return b.storedBelow(end, pp.key.topic, int(pp.key.partition), as, err) }
			if b.holdAck(ac, len(pp.opaques), covered, func(ac *ackCheck) { b.sendBatchAnswer(c, pp, as, err, ac) }) {
				return
			}
		} else if ac.writesStopped() && b.holding() != nil {
			as := slices.Clone(as)
			if b.handoverAck(ac, len(pp.opaques), func(end int64) bool {
				return b.storedBelow(end, pp.key.topic, int(pp.key.partition), as, err)
			}, func(ac *ackCheck) { b.sendBatchAnswer(c, pp, as, err, ac) }) {
				return
			}
		}
	}
	b.sendBatchAnswer(c, pp, as, err, ac)
}

// sendBatchAnswer is answerBatch's answer frame, sent once answered is
// set, with ac's acknowledgement check.
func (b *Broker) sendBatchAnswer(c *conn, pp *pendingPuts, as []store.Appended, err error, ac *ackCheck) {
	out := pp.out
	if out == nil {
		out = make([]byte, 0, storedAnswerSize*pp.n)
	}
	if len(pp.opaques) > 0 {
		var t putTally
		out, t = b.answerStored(out, pp, as, err, ac)
		b.countPuts(pp.key.topic, t)
	}
	if pp.fwdHeld {
		c.sendForwarded(outFrame{head: out, n: pp.n, fwd: true, held: pp.size})
	} else {
		c.send(outFrame{head: out, n: pp.n})
	}
	c.wg.Done()
}

// needsAck reports whether answering the batch's puts with the store's
// outcome (as, err) asks the write check (checkAck): some were stored
// here, as client puts.
func (pp *pendingPuts) needsAck(as []store.Appended, err error) bool {
	if pp.key.sync || pp.held != nil || pp.fwd != nil {
		return false
	}
	n := len(pp.opaques)
	if err == nil {
		return len(as) == n
	}
	return perMessageErrors(err, n, len(as)) != nil
}

// ackWaits reports whether the answer of client puts stored here may wait
// in a Hold (holdAck): the write check refuses to acknowledge them, and a
// Hold is in effect (a master confirming its generation again: the
// refusal started it). Writes stopped since the puts passed the gate (a
// switchover) are not its case: see handoverAck. The check's answer stays
// in ac: answering at once asks nothing again.
func (b *Broker) ackWaits(ac *ackCheck) bool {
	return !ac.writesStopped() && ac.refusal() != nil && b.holding() != nil
}

// holdAck keeps the answer frame of n client puts stored here that the
// write check refused to acknowledge (ackWaits) in the Local Hold in
// effect (Hold.awaitAck), which has send called, once, with the check
// asked when it ends or its bound passes. It reports whether it kept the
// answer; when not, ac holds the check's answer for send's caller.
func (b *Broker) holdAck(ac *ackCheck, n int, covered func(end int64) bool, send func(ac *ackCheck)) bool {
	h := b.holding()
	if h == nil {
		return false
	}
	lead := ac.lead
	if h.awaitAck(n, covered, func(ref *Refusal) {
		send(&ackCheck{b: b, lead: lead, asked: true, ref: ref, gated: true})
	}) {
		return true
	}
	if h.opts.Local {
		// The confirmation ended that Hold between the check and now:
		// the check is asked again when the puts are answered.
		ac.asked, ac.ref = false, nil
	}
	return false
}

// handoverAck keeps the answer frame of n client puts stored here whose
// client writes were stopped on their way to the store (ac.writesStopped:
// a switchover's refusal came between their gate check and their hand-off,
// so they may lie past the log end it hands over) in the handover's Hold
// in effect (Hold.awaitHandover), and reports whether it did. send is
// called once, later: acknowledged when the new master took over holding
// the log up to an end that covers every record (covered), else with the
// 500 checkAck gives such puts. Acknowledging asks no write check: the
// records are at the new master, which confirmed its generation; this
// master's own acknowledgement rule (a paused master's, checkAck) applies
// to puts whose writes were not stopped, and stays as it is.
func (b *Broker) handoverAck(ac *ackCheck, n int, covered func(end int64) bool, send func(ac *ackCheck)) bool {
	if !ac.writesStopped() {
		return false
	}
	h := b.holding()
	if h == nil {
		return false
	}
	lead := ac.lead
	return h.awaitHandover(n, func(end int64, ok bool) bool {
		ack := ok && covered(end)
		send(&ackCheck{b: b, lead: lead, gated: true, stopped: !ack, asked: ack})
		return ack
	})
}

// logPositioner is a Store that says where a partition's record lies in
// its shared log (store.Store.LogPosition).
type logPositioner interface {
	LogPosition(topic string, partition int, offset int64) (int64, error)
}

// storedBelow reports whether every record of a batch stored here (as, err:
// the store's outcome, err nil or one error per message) lies in the log
// below end, a durable end: a record's entry that starts below it ends at
// or below it. A record at or past its partition's durable end is placed
// at the log's durable end, never below end. False when the store cannot
// say.
func (b *Broker) storedBelow(end int64, topic string, partition int, as []store.Appended, err error) bool {
	lp, ok := b.store.(logPositioner)
	if !ok {
		return false
	}
	each := perMessageErrors(err, len(as), len(as))
	if err != nil && each == nil {
		return false
	}
	for i, a := range as {
		if each != nil && each[i] != nil {
			continue // not stored: answered with its error
		}
		pos, err := lp.LogPosition(topic, partition, a.Offset)
		if err != nil || pos >= end {
			return false
		}
	}
	return true
}

// storedAnswerSize is room for one stored put's answer: `result 200 <len>
// <opaque>\r\n<id> <partition> <offset>` is 50-70 bytes (a 48-byte guess
// made every answer frame grow, and be copied, once).
const storedAnswerSize = 72

// answerStored appends the answers of a batch's stored puts to out:
// `<id> <partition> <offset>` for each stored one.
func (b *Broker) answerStored(out []byte, pp *pendingPuts, as []store.Appended, err error, ac *ackCheck) ([]byte, putTally) {
	p := pp.key.partition
	n := len(pp.opaques)
	if err == nil && len(as) != n {
		err = fmt.Errorf("store returned %d results for %d messages", len(as), n)
	}
	// Looked for only on failure: errors.As takes the address of each,
	// which would otherwise cost a heap allocation per batch (per put at
	// 10,000 partitions).
	var each messageErrors
	if err != nil {
		each = perMessageErrors(err, n, len(as))
	}
	if err == nil || each != nil {
		err = b.checkAck(pp, err, ac)
		if _, ok := err.(*heldError); ok {
			each = nil
		}
	}
	var scratch [64]byte
	var stored, size int64
	for i, opaque := range pp.opaques {
		failed := err
		if err != nil && each != nil {
			failed = each[i]
		}
		if failed != nil {
			var he *heldError
			switch {
			case errors.As(failed, &he) && he.raw:
				out = wire.AppendResult(out, he.code, he.text, opaque)
			case errors.As(failed, &he):
				out = wire.AppendResult(out, he.code, b.putError(pp.key.topic, p, he.text), opaque)
			default:
				out = wire.AppendResult(out, wire.StatusInternalServerError, b.storeFailure(pp, failed), opaque)
			}
			continue
		}
		ans := strconv.AppendInt(scratch[:0], as[i].ID, 10)
		ans = append(ans, ' ')
		ans = strconv.AppendInt(ans, int64(p), 10)
		ans = append(ans, ' ')
		ans = strconv.AppendInt(ans, as[i].Offset, 10)
		if pp.fwd != nil && as[i].Offset == localOffset {
			// In the gateway's outbox, not at the master yet.
			ans = append(ans, ' ')
			ans = append(ans, acceptedLocally...)
		}
		out = wire.AppendResult(out, wire.StatusOK, ans, opaque)
		stored++
	}
	if stored > 0 {
		// The bodies are gone by now: a batch stored in part (a
		// synchronous slave failing some) counts an average size.
		size = pp.size * stored / int64(n)
	}
	return out, putTally{stored: stored, failed: int64(n) - stored, size: size}
}

// perMessageErrors returns err's one error per message when it has them
// for all n messages (and the store returned n results), else nil.
func perMessageErrors(err error, n, results int) messageErrors {
	var each messageErrors
	if !errors.As(err, &each) || len(each) != n || results != n {
		return nil
	}
	return each
}

// checkAck asks the write check (SetWriteCheck) again when a batch of
// client puts is answered: a master that was paused (SIGSTOP, a frozen VM)
// between storing a put and answering it may have been replaced
// meanwhile, so what it stored is not known to survive. Such a batch is
// answered 500 saying so instead of acknowledged; err is returned
// otherwise. While a Local Hold is in effect (the master confirms its
// generation again) the answer first waits in it (holdAck), and this
// check is the one asked when it ends or its bound passes. ac asks the
// check once for all the batches of one answer frame (see ackCheck).
func (b *Broker) checkAck(pp *pendingPuts, err error, ac *ackCheck) error {
	if pp.key.sync || pp.held != nil || pp.fwd != nil {
		// Not stored here: the (new) master's answer, which it checked.
		return err
	}
	if ac.writesStopped() {
		if !ac.logged {
			ac.logged = true
			b.log.Warn("TOPIC("+pp.key.topic+"): stored puts not acknowledged: client writes were stopped while they were on their way to the store", "partition", pp.key.partition,
				"puts", len(pp.opaques), "reason", b.refusalText())
		}
		return &heldError{code: wire.StatusInternalServerError, text: "stored here, but not acknowledged: client writes were stopped (" +
			strings.TrimSuffix(b.refusalText(), "; retry") + ") while it was on its way to the store; whether the record survives (a new master may start from a log that ends before it) is unknown"}
	}
	ref := ac.refusal()
	if ref == nil {
		return err
	}
	if !ac.logged {
		ac.logged = true
		b.log.Warn("TOPIC("+pp.key.topic+"): stored puts not acknowledged: this broker cannot confirm it still is the master", "partition", pp.key.partition,
			"puts", len(pp.opaques), "reason", ref.Reason)
	}
	return notAcknowledged(ref)
}

// notAcknowledged is the answer of puts stored here while the write check
// refuses writes (ref): whether they survive is unknown.
func notAcknowledged(ref *Refusal) *heldError {
	return &heldError{code: wire.StatusInternalServerError, text: "stored here, but not acknowledged: " + strings.TrimSuffix(ref.Reason, "; retry") +
		"; whether the record survives (a new master may have taken over) is unknown"}
}

// ackCheck is the write check's answer for the batches of one answer
// frame, asked when the first of them needs it: they are answered at the
// same moment, and at 10,000 partitions a frame answers one batch per put
// (the check reads the clock and the site's role each time). A refusal is
// logged once per frame, not once per batch. The frame's batches share
// one gatePass (their read's), held with the hand-off's outcome by lead.
type ackCheck struct {
	b       *Broker
	lead    *pendingPuts
	asked   bool
	ref     *Refusal
	logged  bool
	gated   bool // stopped is known
	stopped bool
}

// writesStopped reports whether client writes began to be refused after
// the frame's batches passed the gate and possibly before the store took
// them (see gatePass): not when none was refused by now, nor when the
// store took them (handedOff) before any was.
func (a *ackCheck) writesStopped() bool {
	if !a.gated {
		a.gated = true
		a.stopped = a.b.gate.stoppedSince(a.lead.pass) && !a.lead.handedOff.Load()
	}
	return a.stopped
}

func (a *ackCheck) refusal() *Refusal {
	if !a.asked {
		a.asked = true
		if c := a.b.gate.check.Load(); c != nil {
			a.ref = (*c)()
		}
	}
	return a.ref
}

// putTally is what answered puts add to a topic's statistics.
type putTally struct{ stored, failed, size int64 }

// countPuts adds t to topic's statistics: once per answer frame, not per
// partition batch, since it takes the statistics' lock on the store's
// writer goroutine.
func (b *Broker) countPuts(topic string, t putTally) {
	if t.failed > 0 {
		b.stats.putFailed.Add(t.failed)
		b.stats.realtimeN(topic, statPutFailed, t.failed, t.failed)
	}
	if t.stored > 0 {
		b.stats.realtimeN(topic, statPut, t.stored, t.stored)
		b.stats.realtimeN(topic, statMessageSize, t.stored, t.size)
	}
}

// storeFailure is the answer text of a message the store step did not
// store: a synchronous slave's own text, or MetaQ's put failure.
func (b *Broker) storeFailure(pp *pendingPuts, err error) string {
	var se *slaveError
	if errors.As(err, &se) {
		return se.text
	}
	topic, p := pp.key.topic, pp.key.partition
	b.logAppendError(topic, p, err)
	if errors.Is(err, store.ErrNoSpace) {
		b.diskFull()
	}
	if pp.key.sync {
		return b.putError(topic, p, err.Error())
	}
	return b.putError(topic, p, appendDetail(err))
}

// appendDetail is the reason a put answer gives for a store error the
// client can act on (a full disk, a stopped store); "" for the others,
// whose detail stays in the broker's log.
func appendDetail(err error) string {
	switch {
	case errors.Is(err, store.ErrNoSpace):
		return "no space left on device"
	case errors.Is(err, store.ErrUnhealthy):
		return "storage unavailable (disk error)"
	}
	return ""
}

func (b *Broker) logAppendError(topic string, p int32, err error) {
	if errors.Is(err, context.Canceled) && b.closing.Load() {
		b.log.Info("TOPIC("+topic+"): append cancelled by shutdown", "partition", p)
		return
	}
	b.log.Error("TOPIC("+topic+"): append failed", "partition", p, "err", err)
}

func (b *Broker) putError(topic string, p int32, detail string) string {
	s := "Put message to [broker '" + b.URL() + "'] [partition '" + topic + "-" + strconv.Itoa(int(p)) + "'] failed."
	if detail != "" {
		s += "Detail:" + detail
	}
	return s
}

// StoreValidated stores messages validated when they arrived, a
// transaction's at its commit, through the rest of the put route: the
// write gate, the topic's registration and the store step (so that a
// synchronous slave gets them too). It waits for the group commit.
func (b *Broker) StoreValidated(ctx context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error) {
	if ref := b.writeRefusal(); ref != nil {
		return nil, fmt.Errorf("broker: store %d messages in %s-%d: %w", len(msgs), topic, partition, ref)
	}
	te := b.topicEntry(topic)
	if te.ok {
		b.ensureTopic(ctx, topic, te)
	}
	type outcome struct {
		as  []store.Appended
		err error
	}
	ch := make(chan outcome, 1)
	b.puts.storeBatch(ctx, topic, partition, msgs, func(as []store.Appended, err error) { ch <- outcome{as, err} })
	select {
	case o := <-ch:
		return o.as, o.err
	case <-ctx.Done():
		return nil, fmt.Errorf("broker: store %d messages in %s-%d: %w", len(msgs), topic, partition, ctx.Err())
	}
}

// ErrNotStored is wrapped by StoreValidatedGroup's error when nothing of
// the write was handed to the store: the write gate refused it, or a topic
// with minSyncSites has too few slave sites connected.
var ErrNotStored = errors.New("broker: nothing stored")

// ErrWritesStopped is wrapped by StoreValidatedGroup's error when client
// writes began to be refused (RefuseWrites) after the write passed the gate
// and before it reached the store. It was stored here (the outcomes say
// where), but a switchover makes the log durable right after it refuses
// writes and hands that point to the new master: a write that reached the
// store after that point is not at the new master. Whether it did is not
// known, so the write's outcome is unknown to whoever asked for it.
var ErrWritesStopped = errors.New("broker: client writes were stopped while the write was on its way to the store")

// StoreValidatedGroup is StoreValidated for the batches of several
// partitions that must be stored together, a transaction's at its commit:
// one check of the write gate for all of them and one hand-off to the
// store, so a refusal (a switchover, a fence, a demotion) stops all of them
// or none, and the store writes them as one unit (unitStore): one log
// write with one fsync, which replication ships in one frame, so a slave
// site holds all of it or none, even when the master dies mid-stream; for
// topics with minSyncSites, one wait for the slave sites that covers all
// of it. On a synchronous (samsa) master the whole commit is sent to the
// samsa slave, stored here as one unit and answered after one wait for
// the slave's answers (syncMaster.storeUnit): to a slave of this project
// as one sync unit, which it stores all or none (handleSyncUnit), so it
// never holds part of a commit; to a MetaQ slave, which offers no units,
// as one sync per message, which it stores as they come, so it may hold
// part of a commit whose master died on the way.
//
// The error wraps ErrNotStored when nothing was handed to the store (then
// outs is nil), ErrWritesStopped when writes began to be refused on the
// way (outs says what was stored), or the context's error when ctx ended
// before the outcome was known (outs nil, the outcome unknown). Otherwise
// outs has one outcome per append, in order.
func (b *Broker) StoreValidatedGroup(ctx context.Context, appends []store.PartitionAppend) ([]store.AppendOutcome, error) {
	n := 0
	for i, a := range appends {
		n += len(a.Msgs)
		if i > 0 && a.Topic == appends[i-1].Topic {
			continue
		}
		if te := b.topicEntry(a.Topic); te.ok {
			b.ensureTopic(ctx, a.Topic, te)
		}
	}
	pass := b.gate.pass() // before the gate is read (see gatePass)
	if ref := b.writeRefusal(); ref != nil {
		return nil, fmt.Errorf("broker: store %d messages in %d partitions: %w: %w", n, len(appends), ErrNotStored, ref)
	}
	// A topic whose slave sites are not connected refuses the whole group
	// here, not one partition's batch after another's was stored.
	handedOffAtOnce := true
	for i, a := range appends {
		if i > 0 && a.Topic == appends[i-1].Topic {
			continue
		}
		te := b.topicEntry(a.Topic)
		if !b.storesAtOnce(te) {
			handedOffAtOnce = false // judged once stored (see gatePass)
		}
		if !te.ok || te.tc.MinSyncSites <= 0 || te.tc.SyncDegrade == config.SyncDegradeAsync {
			continue
		}
		if b.siteReplicator() != nil && b.awaitingSites() {
			continue // stored once the sites are back (siteSyncGroupStore.awaitSitesUnit)
		}
		if connected := b.connectedSites(); connected < te.tc.MinSyncSites {
			return nil, fmt.Errorf("broker: store %d messages in %d partitions: %w: topic %s is acknowledged at %d slave sites (minSyncSites) and %d are connected",
				n, len(appends), ErrNotStored, a.Topic, te.tc.MinSyncSites, connected)
		}
	}
	if b.gatePassedHook != nil {
		b.gatePassedHook()
	}
	ch := make(chan []store.AppendOutcome, 1)
	done := func(outs []store.AppendOutcome) { ch <- outs }
	if us, ok := b.puts.(unitStore); ok {
		us.storeUnit(b.ctx, appends, done)
	} else {
		outs := make([]store.AppendOutcome, len(appends))
		var left atomic.Int32
		left.Store(int32(len(appends)))
		for i, a := range appends {
			b.puts.storeBatch(b.ctx, a.Topic, a.Partition, a.Msgs, func(as []store.Appended, err error) {
				outs[i] = store.AppendOutcome{Appended: as, Err: err}
				if left.Add(-1) == 0 {
					done(outs)
				}
			})
		}
	}
	// The local store has queued the appends by now; a batch that reaches
	// the store later (a samsa master's queue, sites awaited) is judged
	// once it is stored.
	stopped := false
	if handedOffAtOnce {
		stopped = b.gate.stoppedSince(pass)
	}
	var outs []store.AppendOutcome
	select {
	case outs = <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("broker: store %d messages in %d partitions: %w", n, len(appends), ctx.Err())
	}
	if !handedOffAtOnce {
		stopped = b.gate.stoppedSince(pass)
	}
	if stopped {
		return outs, fmt.Errorf("broker: store %d messages in %d partitions: %w (%s)", n, len(appends), ErrWritesStopped, b.refusalText())
	}
	return outs, nil
}

// regate checks the write gate again for a batch that passed it before a
// refusal that came before the batch reached the store (see gatePass): a
// Hold in effect takes it (pp.held), a refusal refuses it (returned; the
// batch is not stored), and when neither, it takes a new pass and goes on.
// The Hold is read first, as newBatch does: a handover holds puts before
// it refuses writes.
func (b *Broker) regate(pp *pendingPuts) *Refusal {
	pp.pass = b.gate.pass()
	if h := b.holding(); h != nil {
		pp.held = h
		return nil
	}
	ref := b.writeRefusal()
	if ref == nil {
		return nil
	}
	if h := b.holding(); h != nil {
		pp.held = h
		return nil
	}
	return ref
}

// storesAtOnce reports whether the store step takes a batch of te's topic
// when it is handed to it (the local store queues it before the call
// returns), rather than later: a samsa master's partition queue, or a new
// master's slave sites awaited (siteSyncStore.awaitSites). A write taken
// later is judged by its gatePass once it is stored.
func (b *Broker) storesAtOnce(te *topicEntry) bool {
	return b.samsa == nil && !(te.ok && te.tc.MinSyncSites > 0 && b.awaitingSites())
}

// refusalText is the reason writes are refused now, or a note that they
// are not any more.
func (b *Broker) refusalText() string {
	if r := b.writeRefusal(); r != nil {
		return r.Reason
	}
	return "writes are accepted again"
}
