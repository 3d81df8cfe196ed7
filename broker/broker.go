// Package broker serves the MetaQ 1.4.6 wire protocol (spec §1) on top of
// broker/store: it owns the listener, the client connections, topic
// acceptance and partition checks, statistics, retention scheduling and the
// synchronous replication pair. ZooKeeper registration and transactions are
// reached through the Registry and TxHandler interfaces.
package broker

import (
	"context"
	"errors"
	"net"

	"metaq/broker/config"
)

// Broker is one MetaQ-protocol server.
type Broker struct {
	opts Options
	ln   net.Listener
}

// New checks opts and builds a Broker. It does not listen yet.
func New(opts Options) (*Broker, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Broker{opts: opts}, nil
}

// Start listens, registers with the Registry and serves until Close or ctx ends.
func (b *Broker) Start(ctx context.Context) error { return errors.New("broker: not implemented") }

// Close stops the broker (idempotent): it unregisters, stops accepting,
// closes connections, waits for in-flight requests and stops timers. It
// does not close the store.
func (b *Broker) Close() error { return nil }

// Addr returns the listening address, or nil before Start.
func (b *Broker) Addr() net.Addr { return nil }

// URL returns meta://host:port as the broker advertises itself.
func (b *Broker) URL() string { return "" }

// Reload re-applies the [topic=...] sections of cfg (spec §4.6).
// Signature once config.Changes lands in broker/config:
//
//	func (b *Broker) Reload(cfg *config.Server) (config.Changes, error)
func (b *Broker) reloadPending(cfg *config.Server) error {
	return errors.New("broker: not implemented")
}

// ClosePartitions closes partitions from..to (inclusive) of topic: puts,
// gets and syncs on them answer 403.
func (b *Broker) ClosePartitions(topic string, from, to int) {}

// OpenPartitions reopens partitions closed by ClosePartitions.
func (b *Broker) OpenPartitions(topic string, from, to int) {}

// Stats returns the body of `stats <item>` as the protocol sends it.
func (b *Broker) Stats(item string) string { return "" }

// Health is nil while the broker serves and its store accepts appends.
func (b *Broker) Health() error { return nil }

// SetTxHandler installs the transaction handler after New.
func (b *Broker) SetTxHandler(h TxHandler) {}
