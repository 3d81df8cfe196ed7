package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// AwaitMasterFree waits until no other live session holds this brokerId's
// master node (ids/<id>/master), up to the session timeout, then fails with
// ErrBrokerNodeHeld. A promoted slave calls it (BecomeMaster does too)
// before it changes any of its own nodes: changing them while a lost
// master's session still holds its nodes makes clients re-read the brokers
// and find the lost master there. The MetaQ 1.4.6 Java producer then
// connects to it on its ZooKeeper event thread, which stays blocked for
// 10 s and handles the new master's registration only after. A node this
// broker's previous process left is no wait: registering replaces it.
func (r *Registry) AwaitMasterFree(ctx context.Context) error {
	path := r.paths.Broker(r.opts.BrokerID, -1)
	url := []byte(r.URL())
	deadline := time.Now().Add(r.opts.SessionTimeout + time.Second)
	logged := false
	for {
		exists, w, err := r.ExistsW(ctx, path)
		if err != nil {
			return fmt.Errorf("registry: wait for the master node %s: %w", path, err)
		}
		if !exists {
			return nil
		}
		value, st, err := r.Get(ctx, path)
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("registry: wait for the master node %s: %w", path, err)
		}
		if st.EphemeralOwner == r.conn.SessionID() || r.leftByUs(st.EphemeralOwner, value, url) {
			return nil
		}
		if !logged {
			r.log.Warn("REGISTRY: the master node is held by another session; waiting for it to expire before taking over",
				"path", path, "owner", fmt.Sprintf("0x%x", st.EphemeralOwner), "max_wait", r.opts.SessionTimeout)
			logged = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s belongs to live session 0x%x after waiting %v; is the master of brokerId %d still running?",
				ErrBrokerNodeHeld, path, st.EphemeralOwner, r.opts.SessionTimeout, r.opts.BrokerID)
		}
		select {
		case <-w:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return fmt.Errorf("registry: wait for the master node %s: %w", path, ctx.Err())
		}
	}
}

// TakeMasterNode removes the brokerId's master node when session owner
// still holds it: a promotion that raised the generation past a dead
// master's takes its node instead of waiting for its session to expire.
// It reports whether it removed one.
func (r *Registry) TakeMasterNode(ctx context.Context, owner int64) (bool, error) {
	path := r.paths.Broker(r.opts.BrokerID, -1)
	_, st, err := r.Get(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry: read the master node %s: %w", path, err)
	}
	if st.EphemeralOwner != owner {
		return false, nil
	}
	err = r.call(ctx, func() error { return r.conn.Delete(path, st.Version) })
	if errors.Is(err, ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry: remove the master node %s of session 0x%x: %w", path, owner, err)
	}
	return true, nil
}
