package broker

import (
	"time"

	"metaq/broker/wire"
)

// GrowthWaiter is the part of *store.Store a get at the end of its
// partition waits with (Options.GetWait): Grown returns a channel closed
// once the partition's readable end may be past end (see store.Store.Grown).
type GrowthWaiter interface {
	Grown(topic string, partition int, end int64) (<-chan struct{}, error)
}

// holdGet takes a get whose answer is code with no records, when it is a
// 404 at the end of an existing partition and Options.GetWait allows a
// wait: the get then waits on a goroutine of its own (waitGet) for the
// partition to grow, holding its in-flight token and no bytes. It reports
// whether it took the get; if not, the caller answers code.
func (b *Broker) holdGet(c *conn, cmd *wire.Get, code int) bool {
	if code != wire.StatusNotFound || b.opts.GetWait <= 0 {
		return false
	}
	gw, ok := b.store.(GrowthWaiter)
	if !ok {
		return false
	}
	grown, err := gw.Grown(cmd.Topic, int(cmd.Partition), cmd.Offset)
	if err != nil {
		return false // no such partition: 404 at once
	}
	b.stats.getsHeld.Add(1)
	c.wg.Add(1)
	go c.waitGet(cmd, grown, b.opts.Clock.Now().Add(b.opts.GetWait))
	return true
}

// waitGet answers a held get (holdGet) once its partition grew, or 404
// once GetWait is up (by deadline), or at once when the connection closes
// or the broker stops reading. A wake that brings nothing at the get's
// offset (the partition grew below it, or past another waiter's end)
// waits again until the deadline.
func (c *conn) waitGet(cmd *wire.Get, grown <-chan struct{}, deadline time.Time) {
	defer c.wg.Done()
	b := c.b
	for {
		wait := deadline.Sub(b.opts.Clock.Now())
		expired := wait <= 0
		if !expired {
			select {
			case <-grown:
			case <-b.opts.Clock.After(wait):
				expired = true
			case <-c.readCtx.Done():
				expired = true
			}
		}
		code, body, data, run, _ := b.get(c, cmd, false)
		if data == nil && run == nil && code == wire.StatusNotFound && !expired {
			g, err := b.store.(GrowthWaiter).Grown(cmd.Topic, int(cmd.Partition), cmd.Offset)
			if err == nil {
				grown = g
				continue
			}
		}
		if data == nil && run == nil && code == wire.StatusNotFound {
			b.stats.getsHeldEmpty.Add(1)
		}
		b.answerGet(c, cmd, code, body, data, run, false)
		return
	}
}
