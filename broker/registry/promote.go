package registry

import (
	"context"
	"fmt"
	"time"
)

// BecomeMaster turns a slave's registration into its brokerId's master's,
// at run time (a promoted slave site): the slave's own nodes go, and the
// master's are written (ids/<id>/master, the config checksum, every
// registered topic under <id>-m), as RegisterBroker and RegisterTopic write
// them, also after later session expiries. Like RegisterBroker it waits up
// to the session timeout for a master node still held by another session,
// and then fails with ErrBrokerNodeHeld; it waits before it changes any
// node (AwaitMasterFree).
func (r *Registry) BecomeMaster(ctx context.Context) error {
	if err := r.AwaitMasterFree(ctx); err != nil {
		return err
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.master() {
		return nil
	}
	return r.switchRoleLocked(ctx, "master", false, -1)
}

// BecomeSlave turns a master's registration into that of slave slaveID of
// the same brokerId, at run time (a master that handed over or stepped
// down): the master's nodes go (ids/<id>/master, the config checksum, the
// topics under <id>-m), so clients that follow ZooKeeper leave at once and
// the new master can take the master node, and the slave's are written
// instead, also after later session expiries.
func (r *Registry) BecomeSlave(ctx context.Context, slaveID int) error {
	if slaveID < 0 {
		return fmt.Errorf("registry: become slave: slaveId %d", slaveID)
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if !r.master() {
		return nil
	}
	return r.switchRoleLocked(ctx, "slave", true, slaveID, r.paths.MasterConfigChecksum(r.opts.BrokerID))
}

// switchRoleLocked deletes this broker's nodes (its ids/<id> node, the
// extra paths, its topics' entries), takes the new role and writes them
// again as that role. The caller holds regMu.
func (r *Registry) switchRoleLocked(ctx context.Context, role string, slave bool, slaveID int, extra ...string) error {
	if r.state.broker {
		for _, p := range append([]string{r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)}, extra...) {
			if err := r.DeleteOwned(ctx, p); err != nil {
				return fmt.Errorf("registry: become %s: %w", role, err)
			}
		}
	}
	for topic := range r.state.topics {
		if err := r.deleteTopicLocked(ctx, topic); err != nil {
			return fmt.Errorf("registry: become %s: %w", role, err)
		}
	}
	r.opts.Slave, r.opts.SlaveID = slave, slaveID
	if err := r.writeAllLocked(ctx); err != nil {
		return err
	}
	r.log.Warn("REGISTRY: registered as "+role, "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID), "topics", len(r.state.topics))
	return nil
}

// AwaitTopicsTaken waits until no topic entry this registry wrote is held
// by its session any more (a new master replaced them), or ctx ends. A
// master handing over calls it before BecomeSlave, so that clients listing
// a topic always find a master's partitions: its own until the new
// master's replace them.
func (r *Registry) AwaitTopicsTaken(ctx context.Context) error {
	r.regMu.Lock()
	var paths []string
	for topic := range r.state.topics {
		legacy, pub, sub := r.topicPaths(topic)
		paths = append(paths, legacy, pub, sub)
	}
	r.regMu.Unlock()
	for {
		held := ""
		for _, p := range paths {
			ok, err := r.Owns(ctx, p)
			if err != nil {
				return fmt.Errorf("registry: wait for the new master's topic entries: %w", err)
			}
			if ok {
				held = p
				break
			}
		}
		if held == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registry: %s is still this broker's: %w", held, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
