package broker

// Holding puts while mastership is handed over. A master that hands its
// brokerId over to a slave site (a switchover) must stop storing puts, so
// that the new master holds its whole log when it takes over. Refusing
// them (503) fails most sends of MetaQ's Java producer, which does not
// retry a failed put, for as long as the handover takes. Instead the
// broker holds them: a plain put that arrives while a Hold is in effect
// passes the usual checks except the write gate and minSyncSites (the
// new master checks those), is kept in memory, bounded in bytes and in
// time, and answered later:
//
//   - once the Hold forwards (Hold.Forward: the new master took over), it
//     is sent to the new master's MetaQ port as a client would send it,
//     at the same partition, and answered with the new master's answer
//     (its id, the partition and the offset where the record is stored
//     there); a 403 or 503 of the new master (not master yet, its slave
//     sites not connected yet) is retried until the put's time is up;
//   - when the Hold ends before forwarding (Hold.End: the handover
//     failed), it takes the route a put arriving then would take: the
//     write gate, then the store here;
//   - when its time is up before it was sent, or the held bytes would
//     exceed the bound, it is answered 503 saying it was not stored, so a
//     client may send it again without making a duplicate. Its time is
//     MaxWait from its arrival, extended while the handover progresses
//     (Hold.Progress; Forward, and each "not master yet" answer of the
//     new master, count as progress) to MaxWait from the last progress,
//     and never beyond MaxHold from its arrival: a slow step of a
//     handover that advances costs latency, a stalled one errors;
//   - when it was sent and no answer came (the connection to the new
//     master broke), it is answered 500 saying that whether it was stored
//     is unknown. No held put is ever answered as stored unless the new
//     master said it was.
//
// A Hold with HoldOptions.Local never forwards: a master that has not
// confirmed its generation yet (just started, or paused or cut off from
// its ZooKeeper and confirming it again) holds the puts that reach it
// until it has, and then ends the Hold: they take the route of a put
// arriving then (the write gate, then the store here). A put whose time
// is up takes that route at once: the write gate's refusal while the
// generation is still not confirmed, the answer a put gets without a
// Hold. A held put stored here is acknowledged only if the write check
// (Broker.SetWriteCheck) still lets writes through when the store
// answers, as on the put route.
//
// A Local Hold also keeps the answers of puts stored here that the write
// check refused when the store answered them (Hold.awaitAck): they passed
// the write gate while the generation was confirmed, and the confirmation
// lapsed while they were on their way to the store (a loaded machine, a
// slow ensemble, a slave site's slow fsync). Answering them 500 ("stored
// here, but not acknowledged") fails a send although nothing changed when
// the master confirms the same generation a moment later. Their answer
// waits, with the Hold's time bound (MaxWait from the store's answer), and
// is given once the Hold ends or the bound passes, by the write gate and
// check asked then: acknowledged when they let writes through (the
// generation is confirmed again: as safe as any put acknowledged then),
// else 500 as before (a newer generation exists, and the record lies in
// this master's divergent tail; or the bound passed). Their bodies are in
// the store: they count in no byte bound.
//
// A Hold that may forward also keeps the answers of puts stored here whose
// client writes were stopped on their way to the store (Hold.awaitHandover:
// the switchover's refusal came between their gate check and their
// hand-off, so they may lie past the log end handed over). Answering them
// 500 at once fails a send whose record the new master may well hold. Their
// answer waits, with a held put's time bound, for the handover's outcome:
// once the new master took over (HandedOver with the end it holds, then
// Forward) they are acknowledged when their records lie below that end
// (it has them at the same partition and offset), else, and when the Hold
// ends without forwarding, the bound passes or the broker closes, 500 as
// before.
//
// A put that carries an id fixed before it reached this broker (a slave
// site's outbox entry, which its gateway sends as a sync on a gateway
// link: storeforward.go) keeps it: it is sent to the new master over a
// gateway link of its own (HoldOptions.Dial) as a sync, which the new
// master stores under that id, so that the slave site's outbox finds it
// there by id if this broker's answer is lost. Without HoldOptions.Dial
// such a put is answered 503, not stored, once the Hold forwards: the
// outbox sends it to the new master itself.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// Default bounds of a Hold.
const (
	// DefaultHoldMaxWait is below the 3 s MetaQ's Java producer waits for
	// a put's answer by default: a put answered later would be retried by
	// the client although stored.
	DefaultHoldMaxWait  = 2500 * time.Millisecond
	DefaultHoldMaxBytes = 64 << 20
)

