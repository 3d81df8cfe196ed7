package bundle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/txn"
)

// txnComponent opens the transaction manager on the bundle's store and
// installs it as the broker's transaction handler. Every bundle runs it.
type txnComponent struct {
	mu  sync.Mutex
	b   *Bundle
	mgr *txn.Manager
	// commitHook, tests only: called as a commit's batches go to the put
	// route, before they reach the write gate.
	commitHook atomic.Pointer[func()]
}

func newTxnComponent() *txnComponent { return &txnComponent{} }

func (c *txnComponent) Name() string { return compTxn }

// startsBeforeServing: transaction commands must find the handler from the
// first connection on.
func (c *txnComponent) startsBeforeServing() bool { return true }

func (c *txnComponent) Start(_ context.Context, b *Bundle) error {
	cfg := b.Config()
	dir := cfg.System.DataLogPath
	if dir == "" {
		dir = cfg.System.DataPath
	}
	mgr, err := txn.Open(txn.Options{
		Dir:           filepath.Join(dir, "transactions"),
		Store:         txnStore{b: b, hook: &c.commitHook},
		NextID:        b.Store.NextID,
		FlushAtCommit: cfg.System.FlushTxLogAtCommit,
		MaxTimeout:    time.Duration(cfg.System.MaxTxTimeoutInSeconds) * time.Second,
		Logger:        b.Logger(),
	})
	if err != nil {
		return fmt.Errorf("transactions: %w", err)
	}
	c.mu.Lock()
	c.b, c.mgr = b, mgr
	c.mu.Unlock()
	b.Broker.SetTxHandler(txn.NewHandler(mgr, b.Broker))
	return nil
}

// Close removes the handler first, so new transaction commands get the
// broker's "not supported" answer rather than a closed journal, then closes
// the journal. Commands already inside the manager finish or fail with
// txn.ErrClosed; prepared XA transactions are on disk and recovered at the
// next start.
func (c *txnComponent) Close() error {
	c.mu.Lock()
	b, mgr := c.b, c.mgr
	c.mgr = nil
	c.mu.Unlock()
	if mgr == nil {
		return nil
	}
	if b.Broker != nil {
		b.Broker.SetTxHandler(nil)
	}
	return mgr.Close()
}

// Status reports open transactions.
func (c *txnComponent) Status() any {
	c.mu.Lock()
	mgr := c.mgr
	c.mu.Unlock()
	if mgr == nil {
		return map[string]any{"running": false}
	}
	local, xa := mgr.Count()
	return map[string]any{"running": true, "local": local, "xa": xa}
}

// txnStore is what the transaction manager writes to and reads from: a
// commit's messages take the broker's put route from its registration step
// on (Broker.StoreValidated), so the write gate applies and a samsa master's
// slave gets them like every other put; recovery reads the store.
type txnStore struct {
	b    *Bundle
	hook *atomic.Pointer[func()]
}

var _ txn.GroupStore = txnStore{}

// AppendGroup stores a commit's batches as one unit
// (broker.Broker.StoreValidatedGroup).
func (s txnStore) AppendGroup(ctx context.Context, appends []store.PartitionAppend) ([]store.AppendOutcome, error) {
	if h := s.hook.Load(); h != nil {
		(*h)()
	}
	return s.b.Broker.StoreValidatedGroup(ctx, appends)
}

func (s txnStore) Append(ctx context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error) {
	return s.b.Broker.StoreValidated(ctx, topic, partition, msgs)
}

func (s txnStore) Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error) {
	return s.b.Store.Read(topic, partition, offset, maxBytes)
}

func (s txnStore) Partition(topic string, partition int) (store.PartitionInfo, error) {
	return s.b.Store.Partition(topic, partition)
}

// maxListedXA bounds the transactions a refused switchover names.
const maxListedXA = 10

// preparedXARefusal is why this master cannot hand over while it holds
// prepared XA transactions, or nil. Their journal is this broker's alone
// (MetaQ's slaves do not get it either): a new master would not list them
// in RECOVER, nor commit or roll them back, while this broker, demoted,
// could not commit them. Called with writes refused, when no new PREPARE
// succeeds (txn.Handler refuses them).
func (b *Bundle) preparedXARefusal() error {
	c := compOf[*txnComponent](b)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	mgr := c.mgr
	c.mu.Unlock()
	if mgr == nil {
		return nil
	}
	keys := mgr.Prepared()
	if len(keys) == 0 {
		return nil
	}
	list := keys
	if len(list) > maxListedXA {
		list = list[:maxListedXA]
	}
	more := ""
	if len(keys) > len(list) {
		more = fmt.Sprintf(" and %d more", len(keys)-len(list))
	}
	return fmt.Errorf("switchover: this master holds %d prepared XA transactions (%s%s), which a new master would not know: commit or roll them back through their transaction manager (RECOVER here lists them), then switch over",
		len(keys), strings.Join(list, ", "), more)
}
