package georeplicator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// typePromote (master → slave) hands mastership over in a planned
// switchover: the payload is the master's durable log end, which the slave
// holds durably; the slave then becomes master (ReceiverOptions.OnPromote).
const typePromote byte = 9

// Handover waits until the connected slave chosen by match holds, durably,
// every record up to this master's durable log end (durableEnd, read again
// until it no longer moves: the caller has stopped client writes), then
// tells that slave to take over. It returns the slave's group and id.
func (s *Shipper) Handover(ctx context.Context, match func(group string, slaveID int) bool, durableEnd func() (int64, error)) (string, error) {
	return s.HandoverThen(ctx, match, durableEnd, nil)
}

// HandoverThen is Handover calling ready (when set) once the slave has
// caught up, just before it is told to take over: what ready writes on a
// slave's link (a control answer) reaches it before promote does.
func (s *Shipper) HandoverThen(ctx context.Context, match func(group string, slaveID int) bool, durableEnd func() (int64, error), ready func(name string, end int64)) (string, error) {
	var ss *session
	s.mu.Lock()
	for k, x := range s.sessions {
		if match(k.Group, k.SlaveID) {
			ss = x
			break
		}
	}
	s.mu.Unlock()
	if ss == nil {
		return "", errors.New("georeplicator: no connected slave matches")
	}
	name := fmt.Sprintf("%s/%d", ss.key.Group, ss.key.SlaveID)
	var end int64
	for {
		e, err := durableEnd()
		if err != nil {
			return name, err
		}
		if e == end {
			break
		}
		end = e
		for s.prog.durableOf(ss.key) < end {
			select {
			case <-ctx.Done():
				return name, fmt.Errorf("georeplicator: slave %s did not catch up to %d: %w", name, end, ctx.Err())
			case <-ss.done:
				return name, fmt.Errorf("georeplicator: slave %s disconnected before catching up", name)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if ready != nil {
		ready(name, end)
	}
	ss.promoteAt.Store(end)
	signal(ss.promoteWake)
	return name, nil
}

// durableOf is the log position slave k reported durable (-1 unknown).
func (p *progress) durableOf(k slaveKey) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.m[k]; sp != nil {
		return sp.Durable
	}
	return -1
}
