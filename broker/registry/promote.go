package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
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
		// A retry: switchRoleLocked takes the role before it writes, so a
		// write that failed there left the role taken and the nodes
		// missing (a promotion's finisher retries then).
		return r.writeAllLocked(ctx, false)
	}
	return r.switchRoleLocked(ctx, "master", false, -1)
}

// BecomeMasterFrom is BecomeMaster for a promotion that takes over from
// the master whose session owner holds the brokerId's master node (a
// master handing over): that node and the topics' master entries under
// topics-pub that session holds are replaced by this registry's in one
// multi, before anything else changes. Clients listing a topic then find a
// master's partitions throughout: the old master's until that step, this
// one's from it on, also when the old master's session ends meanwhile (its
// nodes would go with it: a master cut off from its ZooKeeper hands over
// while its session runs out). With owner 0 and no master node (that
// session ended first) the node and the entries are created in one multi.
// Otherwise, or when the multi cannot be made (the node is no longer
// owner's, a node changed meanwhile, the MasterGuard refuses), it is
// BecomeMaster. Both may be retried after
// they failed: a registry already master writes its registration again.
func (r *Registry) BecomeMasterFrom(ctx context.Context, owner int64) error {
	r.regMu.Lock()
	took, err := r.takeOverLocked(ctx, owner)
	if took {
		defer r.unlockReg()
		if r.master() {
			return r.writeAllLocked(ctx, false) // a retry (BecomeMaster)
		}
		return r.switchRoleLocked(ctx, "master", false, -1)
	}
	r.unlockReg()
	if err != nil {
		r.log.Warn("REGISTRY: could not take the master's nodes over in one step; registering as master node by node",
			"owner", fmt.Sprintf("0x%x", owner), "err", err)
	}
	return r.BecomeMaster(ctx)
}

// takeOverLocked replaces, in one multi, the master node held by session
// owner and the topics' master entries under topics-pub that session
// holds (or that are missing) with this registry's, as a master's; it
// reports whether it did. With owner 0 it creates them, in one multi
// too, when there is no master node (the old master's session ended
// first): ZooKeeper names no master until this registry's <id>-m entries
// are there, and writing node by node (switchRoleLocked) left it so for
// seconds on a loaded machine. The caller holds regMu; the registry is
// still a slave's, whose switchRoleLocked then finds those nodes its own.
//
// A node that moves between its reads and the multi (another brokerId's new
// master leaving owner's entries out of topics-pub as superseded, which
// happens when a site is lost and its brokerIds are promoted together)
// fails the multi; it reads again and retries, a few times, rather than
// fall back to waiting out owner's session (30 s in deploy/).
func (r *Registry) takeOverLocked(ctx context.Context, owner int64) (bool, error) {
	for attempt := 1; ; attempt++ {
		took, err := r.takeOverOnceLocked(ctx, owner)
		moved := errors.Is(err, ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, ErrNodeExists)
		if took || !moved || attempt == takeOverAttempts {
			return took, err
		}
		r.log.Info("REGISTRY: a node moved while taking the master's nodes over; reading them again", "attempt", attempt, "err", err)
	}
}

// takeOverAttempts bounds takeOverLocked's reads and multis.
const takeOverAttempts = 3

// testHookTakeOverMulti, when set by a test, runs just before
// takeOverOnceLocked's multi.
var testHookTakeOverMulti func()