// holdRetryEvery is the pause before a put the new master refused (403,
// 503) is sent again, and the period of a Hold's expiry check.
const holdRetryEvery = 20 * time.Millisecond

// HoldOptions bound the puts a Hold keeps.
type HoldOptions struct {
	// MaxWait is how long a put may wait, from its arrival or the
	// handover's last progress (Progress), to be sent to the new master;
	// then it is answered 503, not stored. 0 means DefaultHoldMaxWait.
	MaxWait time.Duration
	// MaxHold is the hard limit of that wait, from the put's arrival,
	// however the handover progresses. Below MaxWait (0 included) it is
	// MaxWait: progress extends nothing. A client whose send timeout is
	// shorter may see a held put time out that the new master then
	// stores.
	MaxHold time.Duration
	// MaxBytes bounds the body bytes held at once; a put beyond it is
	// answered 503 at once, not stored. 0 means DefaultHoldMaxBytes.
	MaxBytes int64
	// Reason is said in the answer of a put not stored, e.g. "this master
	// is handing over to hf".
	Reason string
	// Dial opens a gateway link to the new master's MetaQ port (addr), a
	// connection the new master serves with ServeConn, for the puts that
	// keep their ids (see the top of this file); nil: such puts are
	// answered 503, not stored. A deployment passes the dial of its write
	// gateway (GatewayOptions.Dial).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Local: the Hold is never forwarded (see the top of this file): a
	// put whose time is up takes the route of a put arriving then
	// instead of being answered 503, not stored.
	Local bool
}

// HoldStats counts what a Hold did with the puts it held.
type HoldStats struct {
	Held      int64 // puts held
	Forwarded int64 // answered with the new master's answer
	Local     int64 // stored here after the Hold ended without forwarding
	Expired   int64 // answered 503 (not stored): time or bytes bound
	Unknown   int64 // answered 500: sent, no answer
	// AckHeld counts the puts stored here whose answer waited in the Hold
	// (see awaitAck and awaitHandover); AckGiven those of them
	// acknowledged in the end, AckRefused those answered 500, not
	// acknowledged.
	AckHeld, AckGiven, AckRefused int64
}

// Hold is in effect from Broker.HoldWrites until End (see the top of this
// file). Its methods are safe for concurrent use.
type Hold struct {
	b    *Broker
	opts HoldOptions

	mu     sync.Mutex
	queue  []*heldBatch // waiting for Forward or End
	bytes  int64        // body bytes of the held batches not answered yet
	target func(context.Context) (string, error)
	ended  bool
	endAt  time.Time // End is called by the expiry loop then (EndAfter)
	// progressAt is the handover's last progress (Progress): a held put
	// waits MaxWait from it, up to MaxHold from its arrival.
	progressAt time.Time
	fwd        *forwarder

	// acks are the answers of stored puts awaiting the write check's
	// consent (awaitAck), in the order they came.
	acks []*ackWait
	// stored are the answers of puts stored here on their way when
	// writes stopped, awaiting the handover's outcome (awaitHandover);
	// handedEnd is the log end the new master holds (HandedOver), valid
	// when handedOver is set.
	stored     []*handoverWait
	handedEnd  int64
	handedOver bool

	quit chan struct{} // closed by End
	// takenBy is the switchover's Hold that took this Local Hold's puts
	// over (HoldWrites); a put added here after that goes to it.
	takenBy *Hold
	stats   struct {
		held, forwarded, local, expired, unknown atomic.Int64
		ackHeld, ackGiven, ackRefused            atomic.Int64
	}
}

// ackWait is the answer of n puts stored here, awaiting the write check
// (see awaitAck).
type ackWait struct {
	n        int
	deadline time.Time
	// answer sends the answer: acknowledged when ref is nil, else 500
	// saying the puts are stored here but not acknowledged, for ref.
	answer func(ref *Refusal)
	// covered reports whether every record of the puts lies in the log
	// below end (a handed-over end); nil when not known. A switchover's
	// Hold that takes the wait over (HoldWrites) acknowledges the puts
	// when the end the new master holds covers them.
	covered func(end int64) bool
}

