package broker

import (
	"context"

	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// Registry publishes the broker and its topics (ZooKeeper; see ZooKeeper layout in broker/wire/doc.go).
// *registry.Registry implements it. A nil Registry in Options means
// standalone (zk.zkEnable=false).
//
// The broker calls RegisterBroker from Start; RegisterTopic for every
// configured topic at Start, for each added or changed topic on Reload and
// the first time a put creates a partition of a topic not yet registered;
// SetConfigChecksum on Reload when the file changed; UnregisterAll from
// Close before it stops serving. A synchronous master whose slave keeps
// failing also calls UnregisterAll, and RegisterBroker and RegisterTopic
// again once the slave answers (see Samsa and gregor in broker/wire/doc.go), so registering after
// UnregisterAll must work.
// Calls may come from several goroutines at once and must return when ctx
// ends; the broker logs their errors and keeps serving.
type Registry interface {
	// SetURL sets the meta://host:port RegisterBroker advertises: the
	// broker calls it with its listener's address before registering.
	SetURL(url string)
	RegisterBroker(ctx context.Context) error
	SetConfigChecksum(ctx context.Context, sum uint32) error
	RegisterTopic(ctx context.Context, topic string, numPartitions int, acceptPublish, acceptSubscribe bool) error
	UnregisterAll(ctx context.Context) error
}

// TxConn identifies the client connection a transaction command came on,
// so that a TxHandler can roll back a connection's local transactions when
// it closes (see Java defects in broker/wire/doc.go).
type TxConn struct {
	ID         uint64 // unique per broker run
	RemoteAddr string
}

// TxHandler processes transactions (see Transactions in broker/wire/doc.go). Until one is set in
// Options (or with SetTxHandler), the broker answers every `transaction`
// command and every put that carries a transaction key with 500
// "Transactions are not supported by this broker".
//
// The broker calls the methods from per-connection worker goroutines,
// concurrently for different connections and possibly for the same one;
// they may block (the broker bounds each connection's in-flight work).
// The commands are owned by the handler once passed; Body slices are not
// reused by the broker.
type TxHandler interface {
	// Transaction answers one transaction command. A nil Result means no
	// answer is sent (END).
	Transaction(ctx context.Context, c TxConn, cmd *wire.Transaction) *wire.Result
	// Put answers a put that carries a transaction key (cmd.TxKey != "").
	// The broker has verified nothing but the frame: the handler checks the
	// partition (-1 is refused), the topic and the checksum, for which it can
	// use Broker.CheckPut (which also answers the write gate's refusal).
	// Messages stored at commit should go through Broker.StoreValidated, so
	// that they take the put route (the gate, a synchronous slave).
	Put(ctx context.Context, c TxConn, cmd *wire.Put) *wire.Result
	// ConnClosed is called once when connection c closes.
	ConnClosed(c TxConn)
}

// SlaveStats supplies replication status for `stats slave` and the `slave`
// line of system stats. The georeplicator's receiver implements it on a
// slave. Lines must return quickly and be safe for concurrent use.
type SlaveStats interface {
	// IsSlave reports whether this broker runs as an async slave.
	IsSlave() bool
	// Lines returns the body lines of `stats slave`, without CRLF.
	Lines() []string
}

// Store is the part of *store.Store the broker uses; *store.Store implements
// it. Tests substitute failing implementations through it.
//
// Append must not keep any msgs[i].Body after it returns (it copies them
// into records): the broker reuses the buffers of plain puts.
type Store interface {
	SetPolicy(topic string, p store.Policy)
	Append(ctx context.Context, topic string, partition int, msgs []store.Message) ([]store.Appended, error)
	// AppendAsync queues an append behind the caller's earlier ones
	// without waiting for its group commit. notify, when not nil, gets the
	// outcome once, quickly and without blocking, before Done is closed
	// (see store.Store.AppendAsync).
	AppendAsync(ctx context.Context, topic string, partition int, msgs []store.Message, notify func([]store.Appended, error)) *store.PendingAppend
	Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error)
	NearestOffset(topic string, partition int, offset int64) (int64, error)
	Partition(topic string, partition int) (store.PartitionInfo, error)
	Partitions() []store.PartitionInfo
	Retain(topic string, now time.Time) (int, error)
	Health() error
}

// RunReader is a Store that can answer a get from its files without a
// copy (see store.Store.ReadRun); the broker uses it when the Store has it.
type RunReader interface {
	ReadRun(topic string, partition int, offset int64, maxBytes int) (*store.LogRun, error)
}
