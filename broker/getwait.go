package broker

import (
	"runtime"
	"sync"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/clock"
)

// GrowthWaiter is the part of *store.Store a get at the end of its
// partition waits with (Options.GetWait): Grown returns a channel closed
// once the partition's readable end may be past end (see store.Store.Grown).
type GrowthWaiter interface {
	Grown(topic string, partition int, end int64) (<-chan struct{}, error)
}

// heldGet is a get waiting for its partition to grow (holdGet).
type heldGet struct {
	cmd      *wire.Get
	deadline time.Time
	expired  bool // GetWait is up, or the connection is closing: answer what get answers
	// ready: the partition's readable end was already past the get's
	// offset when its wait began (Grown's channel closed), so the wait
	// ended at once. A get that then still finds nothing (a gap in the
	// log below the end) is answered 404: waiting again would end at
	// once again, a spin until its deadline.
	ready bool
}

// wokenGets is a connection's list of held gets whose wait ended, and
// whether one of their goroutines is answering the list (waitGet). mu is
// a leaf. batch and frames are the answering goroutine's scratch space,
// reused from answer to answer: only the goroutine that set answering
// (under mu) touches them, until it clears it.
type wokenGets struct {
	mu        sync.Mutex
	gets      []heldGet
	answering bool

	batch  []heldGet
	frames []outFrame
}

// holdGet takes a get whose answer is code with no records, when it is a
// 404 at the end of an existing partition and Options.GetWait allows a
// wait: the get then waits on one of the connection's waiter goroutines
// (waiter, waitGet) for the partition to grow, holding its in-flight token
// and no bytes. It reports whether it took the get; if not, the caller
// answers code.
func (b *Broker) holdGet(c *conn, cmd *wire.Get, code int) bool {
	if code != wire.StatusNotFound || b.opts.GetWait <= 0 {
		return false
	}
	if !c.hold(heldGet{cmd: cmd, deadline: b.opts.Clock.Now().Add(b.opts.GetWait)}) {
		return false
	}
	b.stats.getsHeld.Add(1) // once per get, however often it waits (waitGet)
	return true
}

// hold starts h's wait, unless its partition does not exist (or the
// store cannot wait).
func (c *conn) hold(h heldGet) bool {
	gw, ok := c.b.store.(GrowthWaiter)
	if !ok {
		return false
	}
	grown, err := gw.Grown(h.cmd.Topic, int(h.cmd.Partition), h.cmd.Offset)
	if err != nil {
		return false // no such partition: 404 at once
	}
	h.ready = isClosed(grown)
	w := heldWait{h: h, grown: grown}
	select {
	case c.waits <- w: // an idle waiter takes it
	default:
		c.b.stats.getWaiters.Add(1)
		c.wg.Add(1)
		go c.waiter(w)
	}
	return true
}

// heldWait is a held get and the channel its partition's growth closes.
type heldWait struct {
	h     heldGet
	grown <-chan struct{}
}