// handoverWait is the answer of n puts stored here while writes were
// being stopped, awaiting the handover's outcome (see awaitHandover).
type handoverWait struct {
	n       int
	arrived time.Time
	// answer sends the answer: ok with the log end the new master holds,
	// or !ok when that end is not known (no handover, or its time is up).
	// It reports whether the puts were acknowledged.
	answer func(end int64, ok bool) bool
}

// heldBatch is one partition's batch of a connection's held puts.
type heldBatch struct {
	topic     string
	partition int
	msgs      []store.Message // bodies copied: the put route reuses its buffers
	size      int64
	arrived   time.Time
	done      func([]store.Appended, error)
	answered  atomic.Bool
	// gone reports that the client closed its connection: what was not
	// sent yet is dropped, not stored (nobody awaits its answer, and a
	// client that resends it would store it twice).
	gone func() bool
}

// heldError is the answer of a held put that was not stored here: its
// code and text. raw text is the new master's own answer body.
type heldError struct {
	code int
	text string
	raw  bool
}

func (e *heldError) Error() string { return "broker: held put: " + strconv.Itoa(e.code) + " " + e.text }

// HoldWrites makes the broker hold client puts instead of storing them,
// until the returned Hold's End (see the top of this file). It fails while
// another Hold is in effect.
func (b *Broker) HoldWrites(o HoldOptions) (*Hold, error) {
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultHoldMaxWait
	}
	o.MaxHold = max(o.MaxHold, o.MaxWait)
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultHoldMaxBytes
	}
	h := &Hold{b: b, opts: o, quit: make(chan struct{})}
	old := b.hold.Load()
	taking := old != nil && old.opts.Local && !o.Local
	if !taking {
		old = nil
	}
	if !b.hold.CompareAndSwap(old, h) {
		return nil, errors.New("broker: puts are already held")
	}
	if !b.routines.Go(h.expireLoop) {
		b.hold.CompareAndSwap(h, nil)
		if old != nil {
			old.End()
		}
		return nil, errors.New("broker: hold puts: the broker is closing")
	}
	b.log.Warn("BROKER: holding client puts", "reason", o.Reason, "maxWait", o.MaxWait, "maxBytes", o.MaxBytes)
	if old != nil {
		old.takeOver(h)
	}
	return h, nil
}

// takeOver ends this Local Hold for h, a Hold that may forward (a
// switchover that begins while this master waits for the confirmation of
// its generation): its held puts and the kept answers of its stored puts
// move to h instead of being answered by the write gate and check, which
// would refuse them while the switchover runs (503, and 500 "stored here,
// but not acknowledged" for puts the new master will hold).
func (h *Hold) takeOver(nh *Hold) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.takenBy = true, nh
	q, acks := h.queue, h.acks
	h.queue, h.acks = nil, nil
	for _, hb := range q {
		h.bytes -= hb.size
	}
	h.mu.Unlock()
	close(h.quit)
	nh.adopt(q, acks)
	h.b.log.Info("BROKER: a switchover's hold took over the puts held while confirming the generation", "batches", len(q), "answers", len(acks))
}

// handoverAnswer is a's answer as a wait for the handover's outcome:
// acknowledged when the end the new master holds covers its records, else
// answered by the write gate and check asked then, as a Local Hold would.
func (h *Hold) handoverAnswer(a *ackWait) func(end int64, ok bool) bool {
	return func(end int64, ok bool) bool {
		if ok && a.covered != nil && a.covered(end) {
			a.answer(nil)
			return true
		}
		ref := h.b.writeRefusal()
		a.answer(ref)
		return ref == nil
	}
}

// adopt takes held batches and kept answers over from a Local Hold
// (takeOver): the batches wait here as if held here, and each answer waits
// for the handover's outcome (awaitHandover): acknowledged when the end
// the new master holds covers its records, else answered by the write
// gate and check asked then, as the Local Hold would have.
func (h *Hold) adopt(q []*heldBatch, acks []*ackWait) {
	for _, a := range acks {
		if !h.awaitHandover(a.n, h.handoverAnswer(a)) {
			h.resolveAcks([]*ackWait{a}, h.b.writeRefusal())
		}
	}
	for _, hb := range q {
		if hb.answered.Load() {
			continue
		}
		h.mu.Lock()
		if h.ended {
			h.mu.Unlock()
			h.storeAllHere([]*heldBatch{hb})
			continue
		}
		h.queueOrForwardLocked(hb)
	}
}

