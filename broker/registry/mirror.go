package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/go-zookeeper/zk"
)

// Registration is what a Registry registered, and writes again after every
// session expiry: its broker node and its topics.
type Registration struct {
	BrokerID int
	SlaveID  int // -1 for a master
	// Broker: the broker node is registered (RegisterBroker, not undone by
	// UnregisterAll).
	Broker   bool
	URL      string // meta://host:port
	Checksum uint32 // master_config_checksum
	Topics   map[string]TopicRegistration
	// Problem is why the broker node is not written although Broker is
	// set (a slave's node held by another live session after a new
	// session), "" otherwise.
	Problem string
}

// TopicRegistration is one registered topic's settings.
type TopicRegistration struct {
	NumPartitions                  int
	AcceptPublish, AcceptSubscribe bool
}

// Master reports whether this is a registered master's registration.
func (g Registration) Master() bool { return g.Broker && g.SlaveID < 0 }

// Registration returns what this registry registered.
// It does not wait for a registration write under way: it reports the
// registration as the last finished write left it.
func (r *Registry) Registration() Registration {
	w := r.written.Load()
	g := Registration{BrokerID: r.opts.BrokerID, SlaveID: w.slaveID, Broker: w.broker,
		URL: r.URL(), Checksum: w.checksum, Topics: make(map[string]TopicRegistration, len(w.topics)), Problem: w.problem}
	for name, t := range w.topics {
		g.Topics[name] = TopicRegistration{NumPartitions: t.numPartitions, AcceptPublish: t.acceptPublish, AcceptSubscribe: t.acceptSub}
	}
	return g
}

// MasterMirror is a master's registration as it is copied into the
// ensemble of another site (one ZooKeeper ensemble per site): the master's
// own nodes, its replication address and its generation, so that clients
// and slaves that use that ensemble find the master there too.
type MasterMirror struct {
	Registration
	// ReplicationAddr is published at ids/<id>/replication ("" publishes none).
	ReplicationAddr string
	// Generation is the master's generation: ids/<id>/generation is raised
	// to it when lower (never lowered), with Raiser as its raiser.
	Generation uint64
	// Raiser is who raised Generation (the promotion's raiser as the
	// master's own ensemble names it); with no Site, the mirroring
	// registry's Options.Site is written, so that every ensemble names the
	// site that holds the generation.
	Raiser Raiser
	// LeaveSlave, when set, is the slaveId a master handing over to this
	// one takes in this ensemble (a switchover; set only for the ensemble
	// of the site that handed over). Where a topic's master entry under
	// topics-pub is still another session's, it is replaced together with
	// the creation of that slave's entry, in one multi, which the old
	// master then finds and leaves as it is (it borrows it, as in one
	// shared ensemble: see writeTopicLocked): the topic's children change
	// once in that ensemble, not twice (the replacement, then the old
	// master's slave entry). That entry stays while this session lives,
	// also once this registration is no master's (see unmirror). MetaQ 1.4.6's Java producer drops its
	// connection, and fails the put in flight on it, at every change.
	LeaveSlave *int
}

// takeSupersededMasterLocked replaces the brokerId's master node in this
// ensemble with this session's (the mirrored master's url) when another
// session holds it and this ensemble's generation is gen, the mirrored
// master's: the holder is a master that generation superseded (killed, its session not yet expired; or alive and about to
// step down when it reads the generation). Waiting for its session would
// leave clients of this site sent to it for a whole session timeout. A
// holder in an ensemble whose generation is not (yet) gen is waited for as
// before.
func (r *Registry) takeSupersededMasterLocked(ctx context.Context, gen uint64) error {
	if gen == 0 {
		return nil
	}
	path := r.paths.Broker(r.opts.BrokerID, -1)
	_, st, err := r.Get(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registry: mirror: read the master node %s: %w", path, err)
	}
	if st.EphemeralOwner == 0 || st.EphemeralOwner == r.conn.SessionID() {
		return nil
	}
	cur, by, err := r.GenerationRaiser(ctx, r.opts.BrokerID)
	if err != nil {
		return fmt.Errorf("registry: mirror: read the generation: %w", err)
	}
	if cur != gen {
		return nil
	}
	if r.raisedElsewhere(by) {
		// Generation gen is another site's promotion: the holder may be
		// its master, and this one stepped down for it.
		return fmt.Errorf("registry: mirror: %w: generation %d of %s was raised by site %s, not this site %s",
			ErrNotCurrentMaster, gen, path, by.Site, r.opts.Site)
	}
	// Replaced in one step: clients of this ensemble find a master node
	// throughout (registerBrokerLocked then finds it this session's).
	err = r.call(ctx, func() error {
		_, err := r.conn.Multi(r.replaceMasterNodeOps(path, st.Version)...)
		return err
	})
	switch {
	case errors.Is(err, ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, ErrNodeExists):
		return nil // it changed meanwhile: registerBrokerLocked deals with it
	case err != nil:
		return fmt.Errorf("registry: mirror: replace the master node %s of session 0x%x: %w", path, st.EphemeralOwner, err)
	}
	r.log.Warn("REGISTRY: took the master node from the session of a master this generation superseded, instead of waiting for it to expire",
		"path", path, "session", fmt.Sprintf("0x%x", st.EphemeralOwner), "generation", gen)
	return nil
}

