package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"metaq/broker/registry"
	"metaq/georeplicator"
)

// zkMetaQMaster tells the MetaQ method what to copy, read from ZooKeeper as
// MetaQ's slave reads it (SlaveZooKeeper, MetaZookeeper): the master's url
// in ids/<brokerId>/master, its topics (the children of topics-sub that have
// a <brokerId>-m node) and their numParts. Watches on those nodes make
// Changed fire, so new topics and partitions are followed at once.
type zkMetaQMaster struct {
	r    *registry.Registry
	id   int
	ctx  context.Context // ends the watch goroutines
	wg   sync.WaitGroup
	mu   sync.Mutex
	arm  map[string]bool // paths with a pending watch
	ch   chan struct{}   // closed (and replaced) when a watch fires
	self string          // <brokerId>-m
}

func newZKMetaQMaster(ctx context.Context, r *registry.Registry, brokerID int) *zkMetaQMaster {
	return &zkMetaQMaster{r: r, id: brokerID, ctx: ctx, arm: map[string]bool{}, ch: make(chan struct{}),
		self: strconv.Itoa(brokerID) + "-m"}
}

var _ georeplicator.MetaQMaster = (*zkMetaQMaster)(nil)

// Addr returns host:port of the master's meta:// url.
func (m *zkMetaQMaster) Addr(ctx context.Context) (string, error) {
	path := m.r.Paths().Broker(m.id, -1)
	data, err := m.get(ctx, path)
	if errors.Is(err, registry.ErrNoNode) {
		m.watchExists(ctx, path)
		return "", fmt.Errorf("no master registered at %s", path)
	}
	if err != nil {
		return "", err
	}
	return georeplicator.AddrFromMasterURL(string(data), 0)
}

// Partitions returns the master's subscribable topics and partition counts.
func (m *zkMetaQMaster) Partitions(ctx context.Context) (map[string]int, error) {
	sub := m.r.Paths().TopicsSub()
	topics, err := m.children(ctx, sub)
	if errors.Is(err, registry.ErrNoNode) {
		m.watchExists(ctx, sub)
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, t := range topics {
		kids, err := m.children(ctx, sub+"/"+t)
		if errors.Is(err, registry.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !slices.Contains(kids, m.self) {
			continue
		}
		data, _, err := m.r.Get(ctx, sub+"/"+t+"/"+m.self)
		if errors.Is(err, registry.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var tb struct {
			NumParts int `json:"numParts"`
		}
		if err := json.Unmarshal(data, &tb); err != nil || tb.NumParts <= 0 {
			return nil, fmt.Errorf("bad topic node %s/%s/%s: %q", sub, t, m.self, data)
		}
		out[t] = tb.NumParts
	}
	return out, nil
}

// ConfigVersion is the master's master_config_checksum (watched).
func (m *zkMetaQMaster) ConfigVersion(ctx context.Context) (string, error) {
	path := m.r.Paths().MasterConfigChecksum(m.id)
	data, err := m.get(ctx, path)
	if errors.Is(err, registry.ErrNoNode) {
		return "", nil // a master without one: fetch the file every time
	}
	return string(data), err
}

// Changed fires when a watched node changes.
func (m *zkMetaQMaster) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ch
}

// get reads path's data, watching it unless a watch is pending.
func (m *zkMetaQMaster) get(ctx context.Context, path string) ([]byte, error) {
	if m.armed(path) {
		data, _, err := m.r.Get(ctx, path)
		return data, err
	}
	data, w, err := m.r.GetW(ctx, path)
	if err == nil {
		m.watch(path, w)
	}
	return data, err
}

// children lists path's children, watching them unless a watch is pending.
func (m *zkMetaQMaster) children(ctx context.Context, path string) ([]string, error) {
	if m.armed(path) {
		return m.r.Children(ctx, path)
	}
	kids, w, err := m.r.ChildrenW(ctx, path)
	if err == nil {
		m.watch(path, w)
	}
	return kids, err
}

func (m *zkMetaQMaster) watchExists(ctx context.Context, path string) {
	if m.armed("exists:" + path) {
		return
	}
	if ok, w, err := m.r.ExistsW(ctx, path); err == nil {
		m.watch("exists:"+path, w)
		if ok {
			m.fire("exists:" + path)
		}
	}
}

func (m *zkMetaQMaster) armed(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.arm[key]
}

// watch waits for w (one goroutine per pending watch, at most one per path).
func (m *zkMetaQMaster) watch(key string, w registry.Watch) {
	m.mu.Lock()
	m.arm[key] = true
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case <-w:
			m.fire(key)
		case <-m.ctx.Done():
		}
	}()
}

func (m *zkMetaQMaster) fire(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.arm, key)
	close(m.ch)
	m.ch = make(chan struct{})
}

// wait returns once every watch goroutine ended (after ctx ended).
func (m *zkMetaQMaster) wait() { m.wg.Wait() }
