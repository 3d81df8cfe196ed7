package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"metaq/internal/hostaddr"
)

func (r *Registry) master() bool { return r.opts.SlaveID < 0 }

// URL is the meta://host:port this broker advertises: the one set by SetURL
// (the broker's listener), else built from Options.Host (or hostaddr.Local)
// and Port.
func (r *Registry) URL() string {
	r.urlMu.Lock()
	u := r.url
	r.urlMu.Unlock()
	if u != "" {
		return u
	}
	host := r.opts.Host
	if host == "" {
		host = hostaddr.Local()
	}
	return BrokerURL(host, r.opts.Port)
}

// SetURL sets the meta://host:port that RegisterBroker writes from now on,
// including the re-registrations after a session expiry. The broker sets
// the address it actually listens on, which may differ from serverPort.
func (r *Registry) SetURL(url string) {
	r.urlMu.Lock()
	r.url = url
	r.urlMu.Unlock()
}

// RegisterBroker writes the broker's own nodes (see ZooKeeper layout in broker/wire/doc.go): the ephemeral
// ids/<id>/master (or slave<n>) holding meta://host:port; for a master also
// the data of the persistent ids/<id> (for old clients) and the ephemeral
// master_config_checksum. They are written again after every session expiry
// until UnregisterAll.
//
// The broker node is created without overwrite, as MetaQ does. A node left
// by this broker's previous process (see Options.SessionFile) is replaced at
// once. When it is held by another session, RegisterBroker waits up to the
// session timeout for that session to expire, and then fails with
// ErrBrokerNodeHeld.
func (r *Registry) RegisterBroker(ctx context.Context) error {
	r.regMu.Lock()
	defer r.unlockReg()
	if err := r.registerBrokerLocked(ctx); err != nil {
		return err
	}
	r.state.broker = true
	r.state.session = r.conn.SessionID()
	return nil
}

// RegisterBrokerAs is RegisterBroker with the advertised url
// (meta://host:port) and the config checksum given by the caller, as the
// broker knows them after it started listening or reloaded.
func (r *Registry) RegisterBrokerAs(ctx context.Context, url string, checksum uint32) error {
	r.SetURL(url)
	r.regMu.Lock()
	r.state.checksum = checksum
	r.unlockReg()
	return r.RegisterBroker(ctx)
}

func (r *Registry) registerBrokerLocked(ctx context.Context) error {
	if err := r.guardMasterLocked(ctx); err != nil {
		return err
	}
	path := r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)
	url := []byte(r.URL())
	r.log.Info("REGISTRY: registering broker", "path", path, "url", string(url))
	var deadline time.Time
	for {
		err := r.createEphemeral(ctx, path, url)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNodeExists) {
			return fmt.Errorf("registry: register broker %s: %w", path, err)
		}
		old, st, err := r.Get(ctx, path)
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("registry: register broker %s: %w", path, err)
		}
		if st.EphemeralOwner != r.conn.SessionID() && r.leftByUs(st.EphemeralOwner, old, url) {
			// Our previous process died without closing its session: the
			// node is stale, no need to wait for the session to expire.
			err := r.call(ctx, func() error { return r.conn.Delete(path, st.Version) })
			if err != nil && !errors.Is(err, ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				return fmt.Errorf("registry: remove the stale broker node %s: %w", path, err)
			}
			r.log.Info("REGISTRY: replaced the broker node left by this broker's previous process",
				"path", path, "old_session", fmt.Sprintf("0x%x", st.EphemeralOwner))
			continue
		}
		if st.EphemeralOwner == r.conn.SessionID() {
			// Ours already (a retry after a lost reply): keep it, refresh the value.
			if err := r.call(ctx, func() error { _, err := r.conn.Set(path, url, -1); return err }); err != nil {
				return fmt.Errorf("registry: register broker %s: %w", path, err)
			}
			break
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(r.opts.SessionTimeout + time.Second)
			r.log.Warn("REGISTRY: broker node held by another session, waiting for it to expire",
				"path", path, "owner", fmt.Sprintf("0x%x", st.EphemeralOwner), "max_wait", r.opts.SessionTimeout)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s belongs to live session 0x%x after waiting %v; is another broker with brokerId %d running?",
				ErrBrokerNodeHeld, path, st.EphemeralOwner, r.opts.SessionTimeout, r.opts.BrokerID)
		}
		exists, w, err := r.ExistsW(ctx, path)
		if err != nil {
			return fmt.Errorf("registry: register broker %s: %w", path, err)
		}
		if !exists {
			continue
		}
		select {
		case <-w:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return fmt.Errorf("registry: register broker %s: %w", path, ctx.Err())
		}
	}
	r.state.problem = ""
	if !r.master() {
		return nil
	}
	// ids/<id> exists now as the master's persistent parent; old clients read
	// the url from it.
	if err := r.SetPersistent(ctx, r.paths.BrokerID(r.opts.BrokerID), url); err != nil {
		return fmt.Errorf("registry: register broker id node: %w", err)
	}
	if err := r.writeChecksumLocked(ctx); err != nil {
		return err
	}
	return nil
}