// replaceMasterNodeOps are the operations of a multi that replaces the
// master node at path, another session's at version, with this session's
// in one step: clients of the ensemble find a master node throughout.
func (r *Registry) replaceMasterNodeOps(path string, version int32) []any {
	return []any{&zk.DeleteRequest{Path: path, Version: version},
		&zk.CreateRequest{Path: path, Data: []byte(r.URL()), Acl: openACL, Flags: zk.FlagEphemeral}}
}

// raisedElsewhere says whether by, the raiser of a generation, is a site
// other than this registry's (both named).
func (r *Registry) raisedElsewhere(by Raiser) bool {
	return by.Site != "" && r.opts.Site != "" && by.Site != r.opts.Site
}

// CheckNotSuperseded fails with ErrNotCurrentMaster when this ensemble
// holds a newer generation of the brokerId than gen, a master's: that
// master is superseded here and must write nothing of its registration.
// It reads through the unlocked read (Generation), so a MasterGuard may
// call it.
func (r *Registry) CheckNotSuperseded(ctx context.Context, gen uint64) error {
	cur, err := r.Generation(ctx, r.opts.BrokerID)
	if err != nil {
		return fmt.Errorf("read the generation of broker %d: %w", r.opts.BrokerID, err)
	}
	if cur > gen {
		return fmt.Errorf("%w: this ensemble has generation %d, the master %d", ErrNotCurrentMaster, cur, gen)
	}
	return nil
}

// replicationNode is where a master publishes its replication listener
// (the bundle's shipper writes it into the master's own ensemble).
const replicationNode = "replication"

