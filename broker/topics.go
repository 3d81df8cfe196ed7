package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/config"
	"metaq/broker/store"
)

// topicTable holds what the broker knows about topics beyond the current
// config: the topics already registered in ZooKeeper and the topics whose
// store policy was set. Its mutex also serialises changes of the closed
// partitions.
type topicTable struct {
	mu         sync.RWMutex
	registered map[string]int  // topic -> numPartitions registered
	policySet  map[string]bool // topic -> SetPolicy done
}

func (t *topicTable) init() {
	t.registered = make(map[string]int)
	t.policySet = make(map[string]bool)
}

// topicEntry caches what a put needs to know about one concrete topic
// under one configuration. ready is set once the topic's policy was pushed
// and its registration done, so later puts skip both.
type topicEntry struct {
	tc             config.Topic
	ok             bool
	ready          atomic.Bool
	oversizeWarned atomic.Bool
}

// topicCache maps topic names to entries for one *config.Server; a reload
// (a new config pointer) starts a new cache.
type topicCache struct {
	cfg *config.Server
	m   sync.Map // string -> *topicEntry
	n   atomic.Int64
}

// maxCachedTopics bounds the cache: clients can name any topic in a get,
// and unknown names must not grow memory without limit.
const maxCachedTopics = 100000

func (b *Broker) topicEntry(name string) *topicEntry {
	cfg := b.cfg.Load()
	c := b.tcache.Load()
	if c == nil || c.cfg != cfg {
		nc := &topicCache{cfg: cfg}
		if b.tcache.CompareAndSwap(c, nc) {
			c = nc
		} else {
			c = b.tcache.Load()
		}
	}
	if e, ok := c.m.Load(name); ok {
		return e.(*topicEntry)
	}
	e := &topicEntry{}
	e.tc, e.ok = b.lookupTopic(cfg, name)
	if len(name) <= 255 && c.n.Load() < maxCachedTopics {
		if old, loaded := c.m.LoadOrStore(name, e); loaded {
			return old.(*topicEntry)
		}
		c.n.Add(1)
	}
	return e
}

// topicFor finds the topic settings for a concrete topic name: the first
// matching [topic=...] section of the current config. A topic whose section
// a reload removed is refused, as a topic missing from MetaQ's server.ini.
func (b *Broker) topicFor(name string) (config.Topic, bool) {
	e := b.topicEntry(name)
	return e.tc, e.ok
}

func (b *Broker) lookupTopic(cfg *config.Server, name string) (config.Topic, bool) {
	return cfg.TopicFor(name)
}

// isLiteral reports whether a [topic=...] name is registered in ZooKeeper
// and given a policy at start, as it is written. MetaQ registers every
// configured name, whatever it holds ("order.created", or "!@#$%", which
// its integration tests configure and whose puts it refuses: see
// config.TopicFor); a name with '*', MetaQ's wildcard, is a pattern here
// instead, whose topics are registered at their first put.
func isLiteral(name string) bool {
	return !strings.Contains(name, "*")
}

func policyOf(tc config.Topic) store.Policy {
	unflush := tc.UnflushThreshold
	if tc.MinSyncSites > 0 {
		// A synchronous topic's put is durable here before its slave
		// sites are waited for (syncsites.go): group commit.
		unflush = 0
	}
	return store.Policy{
		UnflushThreshold: unflush,
		UnflushInterval:  tc.UnflushInterval,
		MaxAge:           tc.DeletePolicy.MaxAge,
		Archive:          tc.DeletePolicy.Name == "archive",
		ArchiveCompress:  tc.DeletePolicy.Compress,
	}
}

// applyPolicies pushes the flush and retention policy of every literal
// configured topic and of every topic that has partitions in the store.
func (b *Broker) applyPolicies(cfg *config.Server) {
	seen := map[string]bool{}
	for _, tc := range cfg.Topics {
		// MetaQ loads group.<g>=<class> server-side filters from Java
		// classes; there is no JVM here, so say that those groups get every
		// record rather than silently ignoring the setting.
		for group, class := range tc.Filters {
			b.log.Warn("BROKER: server-side consumer filters are not supported; the group gets every message",
				"topic", tc.Name, "group", group, "class", class)
		}
		if isLiteral(tc.Name) && !seen[tc.Name] {
			seen[tc.Name] = true
			b.setPolicy(tc.Name, tc)
		}
	}
	for _, p := range b.store.Partitions() {
		if seen[p.Topic] {
			continue
		}
		seen[p.Topic] = true
		if tc, ok := b.topicFor(p.Topic); ok {
			b.setPolicy(p.Topic, tc)
		}
	}
}

