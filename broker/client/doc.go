// Package client is a Go client for MetaQ (Metamorphosis 1.4.6) brokers and
// for this project's broker. It speaks the MetaQ text protocol (broker/wire/doc.go) through
// broker/wire and reads ZooKeeper through broker/registry.
//
// # Pieces
//
//   - Client (New) holds one pipelined TCP connection per broker address,
//     shared by every Producer and Consumer made from it, as the Java session
//     factory does. Requests are matched to answers by opaque, so the broker may
//     answer out of order; an idle connection sends `version` every
//     HeartbeatInterval and is closed after three failed heartbeats. Client also
//     has the pull API (Fetch, NearestOffset, EarliestOffset, LatestOffset,
//     OffsetForTime) and read-only views of topics, partitions and groups.
//   - Producer finds a topic's masters and partitions under topics-pub
//     (see Producers in broker/wire/doc.go) and follows changes through a watch; without ZooKeeper it uses
//     Config.Brokers and partition -1. A Selector picks the partition:
//     RoundRobin (the Java default, first pick index 1), Random, KeyHash and
//     Ordered (a key keeps its partition and waits rather than moves). Send
//     waits for the answer; SendAsync keeps up to WithMaxInFlight puts in flight
//     on the pipelined connection. Only failures Retriable reports are resent
//     (the connection failed before the request was written, or 503), so a retry
//     never stores a message twice.
//   - Consumer joins a group exactly as the Java client (see Consumer groups in broker/wire/doc.go): it
//     registers <root>/consumers/<group>/ids/<group>_<id>, balances with the
//     DEFAULT or CONSIST strategy (Assign) over the string-sorted member and
//     partition lists, claims owners nodes, and keeps offsets as
//     "<msgId>-<offset>" in ZooKeeper (ZKOffsetStore) or in a local file
//     (FileOffsetStore, used for broadcast and without ZooKeeper). Go and Java
//     consumers can share a group. Each owned partition has its own goroutine,
//     so a Handler sees one partition's messages in order. 301 moves the
//     offset, 404 and 403 back off up to WithMaxFetchDelay, a corrupt record
//     leads to an `offset` request, as in SimpleFetchManager.
//   - Router is the site-affinity hook: with WithRouter the consumer asks it
//     which address serves each partition (re-asked every WithRouteInterval);
//     without one it reads from the master, or a random slave while the master
//     is absent (Cluster.getBrokerRandom).
//
// # Delivery and the duplicate window
//
// Delivery is at least once. A message's offset is recorded after its
// Handler returns nil; offsets are saved every WithCommitInterval (5s), at
// every rebalance and on Close. After a crash, a lost ZooKeeper session or a
// partition moving to a member that did not see the last commit, the new
// reader starts at the last saved offset: up to one commit interval of
// messages per partition (plus the message being handled) can be delivered
// again. Within one process a cache of recently processed ids (IDCacheSize,
// 4096 like the Java client, keyed by group and id) drops such repeats; across
// processes the handler must tolerate them. A Handler that returns an error
// gets the same message again after WithHandlerRetryDelay, without end (the
// Java client would divert it to a local recover store after five tries);
// rebalances and Close wait for the running Handler, which should honour its
// context.
//
// # Time lookups
//
// The broker has no time index on the wire. OffsetForTime and StartAtTime
// use message ids, which this project's broker makes from the wall clock
// (IDTime decodes them): a binary search over segment starts, one record read
// per probe, then a scan of one segment. Against a Java 1.4.6 broker, whose
// ids count milliseconds since boot, the times are meaningless and these
// lookups must not be used.
//
// # Lock order
//
// Consumer: balMu, then mu or a partState's mu (never the other way);
// Producer: mu is released before a topic's mu is taken; conn: mu and wmu are
// never held together; pool: an address's dial mutex, then mu.
package client