// queueOrForwardLocked counts hb in the bytes held and queues it while no
// target is known, or passes it on to the target. The caller holds h.mu,
// which it releases: the forward dials and must not run under it.
func (h *Hold) queueOrForwardLocked(hb *heldBatch) {
	h.bytes += hb.size
	if h.target == nil {
		h.queue = append(h.queue, hb)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.startForward(hb)
}

// EndHold ends the Hold in effect, if any (see Hold.End), and reports
// whether there was one. A site that becomes master again while it still
// passes puts on to the master it handed over to (for HandoverHold after
// a switchover) must take them itself: that master follows it now.
func (b *Broker) EndHold() bool {
	h := b.holding()
	if h == nil {
		return false
	}
	h.End()
	return true
}

// holding returns the Hold in effect, or nil.
func (b *Broker) holding() *Hold { return b.hold.Load() }

// Holding reports whether a Hold is in effect.
func (b *Broker) Holding() bool { return b.holding() != nil }

// Ended reports whether the Hold ended (End, or the broker closed).
func (h *Hold) Ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// Forward sends the held puts, and those that arrive until End, to the
// address target returns (the new master's MetaQ host:port; an error
// while it is not known yet, which is asked again).
func (h *Hold) Forward(target func(context.Context) (string, error)) {
	h.mu.Lock()
	if h.ended || h.target != nil {
		h.mu.Unlock()
		return
	}
	h.target = target
	h.fwd = newForwarder(h.b, target, h.opts.Dial)
	h.progressAt = time.Now()
	q := h.queue
	h.queue = nil
	stored, end, ok := h.stored, h.handedEnd, h.handedOver
	h.stored = nil
	h.mu.Unlock()
	// The new master took over: it holds this master's log up to end.
	if len(stored) > 0 {
		h.b.log.Info("BROKER: answering puts stored while writes were stopped by the log end handed over", "answers", len(stored), "end", end, "endKnown", ok)
	}
	h.answerStored(stored, end, ok)
	h.b.log.Info("BROKER: forwarding held puts to the master the target names", "held", len(q))
	for _, hb := range q {
		h.startForward(hb)
	}
}

// HandedOver records the log end the new master holds when it takes over:
// the durable end this master handed over, taken after client writes were
// stopped and the log flushed. A put stored here while writes were being
// stopped (awaitHandover) is acknowledged at Forward when its record lies
// below end, since the new master then has it at the same partition and
// offset; otherwise, or without HandedOver, it is answered 500 as before.
// Call it before Forward.
func (h *Hold) HandedOver(end int64) {
	h.mu.Lock()
	if h.target == nil && !h.ended {
		h.handedEnd, h.handedOver = end, true
	}
	h.mu.Unlock()
}

// Progress says the handover advanced (the slave caught up, the new master
// said it took over): every put held waits MaxWait from now, never beyond
// MaxHold from its arrival (see the top of this file).
func (h *Hold) Progress() {
	h.mu.Lock()
	h.progressAt = time.Now()
	h.mu.Unlock()
}

// deadline is when hb's time is up (see the top of this file).
func (h *Hold) deadline(hb *heldBatch) time.Time {
	h.mu.Lock()
	p := h.progressAt
	h.mu.Unlock()
	return h.deadlineFrom(hb, p)
}

// deadlineFrom is hb's deadline with the last progress at p.
func (h *Hold) deadlineFrom(hb *heldBatch, p time.Time) time.Time {
	return h.waitDeadline(hb.arrived, p)
}

// waitDeadline is the deadline of a wait that began at arrived, with the
// last progress at p: MaxWait from the later, up to MaxHold from arrived.
func (h *Hold) waitDeadline(arrived, p time.Time) time.Time {
	from := arrived
	if p.After(from) {
		from = p
	}
	return minTime(from.Add(h.opts.MaxWait), arrived.Add(h.opts.MaxHold))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// waited is the wait hb was allowed (MaxWait, or more after progress),
// for a refusal's text.
func (h *Hold) waited(hb *heldBatch) time.Duration {
	return h.deadline(hb).Sub(hb.arrived).Round(time.Millisecond)
}

// EndAfter ends the Hold d from now (see End).
func (h *Hold) EndAfter(d time.Duration) {
	h.mu.Lock()
	if !h.ended {
		h.endAt = time.Now().Add(d)
	}
	h.mu.Unlock()
}

// End ends the Hold: puts are no longer held. Those still held and not
// forwarded take the route of a put arriving now (the write gate, then the
// store here); those being forwarded are answered as they complete; the
// answers of stored puts awaiting the write check (awaitAck) are given by
// the write gate and check asked now. End is idempotent.
func (h *Hold) End() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	q := h.queue
	h.queue = nil
	fwd := h.fwd
	acks := h.acks
	h.acks = nil
	stored := h.stored
	h.stored = nil
	h.mu.Unlock()
	h.b.hold.CompareAndSwap(h, nil)
	close(h.quit)
	if fwd != nil {
		fwd.closeWhenIdle()
	}
	// Stored before the held puts will be: answered first. Those stored
	// on their way when writes stopped: no new master took over (Forward
	// answered them), so whether they survive is unknown.
	h.answerStored(stored, 0, false)
	h.answerAcks(acks)
	h.storeAllHere(q)
	st := h.Stats()
	h.b.log.Info("BROKER: no longer holding client puts", "held", st.Held, "forwarded", st.Forwarded,
		"storedHere", st.Local, "notStored", st.Expired, "unknown", st.Unknown,
		"answersHeld", st.AckHeld, "acknowledged", st.AckGiven, "notAcknowledged", st.AckRefused)
}

// awaitAck keeps the answer of n puts stored here that the write check
// refused when the store answered them (see the top of this file), and
// reports whether it did: a Local Hold that has not ended keeps them, and
// so does a switchover's Hold when covered (whether their records lie
// below a handed-over end) is known, until the handover's outcome
// (awaitHandover). answer is called once, later, on a goroutine that may be the
// caller of End, with nil (acknowledge) or the refusal to answer them 500
// for. It never blocks: the store's notify calls it.
func (h *Hold) awaitAck(n int, covered func(end int64) bool, answer func(ref *Refusal)) bool {
	if !h.opts.Local {
		// A switchover's Hold (it began after these puts were stored, or
		// took over the Local Hold): their records lie below the end it
		// hands over, and their answer waits for its outcome.
		if covered == nil {
			return false
		}
		return h.awaitHandover(n, h.handoverAnswer(&ackWait{n: n, answer: answer, covered: covered}))
	}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.acks = append(h.acks, &ackWait{n: n, deadline: time.Now().Add(h.opts.MaxWait), answer: answer, covered: covered})
	h.mu.Unlock()
	h.stats.ackHeld.Add(int64(n))
	return true
}

// awaitHandover keeps the answer of n puts stored here whose client writes
// were stopped while they were on their way to the store (a switchover's
// refusal came between their gate check and their hand-off to the store),
// and reports whether it did: only a Hold that may forward (not Local) and
// has not ended keeps them. Such a record may lie past the log end handed
// over; answer is called once, later, with that end once the new master
// took over (Forward after HandedOver: ok), or with ok false when the
// handover failed (End before Forward), its time is up, or the broker
// closes. Its time is that of a held put arriving now. Once the Hold
// forwarded, answer is called at once, on a goroutine of the broker. It
// never blocks: the store's notify calls it.
func (h *Hold) awaitHandover(n int, answer func(end int64, ok bool) bool) bool {
	if h.opts.Local {
		return false
	}
	w := &handoverWait{n: n, arrived: time.Now(), answer: answer}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.stats.ackHeld.Add(int64(n))
	if h.target == nil {
		h.stored = append(h.stored, w)
		h.mu.Unlock()
		return true
	}
	end, ok := h.handedEnd, h.handedOver
	h.mu.Unlock()
	// answer reads the store's index: not on the store's goroutine.
	if !h.b.routines.Go(func() { h.answerStored([]*handoverWait{w}, end, ok) }) {
		h.answerStored([]*handoverWait{w}, 0, false)
	}
	return true
}

// answerStored answers the waits of puts stored on their way when writes
// stopped (awaitHandover) with the handed-over end, when ok.
func (h *Hold) answerStored(ws []*handoverWait, end int64, ok bool) {
	for _, w := range ws {
		if w.answer(end, ok) {
			h.stats.ackGiven.Add(int64(w.n))
		} else {
			h.stats.ackRefused.Add(int64(w.n))
		}
	}
}

// answerAcks answers the waiting acknowledgements of acks by the write
// gate and check now: acknowledged when they let writes through.
func (h *Hold) answerAcks(acks []*ackWait) {
	if len(acks) == 0 {
		return
	}
	h.resolveAcks(acks, h.b.writeRefusal())
}

// resolveAcks answers acks: acknowledged when ref is nil, else 500 for ref.
func (h *Hold) resolveAcks(acks []*ackWait, ref *Refusal) {
	for _, a := range acks {
		if ref == nil {
			h.stats.ackGiven.Add(int64(a.n))
		} else {
			h.stats.ackRefused.Add(int64(a.n))
		}
		a.answer(ref)
	}
}

// Stats reports what the Hold did so far.
func (h *Hold) Stats() HoldStats {
	return HoldStats{Held: h.stats.held.Load(), Forwarded: h.stats.forwarded.Load(), Local: h.stats.local.Load(),
		Expired: h.stats.expired.Load(), Unknown: h.stats.unknown.Load(),
		AckHeld: h.stats.ackHeld.Load(), AckGiven: h.stats.ackGiven.Load(), AckRefused: h.stats.ackRefused.Load()}
}

// add holds a validated batch and calls done once with its outcome. It
// copies the bodies.
func (h *Hold) add(topic string, partition int, msgs []store.Message, gone func() bool, done func([]store.Appended, error)) {
	hb := &heldBatch{topic: topic, partition: partition, msgs: make([]store.Message, len(msgs)), done: done, gone: gone,
		arrived: time.Now()}
	for i, m := range msgs {
		hb.msgs[i] = m
		hb.msgs[i].Body = append([]byte(nil), m.Body...)
		hb.size += int64(len(m.Body))
	}
	h.stats.held.Add(int64(len(msgs)))
	h.mu.Lock()
	switch {
	case h.ended && h.takenBy != nil:
		h.mu.Unlock()
		h.takenBy.adopt([]*heldBatch{hb}, nil)
		return
	case h.ended:
		h.mu.Unlock()
		h.storeAllHere([]*heldBatch{hb})
		return
	case h.bytes+hb.size > h.opts.MaxBytes:
		h.mu.Unlock()
		h.finish(hb, h.notStored(fmt.Sprintf("more than %d bytes of puts held", h.opts.MaxBytes)), &h.stats.expired)
		return
	}
	h.queueOrForwardLocked(hb)
}

// notStored is the answer of a held put that was never sent anywhere.
func (h *Hold) notStored(why string) *heldError {
	return &heldError{code: wire.StatusServiceUnavailable, text: h.opts.Reason + "; the put was held and not stored (" + why + "); retry"}
}

// finish answers hb once with err for every message (nil: stored, as).
func (h *Hold) finish(hb *heldBatch, err error, count *atomic.Int64) {
	if !hb.answered.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	h.bytes -= hb.size
	h.mu.Unlock()
	count.Add(int64(len(hb.msgs)))
	hb.done(nil, err)
}

// storeAllHere sends held batches, in order, the way of a put arriving
// after the Hold (storeHere). A topic not registered yet under this
// configuration is registered first, as the put route's per-partition
// queue does: that is ZooKeeper I/O, so then the batches are sent on a
// goroutine of the broker, not the caller's.
func (h *Hold) storeAllHere(q []*heldBatch) {
	if len(q) == 0 {
		return
	}
	register := false
	for _, hb := range q {
		if te := h.b.topicEntry(hb.topic); te.ok && !te.ready.Load() {
			register = true
			break
		}
	}
	if register && h.b.routines.Go(func() {
		for _, hb := range q {
			h.storeHere(hb)
		}
	}) {
		return
	}
	for _, hb := range q {
		h.storeHere(hb)
	}
}

// storeHere sends a held batch the way of a put arriving after the Hold:
// refused by the write gate, or stored here (its topic registered first
// when it is not yet) and acknowledged only if the write check still lets
// writes through when the store answers (checkAck's rule); when it does
// not, a Local Hold in effect then keeps the answer (awaitAck).
func (h *Hold) storeHere(hb *heldBatch) {
	if !hb.answered.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	h.bytes -= hb.size
	h.mu.Unlock()
	b := h.b
	if ref := b.writeRefusal(); ref != nil {
		h.stats.expired.Add(int64(len(hb.msgs)))
		hb.done(nil, &heldError{code: ref.code(), text: ref.Reason})
		return
	}
	h.stats.local.Add(int64(len(hb.msgs)))
	if te := b.topicEntry(hb.topic); te.ok {
		b.ensureTopic(b.ctx, hb.topic, te)
	}
	b.puts.storeBatch(b.ctx, hb.topic, hb.partition, hb.msgs, func(as []store.Appended, err error) {
		var each messageErrors
		if err == nil || errors.As(err, &each) {
			if c := b.gate.check.Load(); c != nil {
				if ref := (*c)(); ref != nil {
					// The confirmation lapsed again: a Local Hold the
					// refusal started keeps the answer (awaitAck).
					as := slices.Clone(as)
					answer := func(ref *Refusal) {
						if ref == nil {
							hb.done(as, err)
							return
						}
						b.log.Warn("TOPIC("+hb.topic+"): stored held puts not acknowledged: this broker cannot confirm it still is the master", "partition", hb.partition,
							"puts", len(hb.msgs), "reason", ref.Reason)
						hb.done(as, notAcknowledged(ref))
					}
					covered := func(end int64) bool { return b.storedBelow(end, hb.topic, hb.partition, as, err) }
					if nh := b.holding(); nh == nil || !nh.awaitAck(len(hb.msgs), covered, answer) {
						answer(ref)
					}
					return
				}
			}
		}
		hb.done(as, err)
	})
}

// expireLoop answers the batches whose time is up before they could be
// sent, and ends the Hold at its EndAfter time.
func (h *Hold) expireLoop() {
	t := time.NewTicker(holdRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			return
		case <-h.b.ctx.Done():
			h.abandon()
			return
		case now := <-t.C:
			h.mu.Lock()
			endNow := !h.endAt.IsZero() && !now.Before(h.endAt)
			var late []*heldBatch
			kept := h.queue[:0]
			for _, hb := range h.queue {
				if now.After(h.deadlineFrom(hb, h.progressAt)) || hb.gone() {
					late = append(late, hb)
				} else {
					kept = append(kept, hb)
				}
			}
			h.queue = kept
			var due []*ackWait
			keptAcks := h.acks[:0]
			for _, a := range h.acks {
				if now.After(a.deadline) {
					due = append(due, a)
				} else {
					keptAcks = append(keptAcks, a)
				}
			}
			clear(h.acks[len(keptAcks):])
			h.acks = keptAcks
			var lateStored []*handoverWait
			keptStored := h.stored[:0]
			for _, w := range h.stored {
				if now.After(h.waitDeadline(w.arrived, h.progressAt)) {
					lateStored = append(lateStored, w)
				} else {
					keptStored = append(keptStored, w)
				}
			}
			clear(h.stored[len(keptStored):])
			h.stored = keptStored
			h.mu.Unlock()
			h.answerStored(lateStored, 0, false) // no new master took over in time
			h.answerAcks(due)                    // the bound passed: the answer the check gives now
			if h.opts.Local {
				// Never forwarded: the answer a put arriving now gets.
				var keep []*heldBatch
				for _, hb := range late {
					if hb.gone() {
						h.finish(hb, h.notStored("its client closed the connection"), &h.stats.expired)
					} else {
						keep = append(keep, hb)
					}
				}
				late = nil
				h.storeAllHere(keep)
			}
			for _, hb := range late {
				why := fmt.Sprintf("no new master to send it to within %v", h.waited(hb))
				if hb.gone() {
					why = "its client closed the connection"
				}
				h.finish(hb, h.notStored(why), &h.stats.expired)
			}
			if endNow {
				h.End()
				return
			}
		}
	}
}