// waiter waits for w's partition to grow (waitGet), then for the next held
// get of the connection, until none came for workerIdle or reading stopped
// (readCtx is done only once the connection closes or Broker.Close stops
// reading; a client's quit or EOF ends only the reader, then readDone).
// Waiters are reused, as workers are, because a fresh goroutine per held
// get grew its stack on every get (the wait's timer and the answer's read
// are deep): that was a measurable share of the broker's CPU per delivered
// message. Each has one timer for its gets' bounds, armed again for every
// get (not a timer and channel per wait). One is started only when none
// is idle, and a busy one holds an in-flight request or answers the woken
// gets (one at a time per connection), so at most MaxInFlight+1 are busy.
func (c *conn) waiter(w heldWait) {
	defer c.wg.Done()
	wait := workerIdle
	if d := c.b.opts.waiterIdle; d > 0 {
		wait = d
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	bound := clock.NewTimer(c.b.opts.Clock, c.b.opts.GetWait)
	bound.Stop()
	for {
		c.waitGet(w.h, w.grown, bound)
		idle.Reset(wait)
		select {
		case w = <-c.waits:
		case <-idle.C:
			return
		case <-c.readDone:
			return // a get held from now on gets a waiter of its own
		}
	}
}

// waitGet waits until a held get's partition grew, its GetWait is up
// (bound, the waiter's timer), or reading stopped (the client quit or
// went away, the connection closes or the broker stops reading: the get
// is answered at once, no client waits for it), then answers it with the
// other held gets of the connection whose wait ended with it: a commit
// wakes the gets of every partition it grew at once, and their answers
// queued together leave in one stream (conn.writeFrames), as the answers
// of one read's gets do. The first goroutine to find no one answering
// answers the list; the others leave their get in it.
func (c *conn) waitGet(h heldGet, grown <-chan struct{}, bound clock.Timer) {
	if wait := h.deadline.Sub(c.b.opts.Clock.Now()); wait > 0 {
		bound.Reset(wait)
		select {
		case <-grown:
			c.linger(&h, bound)
		case <-bound.C():
			h.expired = true
		case <-c.readDone:
			h.expired = true
		case <-c.readCtx.Done():
			h.expired = true
		}
		bound.Stop()
	} else {
		h.expired = true
	}
	w := &c.woken
	w.mu.Lock()
	w.gets = append(w.gets, h)
	if w.answering {
		w.mu.Unlock()
		return
	}
	w.answering = true
	w.mu.Unlock()
	// Let the other goroutines woken by the same commit add their gets.
	runtime.Gosched()
	batch, frames := w.batch, w.frames
	for {
		w.mu.Lock()
		batch = append(batch[:0], w.gets...)
		clear(w.gets)
		w.gets = w.gets[:0]
		if len(batch) == 0 {
			w.batch, w.frames = batch, frames
			w.answering = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		for _, g := range batch {
			code, body, data, run := c.wokenAnswer(g.cmd, &frames)
			if data == nil && run == nil && code == wire.StatusNotFound {
				// Woken for records below its offset, or past another
				// waiter's end: wait again until its deadline. Not when
				// its offset was readable before it waited (ready): it
				// is not at the end, and a wait would not wait.
				if !g.expired && !g.ready && c.hold(g) {
					continue
				}
				c.b.stats.getsHeldEmpty.Add(1)
			}
			frames = append(frames, c.b.getFrame(g.cmd, code, body, data, run))
		}
		frames = c.sendFrames(frames)
		clear(batch) // keep no get alive
	}
}

// linger keeps a held get that its partition's growth woke waiting, up
// to Options.GetWaitLinger (within its GetWait, bound, still armed for
// it), until GetWaitMinBytes (at most its maxSize) are readable at its
// offset, as Kafka's fetch.min.bytes and fetch.max.wait.ms do: woken at
// every group commit, a consumer that keeps up gets one commit's records
// per answer, and each answer costs a get, a wake and system calls on both
// sides (BenchmarkGetWaitDelivery: 3 records per get without it, 8-10 with
// it, and a quarter less CPU per delivered message). When reading stops
// the get is answered at once.
func (c *conn) linger(h *heldGet, bound clock.Timer) {
	o := &c.b.opts
	want := min(o.GetWaitMinBytes, int64(h.cmd.MaxSize))
	if want <= 0 || o.GetWaitLinger <= 0 {
		return
	}
	gw := c.b.store.(GrowthWaiter) // hold held it, so the store waits
	// Closed once the readable end is past end: want bytes at the offset.
	end := h.cmd.Offset + want - 1
	more, err := gw.Grown(h.cmd.Topic, int(h.cmd.Partition), end)
	if err != nil || isClosed(more) {
		return
	}
	wait := min(o.GetWaitLinger, h.deadline.Sub(o.Clock.Now()))
	if wait <= 0 {
		return
	}
	bound.Stop()
	bound.Reset(wait)
	for {
		select {
		case <-more:
			// Woken for a lower end another waits past, or for ours.
			if more, err = gw.Grown(h.cmd.Topic, int(h.cmd.Partition), end); err != nil || isClosed(more) {
				return
			}
		case <-bound.C():
			return // answered with what is readable
		case <-c.readDone:
			h.expired = true
			return
		case <-c.readCtx.Done():
			h.expired = true
			return
		}
	}
}

// isClosed reports whether ch is closed (it is never sent on).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// wokenAnswer is the answer to a woken get, answered after the answers
// in frames, which are not queued yet and hold bytes of the connection's
// budget until the writer has written them. So it must not wait for that
// budget while they wait (they would never be written): it takes what is
// free now, as a get answered on the reader does (getInline), or else
// queues them first and then answers as any get.
func (c *conn) wokenAnswer(cmd *wire.Get, frames *[]outFrame) (code int, body string, data []byte, run *store.LogRun) {
	if len(*frames) > 0 {
		if c.zeroCopy {
			code, body, data, run, later := c.b.get(c, cmd, true)
			if !later {
				return code, body, data, run
			}
		}
		*frames = c.sendFrames(*frames)
	}
	code, body, data, run, _ = c.b.get(c, cmd, false)
	return code, body, data, run
}

// sendFrames queues frames in order and returns them emptied.
func (c *conn) sendFrames(frames []outFrame) []outFrame {
	for i := range frames {
		c.send(frames[i])
		frames[i] = outFrame{}
	}
	return frames[:0]
}
