package registry

import (
	"context"
	"fmt"
	"time"
)

// BecomeMaster turns a slave's registration into its brokerId's master's,
// at run time (a promoted slave site): the slave's own nodes go (but for
// its entries under topics-pub: see switchRoleLocked), and the
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
	defer r.unlockReg()
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
	defer r.unlockReg()
	if !r.master() {
		return nil
	}
	return r.switchRoleLocked(ctx, "slave", true, slaveID, r.paths.MasterConfigChecksum(r.opts.BrokerID))
}

// switchRoleLocked deletes this broker's nodes (its ids/<id> node, the
// extra paths, its topics' entries), takes the new role and writes them
// again as that role. The caller holds regMu.
//
// Its entries under topics-pub change as little as MetaQ's Java producer
// needs (see writeTopicLocked): a slave becoming master leaves its slave
// entry there (keptPub) for the old master, which takes its slaveId; a
// master becoming slave leaves an entry of its new name that holds what
// it would write, its own kept one or the new master's.
func (r *Registry) switchRoleLocked(ctx context.Context, role string, slave bool, slaveID int, extra ...string) error {
	if r.state.broker {
		for _, p := range append([]string{r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)}, extra...) {
			if err := r.DeleteOwned(ctx, p); err != nil {
				return fmt.Errorf("registry: become %s: %w", role, err)
			}
		}
	}
	newName := BrokerString(r.opts.BrokerID, slaveID)
	if !slave {
		newName = BrokerString(r.opts.BrokerID, -1)
	}
	for topic, t := range r.state.topics {
		legacy, pub, sub := r.topicPaths(topic)
		del := []string{legacy, pub, sub}
		if kept, ok := r.state.keptPub[topic]; ok {
			delete(r.state.keptPub, topic)
			if kept != r.paths.TopicsPub()+"/"+topic+"/"+newName {
				del = append(del, kept)
			}
		}
		if !slave && !r.master() && t.acceptPublish {
			del = []string{legacy, sub}
			if r.state.keptPub == nil {
				r.state.keptPub = make(map[string]string)
			}
			r.state.keptPub[topic] = pub
		}
		for _, p := range del {
			if err := r.DeleteOwned(ctx, p); err != nil {
				return fmt.Errorf("registry: become %s: unregister topic %s: %w", role, topic, err)
			}
		}
	}
	r.opts.Slave, r.opts.SlaveID = slave, slaveID
	if err := r.writeAllLocked(ctx, slave); err != nil {
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
	r.unlockReg()
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
