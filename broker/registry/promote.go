package registry

import (
	"context"
	"fmt"
)

// BecomeMaster turns a slave's registration into its brokerId's master's,
// at run time (a promoted slave site): the slave's own nodes go, and the
// master's are written (ids/<id>/master, the config checksum, every
// registered topic under <id>-m), as RegisterBroker and RegisterTopic write
// them, also after later session expiries. Like RegisterBroker it waits up
// to the session timeout for a master node still held by another session,
// and then fails with ErrBrokerNodeHeld.
func (r *Registry) BecomeMaster(ctx context.Context) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.master() {
		return nil
	}
	if r.state.broker {
		if err := r.Delete(ctx, r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)); err != nil {
			return fmt.Errorf("registry: become master: %w", err)
		}
	}
	for topic := range r.state.topics {
		if err := r.deleteTopicLocked(ctx, topic); err != nil {
			return fmt.Errorf("registry: become master: %w", err)
		}
	}
	r.opts.Slave, r.opts.SlaveID = false, -1
	if r.state.broker {
		if err := r.registerBrokerLocked(ctx); err != nil {
			return err
		}
	}
	for topic, t := range r.state.topics {
		if err := r.writeTopicLocked(ctx, topic, t); err != nil {
			return err
		}
	}
	r.log.Warn("REGISTRY: registered as master", "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID), "topics", len(r.state.topics))
	return nil
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
	if r.state.broker {
		if err := r.Delete(ctx, r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)); err != nil {
			return fmt.Errorf("registry: become slave: %w", err)
		}
		if err := r.Delete(ctx, r.paths.MasterConfigChecksum(r.opts.BrokerID)); err != nil {
			return fmt.Errorf("registry: become slave: %w", err)
		}
	}
	for topic := range r.state.topics {
		if err := r.deleteTopicLocked(ctx, topic); err != nil {
			return fmt.Errorf("registry: become slave: %w", err)
		}
	}
	r.opts.Slave, r.opts.SlaveID = true, slaveID
	if r.state.broker {
		if err := r.registerBrokerLocked(ctx); err != nil {
			return err
		}
	}
	for topic, t := range r.state.topics {
		if err := r.writeTopicLocked(ctx, topic, t); err != nil {
			return err
		}
	}
	r.log.Warn("REGISTRY: registered as slave", "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID), "topics", len(r.state.topics))
	return nil
}