// Mirror makes this registry hold m as its own registration: a master's
// registration written by another site's bundle into this registry's
// ensemble. It writes only what changed since the last call (all of it in a
// new session); the registry re-writes the broker and topic nodes after a
// session expiry as it does for its own. When m is not a registered master
// (the bundle stepped down, was demoted, or unregistered), whatever an
// earlier Mirror wrote is removed, so that the new master can take the
// master node. Like RegisterBroker it waits up to the session timeout for a
// master node held by another session, and then fails with
// ErrBrokerNodeHeld: run it where that wait blocks nothing else.
//
// The registry must have been created as a master of m's brokerId (Options
// BrokerID, Slave false) and must not register anything of its own.
func (r *Registry) Mirror(ctx context.Context, m MasterMirror) error {
	if m.BrokerID != r.opts.BrokerID || !r.master() {
		return fmt.Errorf("registry: mirror of broker %d into a registry of %s", m.BrokerID, BrokerString(r.opts.BrokerID, r.opts.SlaveID))
	}
	if !m.Master() {
		return r.unmirror(ctx)
	}
	// A master this ensemble knows to be superseded (one that was paused
	// while another site was promoted, and has not read the newer
	// generation yet) writes nothing here: it would wait for the new
	// master's node, or publish its replication address to this site's
	// slaves.
	if err := r.CheckNotSuperseded(ctx, m.Generation); err != nil {
		return fmt.Errorf("registry: mirror: %w", err)
	}
	if by := m.Raiser; by.Generation == m.Generation && r.raisedElsewhere(by) {
		// The master's own ensemble names another site as the raiser of
		// its generation: it follows that site's master (it stepped down
		// and is being demoted), whose node it must not take here.
		return fmt.Errorf("registry: mirror: %w: generation %d was raised by site %s, not this site %s",
			ErrNotCurrentMaster, m.Generation, by.Site, r.opts.Site)
	}
	repl := r.paths.BrokerID(m.BrokerID) + "/" + replicationNode
	r.regMu.Lock()
	defer r.unlockReg()
	session := r.conn.SessionID()
	fresh := r.state.session != session
	if m.ReplicationAddr != "" && !r.state.broker {
		// Before the master node, as the master publishes it in its own
		// ensemble: a slave that sees the master sees its stream. A node
		// another master left is replaced below, once the master node is
		// ours.
		err := r.createEphemeral(ctx, repl, []byte(m.ReplicationAddr))
		if err != nil && !errors.Is(err, ErrNodeExists) {
			return fmt.Errorf("registry: mirror %s: %w", repl, err)
		}
		r.state.mirrorRepl = r.state.mirrorRepl || err == nil
	}
	// A node removed behind this session's back (by hand, by an older
	// master stepping down) is written again, with the topics' entries:
	// a master keeps its registration present in every ensemble.
	missing := false
	if r.state.broker && !fresh {
		ok, st, err := r.Exists(ctx, r.paths.Broker(m.BrokerID, -1))
		if err != nil {
			return fmt.Errorf("registry: mirror: read the master node: %w", err)
		}
		missing = !ok || st.EphemeralOwner != session
	}
	if missing {
		fresh = true
	}
	if !r.state.broker || fresh || r.URL() != m.URL || r.state.checksum != m.Checksum {
		r.SetURL(m.URL)
		r.state.checksum = m.Checksum
		if err := r.takeSupersededMasterLocked(ctx, m.Generation); err != nil {
			return err
		}
		if err := r.registerBrokerLocked(ctx); err != nil {
			return err
		}
		r.state.broker = true
	}
	for name, t := range m.Topics {
		want := topicReg{numPartitions: t.NumPartitions, acceptPublish: t.AcceptPublish, acceptSub: t.AcceptSubscribe}
		if m.LeaveSlave != nil && want.acceptPublish {
			if err := r.replacePubLeavingSlaveLocked(ctx, name, want, *m.LeaveSlave); err != nil {
				return err
			}
		}
		old, known := r.state.topics[name]
		if known && old == want && !fresh {
			// Written already; an entry removed behind this session's
			// back (an older master stepping down deletes the nodes it
			// owns, and a node this session replaced in one step has the
			// version the old one had) is written again.
			gone, err := r.topicGoneLocked(ctx, name, want, session)
			if err != nil {
				return fmt.Errorf("registry: mirror: read topic %s: %w", name, err)
			}
			if !gone {
				continue
			}
		}
		r.state.topics[name] = want
		if known && old != want {
			if err := r.deleteTopicLocked(ctx, name); err != nil {
				return err
			}
		}
		if err := r.writeTopicLocked(ctx, name, want, false); err != nil {
			return err
		}
	}
	for name := range maps.Clone(r.state.topics) {
		if _, ok := m.Topics[name]; ok {
			continue
		}
		delete(r.state.topics, name)
		if err := r.deleteTopicLocked(ctx, name); err != nil {
			return err
		}
	}
	r.state.session = session
	if err := r.mirrorReplicationLocked(ctx, repl, m.ReplicationAddr); err != nil {
		return err
	}
	r.state.mirrorRepl = m.ReplicationAddr != ""
	if m.Generation > r.state.mirrorGen {
		by := m.Raiser
		if by.Site == "" || by.Generation != m.Generation {
			by = Raiser{Site: r.opts.Site}
		}
		gen, _, err := r.RaiseGenerationToBy(ctx, m.BrokerID, m.Generation, by, false)
		if err != nil {
			return err
		}
		r.state.mirrorGen = gen
	}
	return nil
}

// replacePubLeavingSlaveLocked replaces topic's master entry under
// topics-pub when another session holds it (the master handing over) with
// this session's, and creates in the same multi the entry of slaveID (the
// slaveId the old master takes) when missing; that entry is kept as
// keptPub is for a master's own registry, and deleted with the topic's
// entries. Nothing is done when the entry is missing or already this
// session's, or when the slave's entry exists; a multi that fails because
// a node changed meanwhile is left to writeTopicLocked, which replaces the
// master entry alone.
func (r *Registry) replacePubLeavingSlaveLocked(ctx context.Context, topic string, t topicReg, slaveID int) error {
	if slaveID < 0 {
		return nil
	}
	_, pub, _ := r.topicPaths(topic)
	_, st, err := r.Get(ctx, pub)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registry: mirror: read %s: %w", pub, err)
	}
	if st.EphemeralOwner == r.conn.SessionID() {
		return nil
	}
	slave := r.paths.TopicsPub() + "/" + topic + "/" + BrokerString(r.opts.BrokerID, slaveID)
	if ok, _, err := r.Exists(ctx, slave); err != nil || ok {
		return err
	}
	masterJS := []byte(TopicJSON(t.numPartitions, BrokerString(r.opts.BrokerID, -1)))
	slaveJS := []byte(TopicJSON(t.numPartitions, BrokerString(r.opts.BrokerID, slaveID)))
	err = r.call(ctx, func() error {
		_, err := r.conn.Multi(&zk.DeleteRequest{Path: pub, Version: st.Version},
			&zk.CreateRequest{Path: pub, Data: masterJS, Acl: openACL, Flags: zk.FlagEphemeral},
			&zk.CreateRequest{Path: slave, Data: slaveJS, Acl: openACL, Flags: zk.FlagEphemeral})
		return err
	})
	switch {
	case err == nil:
		if r.state.keptPub == nil {
			r.state.keptPub = make(map[string]string)
		}
		r.state.keptPub[topic] = slave
		r.log.Info("REGISTRY: replaced the master's topic entry and left one for the slave it becomes", "topic", topic, "slave", BrokerString(r.opts.BrokerID, slaveID))
		return nil
	case errors.Is(err, ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, ErrNodeExists):
		return nil
	default:
		return fmt.Errorf("registry: mirror: replace %s: %w", pub, err)
	}
}

