package broker

import (
	"context"
	"errors"
	"time"

	"metaq/broker/store"
)

// diskProbeInterval is how often a broker that refuses writes for a full
// disk checks whether there is room again.
var diskProbeInterval = time.Second

// spaceProber is a store that can tell when a full disk has room again
// (*store.Store).
type spaceProber interface {
	ProbeSpace(ctx context.Context) error
}

// diskFull runs when the store refused an append for lack of space: the
// write gate refuses client writes with that reason (503: the condition
// passes by itself) instead of every put trying the disk, and a goroutine
// probes for room and opens the gate again once there is. The broker stays
// registered meanwhile (README, Reliability).
func (b *Broker) diskFull() {
	p, ok := b.store.(spaceProber)
	if !ok || b.closing.Load() || !b.diskProbing.CompareAndSwap(false, true) {
		return
	}
	b.RefuseWrites("disk", Refusal{Reason: "no space left on device", Retry: true})
	b.log.Error("BROKER: the disk is full; refusing writes until there is room")
	started := b.routines.Go(func() {
		defer b.diskProbing.Store(false)
		t := time.NewTicker(diskProbeInterval)
		defer t.Stop()
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
			}
			if err := p.ProbeSpace(b.ctx); err == nil {
				b.AllowWrites("disk")
				b.log.Info("BROKER: the disk has room again; accepting writes")
				return
			}
		}
	})
	if !started { // closing: nothing to probe for
		b.diskProbing.Store(false)
	}
}

// diskFullAtStart does what diskFull does when the store opened on a full
// disk (its recovery could not write everything it rebuilt, and it
// refuses appends): writes are refused with the reason and the broker
// probes for room, so the store writes what it holds in memory once there
// is room, whether puts come or not (seed 941024 of the soak).
func (b *Broker) diskFullAtStart() {
	if errors.Is(b.store.Health(), store.ErrNoSpace) {
		b.diskFull()
	}
}
