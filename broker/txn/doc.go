// Package txn implements MetaQ's transactions on the broker side: local
// transactions (TX:<sessionId>:<n>, owned by one connection) and XA
// transactions (XID:<formatId>:<gtrid>:<bqual>:<uniqueQualifier>, broker-wide),
// with the state machine of MetaQ 1.4.6's LocalTransaction and XATransaction
// (see Transactions in broker/wire/doc.go) and a redo journal that keeps the same guarantees:
//
//   - messages put inside a transaction are invisible until commit;
//   - a prepared XA transaction survives a crash and shows up again in RECOVER;
//   - a commit that crashed half way is finished on restart, exactly once.
//
// # Journal
//
// Files <dataLogPath>/transactions/redo.<n>, n counting up. Each entry is
//
//	+----------+----------+------+--------------------+
//	| len u32  | crc32c   | kind | payload (len-1 B)  |
//	+----------+----------+------+--------------------+
//
// big-endian, where crc32c (Castagnoli) covers kind and payload, and the
// payload is JSON. Kinds: put (key, topic, partition, id, flag, body),
// prepare, commit intent (key and, per partition, the partition's end offset
// before the append: a lower bound for where the batch lands), done, rollback,
// heuristic (an operator's decision kept until FORGET), and snapshot (the
// first entry of a file that restates every live transaction).
//
// # Commit
//
// A commit's batches go to the Store as one unit when it is a GroupStore
// (the broker's put route, Broker.StoreValidatedGroup): one check of the
// broker's write gate and one log write, so a switchover or fence that
// stops the master's writes meanwhile leaves all of the commit's
// partitions stored or none; replication ships that write in one frame,
// and a commit with topics of minSyncSites waits once for the sites that
// cover all of it. Its answers: committed; refused before
// anything was stored (rolled back, XA_RBOTHER, or for a prepared XA
// transaction still prepared, XAER_RMFAIL); or of unknown outcome
// (XAER_RMFAIL, said in the text: a store failure, or writes stopped
// after the gate let it pass, so it may have reached the log after the
// point a new master starts from). The intent of a commit of unknown
// outcome stays: a COMMIT sent again, or a restart, finishes it as below
// (only the batches not found are stored), and it cannot be rolled back.
// A commit refused before anything was stored is withdrawn in the journal:
// a rollback entry, or for a prepared XA transaction a second prepare.
//
// The journal is replayed on Open. A torn tail (short entry or bad crc) is
// where the journal ends: it is truncated. After replay a commit intent without
// done is finished: each partition is searched from the recorded lower bound
// for the batch's first message id, and the batch is appended only if it is
// not there (the store writes one Append as one log entry, so a batch is
// either wholly present or absent). A finish the broker's write gate
// refuses (it starts as a replica) is kept for a COMMIT sent again or the
// next start. Prepared XA transactions are restored;
// every other unfinished transaction is rolled back, as MetaQ does at restart.
//
// # fsync (flushTxLogAtCommit)
//
// 1: prepare, commit intent and rollback entries are fsynced before they are
// answered (and with them every put entry written before). 2: fsynced once a
// second. 0: left to the OS. Put entries are never fsynced on their own: a put
// that is lost in a crash belongs to a transaction that was not yet prepared
// or committed, and such transactions are rolled back at restart anyway.
//
// # Compaction
//
// When the current file passes JournalFileSize, the live transactions are
// written to redo.<n+1> (fsynced and renamed into place) and the older files
// are removed. This replaces MetaQ's checkpoint files: nothing older than the
// newest file is ever needed. Open does the same after replay. A snapshot
// file starts with a snapshot entry: replay forgets what the files before
// it said, so files a crash left before their removal are not read twice.
// When the snapshot cannot be written (a full disk) Open fails, naming the
// file, and the files it would have replaced stay as they were.
//
// # Message ids
//
// As in MetaQ, a message gets its id when its put arrives, not at commit, so
// a committed transaction's ids may be lower than ids of plain puts appended
// to the same partition while it was open.
package txn
