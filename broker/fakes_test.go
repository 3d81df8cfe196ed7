package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// hookStore wraps the real store with per-call hooks for fault injection.
type hookStore struct {
	Store
	mu       sync.Mutex
	append   func(topic string) error // called before Append; an error fails it
	health   error
	retained []string
	policies map[string]store.Policy
}

func (h *hookStore) SetPolicy(topic string, p store.Policy) {
	h.mu.Lock()
	if h.policies == nil {
		h.policies = map[string]store.Policy{}
	}
	h.policies[topic] = p
	h.mu.Unlock()
	h.Store.SetPolicy(topic, p)
}

func (h *hookStore) policy(topic string) (store.Policy, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.policies[topic]
	return p, ok
}

func (h *hookStore) Append(ctx context.Context, topic string, p int, msgs []store.Message) ([]store.Appended, error) {
	h.mu.Lock()
	f := h.append
	h.mu.Unlock()
	if f != nil {
		if err := f(topic); err != nil {
			return nil, err
		}
	}
	return h.Store.Append(ctx, topic, p, msgs)
}

func (h *hookStore) AppendAsync(ctx context.Context, topic string, p int, msgs []store.Message, notify func([]store.Appended, error)) *store.PendingAppend {
	h.mu.Lock()
	f := h.append
	h.mu.Unlock()
	if f != nil {
		if err := f(topic); err != nil {
			pa := store.FailedAppend(err)
			if notify != nil {
				notify(pa.Result())
			}
			return pa
		}
	}
	return h.Store.AppendAsync(ctx, topic, p, msgs, notify)
}

func (h *hookStore) Health() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.health != nil {
		return h.health
	}
	return h.Store.Health()
}

func (h *hookStore) Retain(topic string, now time.Time) (int, error) {
	h.mu.Lock()
	h.retained = append(h.retained, topic+"@"+now.UTC().Format(time.RFC3339))
	h.mu.Unlock()
	return h.Store.Retain(topic, now)
}

func (h *hookStore) retainedTopics() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.retained...)
}

// fakeRegistry records calls.
type fakeRegistry struct {
	mu        sync.Mutex
	brokers   int
	url       string   // set by SetURL
	urls      []string // the URL at each RegisterBroker
	topics    map[string]int
	checksums []uint32
	unreg     int
	// register, when set, runs first in RegisterTopic (unlocked, so it may
	// block) and its error is returned.
	register func(topic string) error
}

func (f *fakeRegistry) SetURL(url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.url = url
}

func (f *fakeRegistry) RegisterBroker(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.brokers++
	f.urls = append(f.urls, f.url)
	return nil
}

func (f *fakeRegistry) SetConfigChecksum(ctx context.Context, sum uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checksums = append(f.checksums, sum)
	return nil
}

func (f *fakeRegistry) RegisterTopic(ctx context.Context, topic string, n int, pub, sub bool) error {
	if f.register != nil {
		if err := f.register(topic); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.topics == nil {
		f.topics = map[string]int{}
	}
	f.topics[topic] = n
	return nil
}

func (f *fakeRegistry) UnregisterTopic(ctx context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.topics, topic)
	return nil
}

func (f *fakeRegistry) UnregisterAll(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreg++
	return nil
}

func (f *fakeRegistry) topic(name string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.topics[name]
	return n, ok
}

// recordingTx is a TxHandler that answers from fixed rules and records calls.
type recordingTx struct {
	mu     sync.Mutex
	txs    []string
	puts   []string
	closed []uint64
}

func (r *recordingTx) Transaction(ctx context.Context, c TxConn, cmd *wire.Transaction) *wire.Result {
	r.mu.Lock()
	r.txs = append(r.txs, string(cmd.Type)+" "+cmd.Tx.String())
	r.mu.Unlock()
	if cmd.Type == wire.TxEnd {
		return nil
	}
	return wire.NewResult(200, "", 0)
}

func (r *recordingTx) Put(ctx context.Context, c TxConn, cmd *wire.Put) *wire.Result {
	r.mu.Lock()
	r.puts = append(r.puts, cmd.TxKey)
	r.mu.Unlock()
	return wire.NewResult(200, "1 0 -1", 0)
}

func (r *recordingTx) ConnClosed(c TxConn) {
	r.mu.Lock()
	r.closed = append(r.closed, c.ID)
	r.mu.Unlock()
}

func (r *recordingTx) closedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.closed)
}

type fakeSlaveStats struct{}

func (fakeSlaveStats) IsSlave() bool { return true }
func (fakeSlaveStats) Lines() []string {
	return []string{"master meta://127.0.0.1:1", "partitions 2", "fetching true"}
}

var errDiskFull = errors.New("no space left on device")