// takeOverOnceLocked is one read and multi of takeOverLocked.
func (r *Registry) takeOverOnceLocked(ctx context.Context, owner int64) (bool, error) {
	if !r.state.broker {
		return false, nil
	}
	master := r.paths.Broker(r.opts.BrokerID, -1)
	_, st, err := r.Get(ctx, master)
	missing := errors.Is(err, ErrNoNode)
	switch {
	case missing && owner != 0, !missing && (owner == 0 || st.EphemeralOwner != owner):
		return false, nil
	case err != nil && !missing:
		return false, fmt.Errorf("registry: read the master node %s: %w", master, err)
	}
	if g := r.opts.MasterGuard; g != nil {
		if err := g(ctx); err != nil {
			return false, fmt.Errorf("registry: writing nothing as master of broker %d: %w", r.opts.BrokerID, err)
		}
	}
	name := BrokerString(r.opts.BrokerID, -1)
	var stale []staleEntry
	ops := r.replaceMasterNodeOps(master, st.Version)
	if missing {
		ops = ops[1:] // nothing to delete: create only
	}
	topics := 0
	for topic, t := range r.state.topics {
		if !t.acceptPublish {
			continue
		}
		pub := r.paths.TopicsPub() + "/" + topic + "/" + name
		create := &zk.CreateRequest{Path: pub, Data: []byte(TopicJSON(t.numPartitions, name)), Acl: openACL, Flags: zk.FlagEphemeral}
		_, st, err := r.Get(ctx, pub)
		switch {
		case errors.Is(err, ErrNoNode):
			ops = append(ops, create)
		case err != nil:
			return false, fmt.Errorf("registry: read %s: %w", pub, err)
		case owner != 0 && st.EphemeralOwner == owner:
			ops = append(ops, &zk.DeleteRequest{Path: pub, Version: st.Version}, create)
		default:
			continue // another session's: writeTopicLocked replaces it
		}
		topics++
		// The topic's children change: the same multi leaves out the
		// masters a newer generation superseded (ensureMasterPubLocked).
		s, err := r.supersededSiblingsLocked(ctx, topic)
		if err != nil {
			return false, err
		}
		stale = append(stale, s...)
	}
	multi := func(ops []any) error {
		return r.call(ctx, func() error { _, err := r.conn.Multi(ops...); return err })
	}
	if h := testHookTakeOverMulti; h != nil {
		h()
	}
	err = multi(r.withStaleDeletes(ops, stale))
	if len(stale) > 0 && (errors.Is(err, ErrNoNode) || errors.Is(err, zk.ErrBadVersion)) {
		// A superseded entry moved meanwhile (its new master registered,
		// its session ended): take over without leaving any out.
		stale = nil
		err = multi(ops)
	}
	if err == nil && len(stale) > 0 {
		names := make([]string, 0, len(stale))
		for _, s := range stale {
			names = append(names, s.name)
		}
		r.log.Warn("REGISTRY: left out of the topics' publishers the masters a newer generation superseded, which their new masters list again when they register",
			"leftOut", names)
	}
	if err != nil {
		if missing {
			return false, fmt.Errorf("registry: create the master node and topic entries in one step: %w", err)
		}
		return false, fmt.Errorf("registry: take over the master node and topic entries of session 0x%x: %w", owner, err)
	}
	if missing {
		r.log.Info("REGISTRY: no master node was left; created it and the topics' master entries in one step", "topics", topics)
		return true, nil
	}
	r.log.Info("REGISTRY: took over the master node and the topics' master entries of the master handing over, in one step",
		"session", fmt.Sprintf("0x%x", owner), "topics", topics)
	return true, nil
}

// withStaleDeletes is ops followed by the deletion of each stale entry
// (once each: topics' entries of one superseded master are distinct paths,
// but a path listed twice would fail the multi).
func (r *Registry) withStaleDeletes(ops []any, stale []staleEntry) []any {
	if len(stale) == 0 {
		return ops
	}
	out := append(make([]any, 0, len(ops)+len(stale)), ops...)
	seen := map[string]bool{}
	for _, s := range stale {
		if !seen[s.path] {
			seen[s.path] = true
			out = append(out, &zk.DeleteRequest{Path: s.path, Version: s.version})
		}
	}
	return out
}

// BecomeSlave turns a master's registration into that of slave slaveID of
// the same brokerId, at run time (a master that handed over or stepped
// down): the master's nodes go (ids/<id>/master, the config checksum, the
// topics under <id>-m), so clients that follow ZooKeeper leave at once and
// the new master can take the master node, and the slave's are written
// instead, also after later session expiries. It may be retried after it
// failed: switchRoleLocked takes the role before it writes, so a write
// that failed there (ZooKeeper out of reach) left the role taken and the
// slave's nodes missing, and the retry writes them (as slave slaveID, which
// may differ from the failed attempt's). A registry that was a slave's all
// along is left as it is, unless slaveID is another one: it then registers
// as that one.
func (r *Registry) BecomeSlave(ctx context.Context, slaveID int) error {
	if slaveID < 0 {
		return fmt.Errorf("registry: become slave: slaveId %d", slaveID)
	}
	r.regMu.Lock()
	defer r.unlockReg()
	if !r.master() {
		switch {
		case slaveID != r.opts.SlaveID:
			// The retry takes another slaveId (the first one's node was
			// held by another live session), or a slave's registration
			// (a promotion that failed before it switched) follows the
			// slaveId its demotion chose.
			return r.switchRoleLocked(ctx, "slave", true, slaveID)
		case r.state.unwritten:
			return r.writeAllLocked(ctx, true)
		}
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
		r.state.unwritten = true
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