// abandon answers every batch still queued as not stored, and every
// answer awaiting the write check as not acknowledged: the broker is
// closing.
func (h *Hold) abandon() {
	h.mu.Lock()
	q := h.queue
	h.queue = nil
	acks := h.acks
	h.acks = nil
	stored := h.stored
	h.stored = nil
	h.ended = true
	h.mu.Unlock()
	h.b.hold.CompareAndSwap(h, nil)
	h.answerStored(stored, 0, false)
	h.resolveAcks(acks, &Refusal{Reason: "the broker is closing"})
	for _, hb := range q {
		h.finish(hb, h.notStored("the broker is closing"), &h.stats.expired)
	}
}

// startForward sends hb to the new master on a goroutine of the broker.
func (h *Hold) startForward(hb *heldBatch) {
	if !h.b.routines.Go(func() { h.forward(hb) }) {
		h.finish(hb, h.notStored("the broker is closing"), &h.stats.expired)
	}
}

// forward sends hb's messages to the new master until each is answered
// there, or its time is up.
func (h *Hold) forward(hb *heldBatch) {
	out := make([]store.Appended, len(hb.msgs))
	errs := make(messageErrors, len(hb.msgs))
	left := make([]int, len(hb.msgs)) // indexes not answered yet
	for i := range left {
		left[i] = i
	}
	failed := 0
	if !h.fwd.keepsIDs() {
		// Sent as a plain put it would be stored under a new id, and twice
		// if this answer is lost and the outbox sends it again.
		kept := left[:0]
		for _, i := range left {
			if hb.msgs[i].ID == 0 {
				kept = append(kept, i)
				continue
			}
			errs[i] = h.notStored("it carries its id, and this broker has no gateway link to pass it on with it")
			failed++
			h.stats.expired.Add(1)
		}
		left = kept
	}
	for len(left) > 0 {
		deadline := h.deadline(hb)
		if time.Now().After(deadline) || h.b.ctx.Err() != nil || hb.gone() {
			why := fmt.Sprintf("no master took it within %v", h.waited(hb))
			switch {
			case h.b.ctx.Err() != nil:
				why = "the broker is closing"
			case hb.gone():
				why = "its client closed the connection"
			}
			for _, i := range left {
				errs[i] = h.notStored(why)
				failed++
			}
			h.stats.expired.Add(int64(len(left)))
			break
		}
		var retry []int
		res := h.fwd.send(hb.topic, hb.partition, hb.msgs, left, deadline)
		for k, i := range left {
			r := res[k]
			switch {
			case r.err != nil && !r.sent:
				retry = append(retry, i)
			case r.err != nil:
				errs[i] = &heldError{code: wire.StatusInternalServerError, text: h.opts.Reason +
					"; the put was sent to the master " + r.addr + " and no answer came (" + r.err.Error() + "): whether it is stored there is unknown"}
				failed++
				h.stats.unknown.Add(1)
			case r.res.Code == wire.StatusOK:
				a, err := parsePutAnswer(r.res.Body)
				if err != nil {
					errs[i] = &heldError{code: wire.StatusInternalServerError, text: h.opts.Reason + "; the master " + r.addr + " answered " + err.Error() + ": whether the put is stored there is unknown"}
					failed++
					h.stats.unknown.Add(1)
					continue
				}
				out[i] = a
				h.stats.forwarded.Add(1)
			case r.res.Code == wire.StatusForbidden || r.res.Code == wire.StatusServiceUnavailable:
				// Not stored: not master yet, its sites not connected yet.
				// The new master answers: the handover progresses.
				retry = append(retry, i)
				h.Progress()
			default:
				errs[i] = &heldError{code: r.res.Code, text: string(r.res.Body), raw: true}
				failed++
				h.stats.forwarded.Add(1)
			}
		}
		left = retry
		if len(left) > 0 {
			select {
			case <-time.After(holdRetryEvery):
			case <-h.b.ctx.Done():
			}
		}
	}
	if !hb.answered.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	h.bytes -= hb.size
	h.mu.Unlock()
	if failed == 0 {
		hb.done(out, nil)
		return
	}
	hb.done(out, errs)
}

// parsePutAnswer reads a put's answer `<id> <partition> <offset>`.
// Text after the offset (` accepted-locally`) is ignored. It runs once per
// forwarded put, so it parses by hand (fmt.Sscanf cost a fifth of the
// gateway's CPU).
func parsePutAnswer(body []byte) (store.Appended, error) {
	var v [3]int64
	rest := body
	for i := range v {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		n, used, ok := parseDecimal(rest)
		if !ok || (used < len(rest) && rest[used] != ' ') {
			return store.Appended{}, fmt.Errorf("%q, not <id> <partition> <offset>", body)
		}
		v[i] = n
		rest = rest[used:]
	}
	return store.Appended{ID: v[0], Offset: v[2]}, nil
}

// parseDecimal reads a signed decimal int64 at the start of b: its value,
// the bytes it took, and false when there is none or it overflows.
func parseDecimal(b []byte) (int64, int, bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	start := i
	var n uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n > (1<<63)/10 {
			return 0, 0, false
		}
		n = n*10 + uint64(b[i]-'0')
	}
	if i == start || n > 1<<63 || (!neg && n == 1<<63) {
		return 0, 0, false
	}
	if neg {
		return -int64(n), i, true
	}
	return int64(n), i, true
}