// mirrorReplicationLocked makes path hold addr as a node of this session
// ("" removes ours). It reads the node every time: another broker's clean
// stop deletes the node without looking whose it is.
func (r *Registry) mirrorReplicationLocked(ctx context.Context, path, addr string) error {
	if addr == "" {
		return r.deleteOwned(ctx, path)
	}
	data, st, err := r.Get(ctx, path)
	if err == nil && string(data) == addr && st.EphemeralOwner == r.conn.SessionID() {
		return nil
	}
	if err != nil && !errors.Is(err, ErrNoNode) {
		return fmt.Errorf("registry: mirror %s: %w", path, err)
	}
	if err := r.ensureEphemeral(ctx, path, []byte(addr)); err != nil {
		return fmt.Errorf("registry: mirror %s: %w", path, err)
	}
	return nil
}

// unmirror removes what Mirror wrote, without unregister's wait for
// clients. Only nodes of this session go: a master node another master took
// meanwhile (after a session expiry here) stays.
func (r *Registry) unmirror(ctx context.Context) error {
	r.regMu.Lock()
	defer r.unlockReg()
	if !r.state.broker && len(r.state.topics) == 0 && !r.state.mirrorRepl {
		return nil
	}
	id := r.opts.BrokerID
	paths := []string{r.paths.Broker(id, -1), r.paths.MasterConfigChecksum(id), r.paths.BrokerID(id) + "/" + replicationNode}
	for topic := range r.state.topics {
		legacy, pub, sub := r.topicPaths(topic)
		paths = append(paths, legacy, pub, sub)
	}
	// The slave entries LeaveSlave created stay (keptPub): the old master
	// borrows them, and when mastership moves back it takes its master
	// entry again in one step; deleting them here would change the
	// topics' children once more. They go with this session, or with
	// their topic.
	var errs []error
	for _, p := range paths {
		errs = append(errs, r.deleteOwned(ctx, p))
	}
	// ids/<id> holds the master's url for old clients: drop it unless
	// another master wrote its own since.
	idPath := r.paths.BrokerID(id)
	if data, st, err := r.Get(ctx, idPath); err == nil && string(data) == r.URL() {
		err := r.call(ctx, func() error { return r.conn.Delete(idPath, st.Version) })
		if err != nil && !errors.Is(err, ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			// Slaves or the generation below it: leave an empty value.
			err = r.call(ctx, func() error { _, err := r.conn.Set(idPath, []byte{}, st.Version); return err })
			if err != nil && !errors.Is(err, ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				errs = append(errs, fmt.Errorf("registry: clear %s: %w", idPath, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry: remove the mirrored master (retried at the next call): %w", err)
	}
	r.state.broker = false
	r.state.topics = make(map[string]topicReg)
	r.state.mirrorGen, r.state.mirrorRepl = 0, false
	r.log.Info("REGISTRY: removed the mirrored master registration", "broker", BrokerString(id, -1))
	return nil
}

// deleteOwned is DeleteOwned with the path in its error.
func (r *Registry) deleteOwned(ctx context.Context, path string) error {
	if err := r.DeleteOwned(ctx, path); err != nil {
		return fmt.Errorf("registry: delete %s: %w", path, err)
	}
	return nil
}

// topicGoneLocked reports whether one of topic's entries that t says this
// mirror writes is missing, or held by another session than session.
func (r *Registry) topicGoneLocked(ctx context.Context, topic string, t topicReg, session int64) (bool, error) {
	legacy, pub, sub := r.topicPaths(topic)
	paths := []string{legacy}
	if t.acceptPublish {
		paths = append(paths, pub)
	}
	if t.acceptSub {
		paths = append(paths, sub)
	}
	for _, p := range paths {
		ok, st, err := r.Exists(ctx, p)
		if err != nil {
			return false, err
		}
		if !ok || st.EphemeralOwner != session {
			return true, nil
		}
	}
	return false, nil
}