func (r *Registry) writeChecksumLocked(ctx context.Context) error {
	path := r.paths.MasterConfigChecksum(r.opts.BrokerID)
	sum := strconv.FormatUint(uint64(r.state.checksum), 10)
	if err := r.ensureEphemeral(ctx, path, []byte(sum)); err != nil {
		return fmt.Errorf("registry: write %s: %w", path, err)
	}
	return nil
}

// SetConfigChecksum records the CRC32 of a (re)loaded server.ini and, on a
// registered master, rewrites master_config_checksum, which makes async
// slaves restart their subscription (see Reload and Async slaves in broker/wire/doc.go). A slave only records it.
func (r *Registry) SetConfigChecksum(ctx context.Context, sum uint32) error {
	r.regMu.Lock()
	defer r.unlockReg()
	r.state.checksum = sum
	if !r.state.broker || !r.master() {
		return nil
	}
	return r.writeChecksumLocked(ctx)
}

// RegisterTopic registers a topic's three nodes (topics, and topics-pub /
// topics-sub when acceptPublish / acceptSubscribe) under this broker's name
// (<id>-m or <id>-s<n>). A topic already registered with the same settings is
// left alone; one whose settings changed has its nodes deleted and created
// again, as a MetaQ reload does. The topic is registered again after every
// session expiry until UnregisterAll.
func (r *Registry) RegisterTopic(ctx context.Context, topic string, numPartitions int, acceptPublish, acceptSubscribe bool) error {
	if topic == "" || numPartitions <= 0 {
		return fmt.Errorf("registry: register topic %q with %d partitions: invalid", topic, numPartitions)
	}
	t := topicReg{numPartitions: numPartitions, acceptPublish: acceptPublish, acceptSub: acceptSubscribe}
	r.regMu.Lock()
	defer r.unlockReg()
	old, known := r.state.topics[topic]
	if known && old == t && r.state.session == r.conn.SessionID() {
		return nil
	}
	// Recorded before writing, so that a session expiry in the middle still
	// replays it.
	r.state.topics[topic] = t
	if err := r.guardMasterLocked(ctx); err != nil {
		return err
	}
	if known {
		if err := r.deleteTopicLocked(ctx, topic); err != nil {
			return err
		}
	}
	if err := r.writeTopicLocked(ctx, topic, t, false); err != nil {
		return err
	}
	if r.state.session == 0 {
		r.state.session = r.conn.SessionID()
	}
	r.log.Info("REGISTRY: registered topic", "topic", topic, "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID),
		"partitions", numPartitions, "publish", acceptPublish, "subscribe", acceptSubscribe)
	return nil
}

func (r *Registry) topicPaths(topic string) (legacy, pub, sub string) {
	bs := BrokerString(r.opts.BrokerID, r.opts.SlaveID)
	return r.paths.Topics() + "/" + topic + "/" + bs,
		r.paths.TopicsPub() + "/" + topic + "/" + bs,
		r.paths.TopicsSub() + "/" + topic + "/" + bs
}

