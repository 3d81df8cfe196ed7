// Package broker serves the MetaQ 1.4.6 wire protocol (broker/wire/doc.go) on top of
// broker/store: it owns the listener and the client connections, topic
// acceptance and partition checks, closed partitions, statistics
// (`stats`), retention scheduling (deleteWhen crons), configuration reload
// (see Reload in broker/wire/doc.go) and the synchronous replication pair (see Samsa and gregor in broker/wire/doc.go).
//
// What it does not own it reaches through small interfaces, so that it
// imports neither ZooKeeper nor the transaction journal:
//
//   - Registry: ZooKeeper registration (broker/registry implements it);
//     nil runs standalone.
//   - TxHandler: the `transaction` command and puts with a transaction key
//     (broker/txn implements it); unset, they get 500.
//   - SlaveStats: `stats slave` and the `slave` line of system stats
//     (the georeplicator's receiver implements it).
//   - Store: the part of *store.Store the broker uses.
//
// # Requests and connections
//
// Each connection has one reader goroutine. Plain puts, and on a sync
// slave the master's syncs, take the put route that put.go describes top
// to bottom: the reader validates what one read brought (checkPut, the one
// copy of the checks), registers a topic on its first put, and hands each
// partition's batch to the store (or, on a sync master, to the syncMaster
// in front of it), which answers the batch when its group commit returns.
// A transaction's messages join the route at its commit, all its
// partitions' batches with one gate check and one store hand-off
// (Broker.StoreValidatedGroup). In front of the store step (or of the
// syncMaster), siteSyncStore holds the answers of topics with minSyncSites
// until that many slave sites of the cross-site replication
// (SiteReplicator, the georeplicator's Shipper) fsynced them; with too few
// connected, checkPut refuses their puts with 503, or syncDegrade=async
// lets them through with an alarm (syncsites.go). A get that needs no wait is
// answered on the reader as well: a result that reads nothing (the end of
// its partition, a closed or missing one),
// or at the tail sent from the log files (below) with its bytes free in the
// byte budgets now; a get the copy path must read, one far from the tail
// (whose chunks may be in a sealed segment's index on disk) or one that
// would wait for the budget goes to a worker. Every other request runs on a worker goroutine
// of the connection, so requests are processed concurrently and answered
// by opaque, possibly out of order, as the Java broker's thread pools do.
// One writer goroutine per connection serialises answers. The in-flight
// requests (MaxInFlight) are bounded per connection, and a write that does
// not progress within WriteTimeout closes that connection only. Puts a
// slave's write gateway forwards to the master wait a WAN round trip, not
// a disk: handed to the gateway, they count against a bound of their own
// (8192 per connection), their bodies in the byte budget until answered,
// and a gateway link a master serves gets 8 x MaxInFlight (conn.fwdSlots). Malformed
// input closes the connection without an answer, as MetaQ does; requests
// read before it are still answered. After a promotion (SetPromotionEnds)
// a consumer group's first get beyond a partition's promotion end is moved
// back to it: the group read records of the former master lost at the
// failover (divergence.go).
//
// # Zero-copy gets
//
// A get's records leave the log unchanged, so on a plain TCP connection
// the answer is sent from the segment files with sendfile (store.ReadRun,
// a store.LogRun): the writer goroutine writes any answers before it, then
// sends the value header (held back with MSG_MORE, so it leaves in the
// same packet as the first records) and the run straight to the socket
// under the same write deadline, updating writingSince as the run
// progresses. The
// run holds its length of the byte budget until written, as copied data
// does, so [limits] bound it the same way. The store declines runs it
// cannot vouch for or that would cost more than a copy (bytes no crc
// check has covered since start-up, chunks of less than 4 KiB on
// average: see Zero-copy gets in broker/store/doc.go); those, answers
// cut down under memory pressure, and every get on a TLS connection
// (Options.Listener) take the copy path (read, check, copy, write).
// Options.CopyGets forces the copy path. A run dropped unsent (the
// connection closed) is released, so retention can close its files.
//
// # Resource limits
//
// The [limits] section of server.ini (Options override it) bounds what
// clients make the broker hold. The accept loop refuses connections over
// MaxConnections or MaxConnectionsPerAddress (connLimits). The reader's
// socket reads carry a deadline: IdleTimeout between requests (unless
// answers are still owed), and ReadTimeout for the time spent waiting for
// one request's bytes (frameClock), which cuts off slowloris clients. Get
// answers not yet written and put bodies not yet stored reserve their bytes
// in a byte budget per connection (MaxPendingBytes) that draws from one per
// IP address (MaxAddressBufferedBytes), which draws from one for the broker
// (MaxBufferedBytes), before the data exists: a get reserves
// before it reads the store and releases once written; a body reserves
// before it is read from the socket and releases once the store has copied
// it. From half the broker's budget in use, get answers shrink to 1 MiB
// (the first record stays whole). When a budget is used up gets wait and
// the reader stops reading, which pushes back through TCP. While requests
// wait for the broker's budget, connections that hold some of it and take
// none of their answers for StallTimeout are closed, and so are those that
// reserved a put body and sent none of it for StallTimeout (relievePressure). A
// closing connection gives back whatever it still holds
// (byteBudget.detach).
//
// # Other protocols on the MetaQ port (handoff.go)
//
// An admitted connection on a plain TCP listener (the connections of an
// Options.Listener of another kind, TLS say, are all MetaQ's) waits for
// its first byte (peeked, not read, so zero-copy gets keep the socket; at
// most SniffTimeout, by default IdleTimeout) on a goroutine of its own, so
// a silent client neither holds up the accept loop nor keeps its slot past
// that. A byte a MetaQ request may start with (wire.CanStartRequest) makes
// it a MetaQ connection. A byte no request starts with goes to the listener
// that claimed it with ListenFirstBytes (the replication stream: its frame
// magic and a TLS ClientHello's first byte; a slave site's gateway link,
// 0xA8, served as a MetaQ connection through ServeConn once
// authenticated), still counted by connLimits
// until closed, or, unclaimed, closes the connection (MetaQ would, at the
// end of that line).
//
// # Write gate
//
// Broker.RefuseWrites(holder, Refusal) makes the broker refuse client
// writes until AllowWrites(holder): plain puts, transactional puts (through
// CheckPut) and transaction commits (StoreValidatedGroup, one check for
// all of a commit's partitions) are answered, at the
// put route's validation step, with MetaQ's put failure text ending in
// "Detail:<Reason>", code 403, or 503 when Refusal.Retry says the
// condition should pass by itself. Several holders may refuse at once
// ("replica", a failover fence, a full disk); writes pass only once all
// withdrew, and a final refusal is answered before a retriable one.
// Replication is not a client write: a sync master's `sync` commands and
// the georeplicator's appends (which bypass the broker) are never gated.
// A bundle running as an async or gregor slave refuses from before its
// broker serves, since a replica keeps its master's offsets and a put
// stored there would make it diverge. Writes already past the gate finish,
// and learn whether a refusal came before the store took them (gatePass):
// a switchover flushes the log right after it refuses writes and hands
// that end to the new master, so such a write may lie past it. A plain put
// that has not reached the store yet is checked at the gate again (a
// refusal answers it, a Hold takes it); one the store already took is
// answered 500, its outcome unknown, unless a switchover's Hold is in
// effect: then its answer waits for the handover's outcome, 200 once the
// new master took over holding a log end its record lies below, else 500
// (Hold.awaitHandover); a commit's error wraps ErrWritesStopped. A write check (SetWriteCheck) is asked again when a
// stored put is answered; a refusal while a Local Hold is in effect (a
// master confirming its generation again) keeps the answer in the Hold
// until it ends or its time bound passes, then asks again: 200 when it
// lets writes through, else 500, stored here but not acknowledged.
//
// # Lock order
//
// Locks are held briefly and, with two exceptions, not nested: a
// synchronous master holds syncMaster.closeMu while it queues a batch
// (serialQueues.mu) or starts its probe, and the forwarder of held puts
// (hold.go, forward.go) and a slave's write gateway (gateway.go) take a
// connection's fwdConn.mu under their own mu (forwarder.mu, Gateway.mu).
// Hold.mu and fwdConn.wmu are leaves; a held or forwarded batch is
// answered with no hold or gateway lock held. The gateway queues a batch's
// frames under Gateway.qmu (the order of sends) in linkWriter.mu, a leaf;
// its connection's writer goroutine writes them with no gateway lock held.
// It dials the master with no gateway lock held either (one dial at a
// time, Gateway.dialing under Gateway.mu; FollowMaster gives up a dial to
// another address under Gateway.mu alone, before it takes Gateway.qmu).
// inFlightBytes.mu (the gateway-wide bound on forwarded bytes) is a leaf. Broker.mu, topicTable.mu,
// statsCounters.mu, conn.storedMu, wokenGets.mu (a connection's gets whose
// wait at the end of their partition ended: getwait.go), serialQueues.mu, byteBudget.mu (only
// for waiters; a connection's budget, its address's and the broker's are
// never locked together),
// connLimits.mu, retention.mu, writeGate.mu, siteSyncStats.mu and the
// syncMaster's mu and wmu are leaves. A connection handed over to another
// protocol (ListenFirstBytes) takes connLimits.mu when it is closed, and
// its listener Broker.mu when it is closed, whatever its owner holds then:
// both are leaves, so its owner may close them under its own locks.
// Registry and Store calls are made without any broker lock held. A put
// batch's answer is sent from the store's notify (the store's writer
// goroutine, or a syncMaster partition goroutine): it takes conn.storedMu
// and statsCounters.mu, one at a time, and never waits for the
// connection's writer. conn.storedMu also orders that answer against a
// shutdown that answers the same batches (conn.waitRequests, which takes
// them from conn.stored only once the broker's context is done): the
// answer removes them from conn.stored under it before it gives the read's
// batch slab back for reuse, which it does only while the context is alive
// (put.go, batchSlab).
package broker