func (b *Broker) setPolicy(topic string, tc config.Topic) {
	b.store.SetPolicy(topic, policyOf(tc))
	b.topics.mu.Lock()
	b.topics.policySet[topic] = true
	b.topics.mu.Unlock()
}

// ensureTopic is called before a put to a topic: the first time under a
// configuration, it pushes the topic's policy to the store and registers
// the topic in ZooKeeper (step 4 of put in broker/wire/doc.go).
func (b *Broker) ensureTopic(ctx context.Context, topic string, e *topicEntry) {
	if e.ready.Load() {
		return
	}
	tc := e.tc
	b.topics.mu.RLock()
	ps := b.topics.policySet[topic]
	n, reg := b.topics.registered[topic]
	b.topics.mu.RUnlock()
	if !ps {
		b.setPolicy(topic, tc)
	}
	if b.opts.Registry != nil && (!reg || n != tc.NumPartitions) {
		if !b.registerTopic(ctx, topic, tc) {
			return // try again on the next put
		}
	}
	e.ready.Store(true)
}

func (b *Broker) registerTopic(ctx context.Context, topic string, tc config.Topic) bool {
	if err := b.opts.Registry.RegisterTopic(ctx, topic, tc.NumPartitions, tc.AcceptPublish, tc.AcceptSubscribe); err != nil {
		b.log.Warn("TOPIC("+topic+"): register in ZooKeeper failed", "err", err)
		return false
	}
	b.topics.mu.Lock()
	b.topics.registered[topic] = tc.NumPartitions
	b.topics.mu.Unlock()
	return true
}

// forgetRegistrations is called after UnregisterAll: topics register again
// at the next registerConfiguredTopics or put.
func (b *Broker) forgetRegistrations() {
	b.topics.mu.Lock()
	b.topics.registered = make(map[string]int)
	b.topics.mu.Unlock()
	b.tcache.Store(nil)
}

// registerConfiguredTopics registers every literal configured topic and
// every topic with partitions in the store, as MetaQ does at start-up.
func (b *Broker) registerConfiguredTopics(ctx context.Context, cfg *config.Server) {
	seen := map[string]bool{}
	for _, tc := range cfg.Topics {
		if isLiteral(tc.Name) && !seen[tc.Name] {
			seen[tc.Name] = true
			b.registerTopic(ctx, tc.Name, tc)
		}
	}
	for _, p := range b.store.Partitions() {
		if seen[p.Topic] {
			continue
		}
		seen[p.Topic] = true
		if tc, ok := b.topicFor(p.Topic); ok {
			b.registerTopic(ctx, p.Topic, tc)
		}
	}
}

// topicUnregisterer is the optional part of a Registry that removes one
// topic's registration (registry.Registry has it).
type topicUnregisterer interface {
	UnregisterTopic(ctx context.Context, topic string) error
}