// writeTopicLocked writes topic's entries for the broker's current role.
//
// MetaQ 1.4.6's Java producer (ProducerZooKeeper.BrokerConnectionListener)
// closes its connection to every master of a topic on each change of the
// children of topics-pub/<topic>, whichever child (it ignores the slaves'
// <id>-s<n> entries otherwise), before it connects again; gecko fails the
// put in flight on the closed connection without an answer. So during a
// switchover those children change once, the new master's <id>-m replacing
// the old master's: the new master leaves its slave entry there
// (switchRoleLocked), and the old master, taking that slaveId, finds an
// entry of its name holding what it would write and leaves it as it is
// (leavePub) instead of replacing it.
func (r *Registry) writeTopicLocked(ctx context.Context, topic string, t topicReg, leavePub bool) error {
	legacy, pub, sub := r.topicPaths(topic)
	js := []byte(TopicJSON(t.numPartitions, BrokerString(r.opts.BrokerID, r.opts.SlaveID)))
	if err := r.ensureEphemeral(ctx, legacy, []byte(strconv.Itoa(t.numPartitions))); err != nil {
		return fmt.Errorf("registry: register topic %s: %w", topic, err)
	}
	for _, n := range []struct {
		path   string
		accept bool
	}{{pub, t.acceptPublish}, {sub, t.acceptSub}} {
		var err error
		switch {
		case n.accept && n.path == pub && leavePub && !r.master():
			var left bool
			if left, err = r.leaveOrEnsure(ctx, n.path, js); err == nil && left {
				r.borrowLocked(topic, n.path)
			}
		case n.accept && n.path == pub && r.master():
			err = r.ensureMasterPubLocked(ctx, topic, n.path, js)
		case n.accept:
			err = r.ensureEphemeral(ctx, n.path, js)
		default:
			err = r.Delete(ctx, n.path)
		}
		if err != nil {
			return fmt.Errorf("registry: register topic %s: %w", topic, err)
		}
	}
	return nil
}

func (r *Registry) deleteTopicLocked(ctx context.Context, topic string) error {
	legacy, pub, sub := r.topicPaths(topic)
	paths := []string{legacy, pub, sub}
	if kept, ok := r.state.keptPub[topic]; ok {
		paths = append(paths, kept)
		delete(r.state.keptPub, topic)
	}
	for _, p := range paths {
		if err := r.DeleteOwned(ctx, p); err != nil {
			return fmt.Errorf("registry: unregister topic %s: %w", topic, err)
		}
	}
	return nil
}

// leaveOrEnsure leaves path as it is when it holds data, whoever's node it
// is (see writeTopicLocked), and makes it an ephemeral node of this session
// holding data otherwise. left reports a node of another session left in
// place.
func (r *Registry) leaveOrEnsure(ctx context.Context, path string, data []byte) (left bool, err error) {
	cur, st, err := r.Get(ctx, path)
	if err == nil && string(cur) == string(data) {
		return st.EphemeralOwner != r.conn.SessionID(), nil
	}
	if err != nil && !errors.Is(err, ErrNoNode) {
		return false, err
	}
	return false, r.ensureEphemeral(ctx, path, data)
}

// borrowLocked starts watching path, this slave's entry of topic under
// topics-pub that another session's node holds (a switchover's new master
// left its slave entry for this broker, which took its slaveId): when
// that node goes (that session ends, or it deletes it), this broker
// writes its own at once (watchBorrowed). Replacing it right away would
// change the topic's children once more during the switchover, and MetaQ
// 1.4.6's Java producer drops its connections on every such change. The
// caller holds regMu.
func (r *Registry) borrowLocked(topic, path string) {
	if r.state.borrowed[path] || r.closing.Load() {
		return
	}
	if r.state.borrowed == nil {
		r.state.borrowed = make(map[string]bool)
	}
	r.state.borrowed[path] = true
	r.wg.Add(1)
	go r.watchBorrowed(topic, path)
}

// watchBorrowedRetry is how long watchBorrowed waits after a failed read.
const watchBorrowedRetry = time.Second

// watchBorrowed waits until the node at path (topic's topics-pub entry of
// this slave) is no longer another session's, and writes this broker's own
// when it is missing while this broker still registers topic as that
// slave. It ends then, when the node became this session's, or when the
// registry closes.
func (r *Registry) watchBorrowed(topic, path string) {
	defer r.wg.Done()
	defer func() {
		r.regMu.Lock()
		delete(r.state.borrowed, path)
		r.unlockReg()
	}()
	wait := func(w Watch) bool {
		select {
		case <-w:
			return true
		case <-r.quit:
			return false
		}
	}
	retry := func() bool {
		select {
		case <-time.After(watchBorrowedRetry):
			return true
		case <-r.quit:
			return false
		}
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.SessionTimeout)
		ok, w, err := r.ExistsW(ctx, path)
		if err == nil && ok {
			var st Stat
			if ok, st, err = r.Exists(ctx, path); err == nil && ok && st.EphemeralOwner == r.conn.SessionID() {
				cancel()
				return // this session's own now
			}
		}
		if err == nil && !ok {
			err = r.takeBorrowed(ctx, topic, path)
			if err == nil {
				cancel()
				return
			}
		}
		cancel()
		switch {
		case r.closing.Load():
			return
		case err != nil:
			r.log.Warn("REGISTRY: watching this slave's topics-pub entry held by another session", "path", path, "err", err)
			if !retry() {
				return
			}
		case !wait(w):
			return
		}
	}
}

