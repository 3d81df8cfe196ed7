package bundle

import (
	"context"
	"time"

	"metaq/georeplicator"
)

// redialEvery is how often a slave with a static masterAddress, while not
// connected, asks its resolver whether the master moved.
const redialEvery = 250 * time.Millisecond

// moveFollower is what redialOnMove needs of a receiver.
type moveFollower interface {
	Status() georeplicator.ReceiverStatus
	Tried() string
	Redial()
}

// redialOnMove makes the receiver recv returns (nil: none runs) try again
// at once whenever, while it is not connected, resolve names another
// master than the one it last tried, until ctx ends. A slave whose
// async_slave.properties names a masterAddress (deploy/'s) has no ZooKeeper
// watch on the master's entries (supervise) to tell it that a promotion
// moved the master: it waited out its backoff, or a connection attempt to
// a paused old master (its kernel accepts, it never answers the handshake)
// for DialTimeout, 10 s, and `promote` waited that long for it to follow.
func redialOnMove(ctx context.Context, every time.Duration, recv func() moveFollower, resolve georeplicator.Resolver) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		r := recv()
		if r == nil || r.Status().Connected {
			continue
		}
		tried := r.Tried()
		if tried == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		addr, err := resolve.MasterAddr(rctx)
		cancel()
		if err == nil && addr != "" && addr != tried {
			r.Redial()
		}
	}
}