// Reload re-applies the [topic=...] sections of cfg (see Reload in broker/wire/doc.go): new topics
// are accepted and registered at once, numPartitions changes take effect
// for put checks and random partition choice, policies are pushed to the
// store and retention is re-scheduled. Topics no section matches any more
// are unregistered from ZooKeeper and refused from now on (their data stays
// in the store until retention removes it). The write gateway takes a
// new [site] forwardMaxInFlightBytes (Changes.AppliedKeys). [system] and
// [zookeeper] changes are reported in Changes.RestartKeys and not applied;
// `stats config` and the config checksum follow the new file.
func (b *Broker) Reload(cfg *config.Server) (config.Changes, error) {
	if cfg == nil {
		return config.Changes{}, errors.New("broker: reload: nil config")
	}
	if b.closing.Load() {
		return config.Changes{}, ErrClosed
	}
	old := b.cfg.Load()
	ch := config.Diff(old, cfg)
	eff := *cfg
	eff.System = old.System
	eff.ZooKeeper = old.ZooKeeper

	b.topics.mu.Lock()
	var removed []string
	for name := range b.topics.registered {
		if _, ok := eff.TopicFor(name); !ok {
			removed = append(removed, name)
			delete(b.topics.registered, name)
		}
	}
	// Policies are re-pushed below; topics first seen by a put get theirs then.
	b.topics.policySet = make(map[string]bool)
	b.topics.mu.Unlock()

	b.cfg.Store(&eff)
	if g := b.Gateway(); g != nil {
		// [site] forwardMaxInFlightBytes, the one [site] key a reload
		// applies (config.Changes.AppliedKeys).
		g.SetMaxInFlightBytes(eff.Site.ForwardMaxInFlightBytes)
	}
	b.applyPolicies(&eff)
	if b.isStarted() {
		b.retention.reschedule(&eff)
	}
	if r := b.opts.Registry; r != nil && b.isStarted() {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		if eff.Checksum != old.Checksum {
			if err := r.SetConfigChecksum(ctx, eff.Checksum); err != nil {
				b.log.Warn("BROKER: update config checksum in ZooKeeper failed", "err", err)
			}
		}
		if u, ok := r.(topicUnregisterer); ok {
			sort.Strings(removed)
			for _, name := range removed {
				if err := u.UnregisterTopic(ctx, name); err != nil {
					b.log.Warn("TOPIC("+name+"): unregister from ZooKeeper failed", "err", err)
				} else {
					b.log.Info("TOPIC(" + name + "): removed from server.ini: unregistered, puts are refused")
				}
			}
		}
		changed := append(append([]string{}, ch.TopicsAdded...), ch.TopicsChanged...)
		for _, name := range changed {
			if tc, ok := eff.TopicFor(name); ok && isLiteral(name) {
				b.registerTopic(ctx, name, tc)
			}
		}
		// Topics matched by changed patterns that already have data.
		for _, p := range b.store.Partitions() {
			b.topics.mu.RLock()
			n, reg := b.topics.registered[p.Topic]
			b.topics.mu.RUnlock()
			if tc, ok := eff.TopicFor(p.Topic); ok && (!reg || n != tc.NumPartitions) {
				b.registerTopic(ctx, p.Topic, tc)
			}
		}
	}
	b.log.Info("BROKER: config reloaded", "changes", ch.String(), "checksum", eff.Checksum)
	return ch, nil
}

// ClosePartitions closes partitions from..to (inclusive) of topic: puts,
// gets and syncs on them answer 403 until OpenPartitions. It refuses a
// topic this broker does not take and a range outside the topic's
// partitions: the set holds one entry per partition, so a mistyped end
// must not fill memory.
func (b *Broker) ClosePartitions(topic string, from, to int) error {
	te := b.topicEntry(topic)
	if !te.ok {
		return fmt.Errorf("close partitions: this broker takes no topic %q", topic)
	}
	if n := te.tc.NumPartitions; from < 0 || to < from || to >= n {
		return fmt.Errorf("close partitions: %s has partitions 0..%d; %d..%d is outside them", topic, n-1, from, to)
	}
	b.updateClosed(func(m closedSet) {
		ps := m[topic]
		if ps == nil {
			ps = make(map[int]bool)
			m[topic] = ps
		}
		for p := from; p <= to; p++ {
			ps[p] = true
		}
	})
	b.log.Info("TOPIC("+topic+"): partitions closed", "from", from, "to", to)
	return nil
}

// OpenPartitions reopens partitions closed by ClosePartitions. It looks
// only at the closed ones, so any range is cheap, and a topic since
// removed from server.ini can still be reopened.
func (b *Broker) OpenPartitions(topic string, from, to int) {
	b.updateClosed(func(m closedSet) {
		ps := m[topic]
		for p := range ps {
			if p >= from && p <= to {
				delete(ps, p)
			}
		}
		if len(ps) == 0 {
			delete(m, topic)
		}
	})
	b.log.Info("TOPIC("+topic+"): partitions opened", "from", from, "to", to)
}

// closedSet is topic -> closed partitions. The broker keeps it behind an
// atomic pointer and replaces it on change, so the put and get paths read
// it without locking.
type closedSet map[string]map[int]bool

func (b *Broker) updateClosed(f func(closedSet)) {
	b.topics.mu.Lock()
	defer b.topics.mu.Unlock()
	next := closedSet{}
	if cur := b.closed.Load(); cur != nil {
		for t, ps := range *cur {
			cp := make(map[int]bool, len(ps))
			for p := range ps {
				cp[p] = true
			}
			next[t] = cp
		}
	}
	f(next)
	if len(next) == 0 {
		b.closed.Store(nil)
		return
	}
	b.closed.Store(&next)
}

func (b *Broker) isClosed(topic string, p int) bool {
	cur := b.closed.Load()
	if cur == nil {
		return false
	}
	return (*cur)[topic][p]
}
