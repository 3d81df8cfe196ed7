// Package client is a Go client for MetaQ (Metamorphosis 1.4.6) brokers and
// for this project's broker: a producer with partition selectors and a
// pipelined connection per broker, and a consumer that balances partitions in
// a group exactly as the Java client does (DEFAULT and CONSIST strategies), so
// Go and Java consumers can share one group.
//
// Delivery is at least once. Offsets are committed every
// ConsumerOptions.CommitInterval and on Close; a crash or a rebalance replays
// what was delivered since the last commit (at most one commit interval of
// messages per partition, plus the batch in flight). Duplicates that reach the
// same process are dropped by message id in an LRU cache (4096 entries by
// default, like the Java client), so replays are only visible across restarts
// or between consumers.
package client