// takeBorrowed writes this slave's own entry of topic at path, gone from
// the session that held it, when this broker still registers topic as
// the slave that path names.
func (r *Registry) takeBorrowed(ctx context.Context, topic, path string) error {
	r.regMu.Lock()
	defer r.unlockReg()
	t, ok := r.state.topics[topic]
	_, pub, _ := r.topicPaths(topic)
	if !ok || !t.acceptPublish || !r.state.broker || r.master() || pub != path {
		return nil // no longer this slave's entry: nothing to take
	}
	js := []byte(TopicJSON(t.numPartitions, BrokerString(r.opts.BrokerID, r.opts.SlaveID)))
	if err := r.ensureEphemeral(ctx, path, js); err != nil {
		return err
	}
	r.log.Info("REGISTRY: this slave's topics-pub entry, held by another session since a switchover, was gone; wrote its own", "path", path)
	return nil
}

// UnregisterTopic deletes this broker's nodes of topic and stops registering
// it again after session expiries: the topic was removed from server.ini by a
// reload, and MetaQ's clients must stop publishing to it.
func (r *Registry) UnregisterTopic(ctx context.Context, topic string) error {
	r.regMu.Lock()
	defer r.unlockReg()
	delete(r.state.topics, topic)
	if err := r.deleteTopicLocked(ctx, topic); err != nil {
		return err
	}
	r.log.Info("REGISTRY: unregistered topic", "topic", topic, "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID))
	return nil
}

// UnregisterAll deletes the broker's and its topics' nodes (ids/<id> itself is
// deleted, or set to "" while slaves still hang below it), stops
// re-registering after session expiries, and then waits zk.zkSyncTimeMs (or
// until ctx ends) so that clients notice before the broker stops serving
// (MetaMorphosisBroker.stop). RegisterBroker and RegisterTopic may be called
// again afterwards (a samsa master does, once its slave is back).
func (r *Registry) UnregisterAll(ctx context.Context) error {
	return r.UnregisterAllWhile(ctx, nil)
}

// UnregisterAllWhile is UnregisterAll whose wait ends as soon as busy
// (polled) reports false: with no client connected to the broker, nobody
// is left to notice, so an idle broker stops at once. busy nil waits the
// whole zkSyncTimeMs.
func (r *Registry) UnregisterAllWhile(ctx context.Context, busy func() bool) error {
	err := r.unregister(ctx)
	if r.opts.SyncTime <= 0 {
		return err
	}
	t := time.NewTimer(r.opts.SyncTime)
	defer t.Stop()
	var poll <-chan time.Time
	if busy != nil {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		poll = tk.C
	}
	for busy == nil || busy() {
		select {
		case <-t.C:
			return err
		case <-ctx.Done():
			return err
		case <-poll:
		}
	}
	return err
}

func (r *Registry) unregister(ctx context.Context) error {
	r.regMu.Lock()
	defer r.unlockReg()
	var errs []error
	if r.state.broker {
		if err := r.Delete(ctx, r.paths.Broker(r.opts.BrokerID, r.opts.SlaveID)); err != nil {
			errs = append(errs, err)
		}
		if r.master() {
			if err := r.Delete(ctx, r.paths.MasterConfigChecksum(r.opts.BrokerID)); err != nil {
				errs = append(errs, err)
			}
			idPath := r.paths.BrokerID(r.opts.BrokerID)
			err := r.call(ctx, func() error { return r.conn.Delete(idPath, -1) })
			if err != nil && !errors.Is(err, ErrNoNode) {
				// A slave still registered below it: leave an empty value so
				// old clients do not use our address.
				if err := r.call(ctx, func() error { _, err := r.conn.Set(idPath, []byte{}, -1); return err }); err != nil && !errors.Is(err, ErrNoNode) {
					errs = append(errs, err)
				}
			}
		}
	}
	topics := make([]string, 0, len(r.state.topics))
	for t := range r.state.topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		if err := r.deleteTopicLocked(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	r.state.broker, r.state.problem = false, ""
	r.state.topics = make(map[string]topicReg)
	r.log.Info("REGISTRY: unregistered", "broker", BrokerString(r.opts.BrokerID, r.opts.SlaveID), "topics", len(topics))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry: unregister: %w", err)
	}
	return nil
}

// Registered reports whether the broker node is registered and which topics are.
func (r *Registry) Registered() (broker bool, topics []string) {
	w := r.written.Load()
	if w == nil {
		return false, nil
	}
	for t := range w.topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	return w.broker, topics
}
