package broker

import (
	"context"

	"metaq/broker/wire"
)

// BrokerInfo is what the broker registers about itself (spec §3.1).
type BrokerInfo struct {
	ID             int    // brokerId
	URL            string // meta://host:port
	ConfigChecksum uint32 // CRC32 of the raw server.ini (master_config_checksum)
}

// TopicInfo is what the broker registers about one topic (spec §3.1).
type TopicInfo struct {
	Topic           string
	NumPartitions   int
	AcceptPublish   bool
	AcceptSubscribe bool
}

// Registry publishes the broker and its topics (ZooKeeper, spec §3). The
// broker calls it from its own goroutines, possibly concurrently; an
// implementation must be safe for concurrent use. A nil Registry in Options
// means standalone (zk.zkEnable=false).
//
// The broker calls RegisterBroker once from Start (and again on Reload, with
// the new config checksum), RegisterTopic for every configured topic at
// Start, for a new or changed topic on Reload and the first time a put
// creates a topic's store, and Unregister from Close before it stops
// serving. Calls take the broker's context and must return when it ends.
// After Unregister the broker makes no further calls.
type Registry interface {
	RegisterBroker(ctx context.Context, b BrokerInfo) error
	RegisterTopic(ctx context.Context, t TopicInfo) error
	Unregister(ctx context.Context) error
}

// TxConn identifies the client connection a transaction command came on,
// so that a TxHandler can roll back a connection's local transactions when
// it closes (spec §11).
type TxConn struct {
	ID         uint64 // unique per broker run
	RemoteAddr string
}

// TxHandler processes transactions (spec §1.13, §6). Until one is set in
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
	// use Broker.CheckPut.
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
