// Package wire is the codec of the MetaQ 1.4.6 TCP protocol: it
// knows bytes and commands only and imports nothing else from the project,
// so that it can be fuzzed on its own. The broker and the Go client share
// it: every command type has an encoder (AppendTo) and the Decoder reads
// requests and responses alike.
//
// # Framing
//
// Every frame, in both directions, starts with a text header line ended by
// CRLF (a lone LF does not end it). The header is UTF-8 and is split on
// single spaces exactly as Java's Pattern.compile(" ").split does: two
// spaces give an empty field, empty fields at the end are dropped, nothing
// is trimmed, and a tab is an ordinary character. Only put and sync (from
// clients) and result and value (from the broker) carry a body, whose byte
// length is a header field:
//
//	put <topic> <partition> <len> <flag> <opaque>\r\n<body>                      6 fields (old clients)
//	put <topic> <partition> <len> <flag> <checksum> <opaque>\r\n<body>           7 fields
//	put <topic> <partition> <len> <flag> <txKey> <opaque>\r\n<body>              7 fields (old, in a tx)
//	put <topic> <partition> <len> <flag> <checksum> <txKey> <opaque>\r\n<body>   8 fields
//	get <topic> <group> <partition> <offset> <maxSize> <opaque>\r\n
//	offset <topic> <group> <partition> <offset> <opaque>\r\n
//	version [<opaque>]\r\n
//	stats [<item>] [<opaque>]\r\n         ("stats  <opaque>" = blank item)
//	quit\r\n
//	transaction <txKey> <sessionId> <type> [<timeout>] [<uniqueQualifier>] <opaque>\r\n
//	sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>\r\n<body>
//	syncunit <count> <len> <opaque>\r\n<count sync frames>          (this project only)
//	result <code> <len> <opaque>\r\n<body>
//	value <len> <opaque>\r\n<data>
//
// A 7-field put carries a checksum when its sixth field starts with a digit
// or '-', else a transaction key. A 6-field transaction carries a timeout
// when its fifth field is all digits, else a unique qualifier.
//
// The command is chosen by the first character of the first field, as
// MetaQ does: p put, g get, t transaction, r result, o offset, q quit
// (whatever follows), v value if the word is exactly "value" else version
// (whatever follows), s stats if the word is exactly "stats" else sync. The
// other commands must then match their whole word.
//
// # Opaque
//
// Every request except quit ends with an opaque, a signed 32-bit decimal
// (usually negative: Java clients count up from -2147483648), that the answer
// echoes as its last header field. version and stats may omit it; the
// broker then uses NoOpaque (2147483647). Requests are pipelined and may be
// answered out of order.
//
// # Errors
//
// MetaQ closes the connection, without answering, whenever its decoder
// fails: an unknown command, a wrong word, a missing field, a number that
// does not parse, a bad transaction key or type. Decode returns a
// *FatalError for all of these, and the caller closes the connection. A
// declared body longer than Decoder.MaxBodySize, or negative, is fatal too
// and is detected before any body byte is read. *ClientError is the
// recoverable kind: the broker answers it with a result frame and keeps
// the connection.
//
// # Records
//
// A value frame carries stored records back to back, each a 20-byte header
// followed by the put body, and may end in a partial record:
//
//	+--------+----------+---------+--------+-----------------+
//	| msgLen | checksum |   id    |  flag  | body (msgLen)   |
//	| int32  |  int32   |  int64  | int32  | [attr] payload  |
//	+--------+----------+---------+--------+-----------------+
//
// checksum is CRC32(body) & 0x7FFFFFFF (Checksum); all integers big-endian.
// msgLen counts the body only. A body whose flag has bit 0 set starts with
// an attribute: int32 attrLen, then attrLen bytes of UTF-8 (possibly none),
// then the payload. Clients verify each record's checksum and refuse a body
// over 2 MiB. Example: id 0x0102030405060708, body "hello" is
// 00000005 3610a686 0102030405060708 00000000 68656c6c6f.
//
// The rest of these notes are the MetaQ 1.4.6 rules the project's comments
// refer to by heading ("see Message ids in broker/wire/doc.go"): what a
// compatible broker must answer, and the behaviour around the wire that
// Java clients and MetaQ's tools rely on.
//
// # Status codes
//
// A result frame's code: 200 success (anything else is an error to the
// client); 301 moved, the body is the offset to fetch from instead; 400 bad
// request (get with maxSize <= 0); 403 the partition is closed; 404 no such
// partition store, or nothing at that offset yet; 500 a put, sync or
// transaction failure, the body being the text clients show; 503 a command
// this broker does not serve (sync on a broker that is not a sync slave).
//
// # put
//
// A put is handled in this order: (1) a closed partition answers 403;
// (2) partition -1 means "broker picks": a random partition of the topic;
// (3) a topic no [topic=...] pattern accepts, or a partition outside
// [0, numPartitions), answers 500; (4) a topic put for the first time is
// registered in ZooKeeper; (5) the message gets an id and its record is
// built, and a checksum other than -1 (NoChecksum) that differs from
// CRC32(body) & 0x7FFFFFFF answers 500; (6) the record is appended and 200
// answers "<id> <partition> <offset>", offset being where the record starts.
// Error texts are MetaQ's: "Put message to [broker '<url>'] [partition
// '<topic>-<p>'] failed.Detail:<reason>". acceptPublish is not checked on
// put; it only decides ZooKeeper registration. A put carrying a
// transaction key is stored at commit (see Transactions).
//
// # get
//
// A get is handled in this order: a closed partition answers 403; no store
// for the partition answers 404 "The topic `<t>` in partition `<p>` is not
// exists"; maxSize <= 0 answers 400. Then, with the partition's readable
// end (see Visibility): an offset below the first segment answers 301 with
// the partition's min offset; an offset at the end answers 404 "Could not
// find message at position <offset>"; an offset beyond the end answers 301
// with the end when it is Long.MAX_VALUE (or the broker corrects consumer
// offsets), else 404. Otherwise the answer is a value frame of at most
// min(maxSize, maxTransferSize) bytes from offset, which never crosses a
// segment and may end in a partial record. One addition to MetaQ: on a
// broker promoted to master after a failover, a consumer group's first get
// of a partition beyond where the old master's records end there answers
// 301 with that end (broker/divergence.go). Never answer "value 0": the Java
// client counts an empty run as a failed try. The offset is not checked
// against record boundaries; a client that lands inside a record fails the
// checksum and asks offset. A second addition, off by default: with
// getWaitMs ([limits]) above 0, a get that would answer 404 "Could not find
// message" for a partition that exists waits up to getWaitMs for the
// partition's readable end to pass its offset and is then answered as
// above (records as soon as a group commit or flush makes them readable),
// or 404 when the time is up, or at once when the client quits or closes
// the connection; woken with fewer than getWaitMinBytes readable at its
// offset (at most maxSize), it waits up to getWaitLingerMs more for them
// (within getWaitMs); a get whose offset was already below the readable
// end when it began to wait, and still finds nothing there, is answered
// 404 at once; other requests on the connection are
// answered meanwhile (answers go by opaque). MetaQ's Java consumer waits
// fetchTimeoutInMills (10 s by default) for a get's answer.
//
// # offset
//
// offset answers 404 when the partition has no store, else 200 with one
// number: the min offset when below it, the readable end when at or beyond
// it, and otherwise the start of the (MetaQ) segment holding the offset,
// not the nearest record boundary.
//
// # version
//
// version answers 200 with the broker's version text; clients never parse
// it and use the exchange as a heartbeat.
//
// # stats
//
// stats answers 200 with "STATS\r\n", lines of space-separated values each
// ended by CRLF, and "END\r\n". A blank item gives the system counters
// (pid, broker_id, port, uptime, version, slave, curr_connections, threads,
// cmd_put, cmd_get, ...), and topics, offsets, realtime, help, reset and
// slave have their own lines; any other item is taken as a topic name.
// "stats config" is the exception: the answer body is the broker's
// server.ini, byte for byte, with no STATS/END (async slaves read it).
//
// # Message ids
//
// An id is ((ms - 1303895660503) << 22) | (brokerId << 12) | sequence: a
// 12-bit sequence per millisecond and brokerId in 0..1023. MetaQ takes ms
// from a monotonic clock, so its ids are negative in practice and only
// unique within one run; this project uses the wall clock with the same
// layout. Clients treat ids as opaque and drop duplicates they remember;
// samsa offset recovery needs ids to go up within a partition; slaves keep
// the master's ids; a transactional put gets its id when it arrives.
//
// # Transactions
//
// Keys are "TX:<sessionId>:<n>" (local) or
// "XID:<formatId>:<hex gtrid>:<hex bqual>:<uniqueQualifier>" (XA); any
// other form closes the connection. Types: BEGIN, PREPARE,
// COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK, RECOVER, FORGET, END. END
// gets no answer; PREPARE answers the XA vote (0 ok, 3 read-only); RECOVER
// answers the prepared XA keys of the request's unique qualifier, joined by
// CRLF; an XA failure answers 500 "XAException:code=<n>,msg=<text>". A local
// transaction belongs to its connection and session: a put naming one not
// begun there answers 500 "Local transaction '<key>' has not been started."
// (an XA one: "XA transaction '<key>' has not been started.", without the
// XAException prefix). A transactional put with partition -1 answers 500;
// otherwise it is journalled and answered 200 "<id> <partition> -1", and the
// messages are appended at commit, in arrival order, with the ids they got.
// A transaction whose BEGIN set a timeout is rolled back when it expires.
// MetaQ 1.4.6 left a local transaction open when its connection closed;
// this project rolls it back then.
//
// # sync
//
// sync is what a samsa master sends its gregor slave for every put: like a
// put, but carrying the master's message id, which the slave stores as is
// (partition -1 is not resolved); the answer is a put's. Only a gregor
// slave serves it; any other broker answers 503. See Samsa and gregor.
//
// # sync unit
//
// syncunit is this project's, not MetaQ's: a samsa master sends a
// transaction's commit as one frame, whose body is the commit's sync
// frames one after the other (their opaques unused), and the slave stores
// them as one unit of its log, all or none, and answers once: 200 with
// the number of messages as body, or the first message's refusal (a put's
// code and text) with nothing stored. A connection cut inside the frame
// leaves nothing of it, so a slave never holds part of a commit. MetaQ's
// decoder reads a word starting with s that is not "stats" as sync and
// closes the connection on any other word, answering nothing; so the
// master first asks "stats sync_units", to which a slave of this project
// answers the line "sync_units <bytes>" (the largest unit body it
// decodes) and a MetaQ broker the statistics of a topic of that name
// without such a line, and sends syncunit only on a connection whose
// slave offered it and only for a unit of at most that size; otherwise a
// commit goes as one sync per message (MetaQ's samsa master sends its
// slave nothing of a transaction's commit).
//
// # Visibility
//
// A partition's readable end is what has been flushed: get, offset and
// stats offsets use it, so a get cannot start at an unflushed record. A get
// that starts below it is cut at the end of the segment file instead, so
// its run may carry records written after the last flush. With
// unflushThreshold <= 0 (group commit) a put is answered after its record
// is flushed.
//
// # Retention
//
// deleteWhen is a Quartz cron expression (seconds first) run per topic;
// deletePolicy is "delete,<age>" or "archive,<age>[,compress]", the age a
// number with an optional s, m or h suffix (hours by default). Only
// read-only segments older than the age go; afterwards a get below the new
// min offset answers 301.
//
// # ZooKeeper layout
//
// Node data is plain UTF-8. Under zk.zkRoot (default /meta) a broker
// writes, all ephemeral: brokers/ids/<id>/master = "meta://host:port"
// (a slave: brokers/ids/<id>/slave<n>), brokers/ids/<id>/master_config_checksum
// = the unsigned CRC32 of server.ini, and per topic
// brokers/topics/<topic>/<id>-m = numPartitions (old clients),
// brokers/topics-pub/<topic>/<id>-m when acceptPublish and
// brokers/topics-sub/<topic>/<id>-m when acceptSubscribe, both
// {"numParts":n,"broker":"<id>-m"} with exactly those two fields (a slave
// writes -s<n>). On a clean stop it removes them and waits zk.zkSyncTimeMs
// so that clients notice.
//
// # Consumer offsets
//
// Consumers save consumers/<group>/offsets/<topic>/<id>-<partition> =
// "<lastMsgId>-<nextOffset>" (pre-1.4 clients: just the offset); readers
// split at the last '-'. lastMsgId is -1 when the offset moved without a
// message being consumed.
//
// # Producers
//
// A producer lists brokers/topics-pub/<topic>, keeps the <id>-m children
// whose master node exists, and takes partitions (id, 0..numParts-1) sorted
// by id then partition; it never sends to slaves.
//
// # Consumer groups
//
// A consumer registers consumers/<group>/ids/<group>_<consumerId> with its
// topics, lists the partitions "<id>-<p>" of every topics-sub child (masters
// and slaves), sorted as strings, and the group's consumers, sorted as
// strings, and takes its share: DEFAULT gives consumer i of C, with P
// partitions, P/C partitions (one more when i < P%C) from index
// (P/C)*i + min(i, P%C); CONSIST uses a hash ring. It claims a partition by
// creating consumers/<group>/owners/<topic>/<partition>, and reads it from
// the master when one is registered, else from one of its slaves.
//
// # Configuration
//
// server.ini has [system], [zookeeper] and [topic=<name>] sections with
// MetaQ's key names and defaults (broker/config/keys.go lists them); a
// topic section inherits what it leaves out from [system].
//
// # Plugin files
//
// async_slave.properties (slaveId, slaveGroup, slaveMaxDelayInMills,
// autoSyncMasterConfig) and samsa_master.properties (slave,
// sendToSlaveTimeoutInMills, slaveContinuousFailureThreshold,
// checkSlaveIntervalInMills, recoverOffset, recoverParallel,
// recoverParallelHint, callbackThreadCount) are Java properties files.
//
// # Reload
//
// A reload re-applies only the [topic=...] sections (new topics, changed
// settings registered again in ZooKeeper; removed topics stay accepted until
// a restart) and rewrites master_config_checksum, which makes async slaves
// restart their subscription. [system] and [zookeeper] changes need a
// restart.
//
// # Async slaves
//
// An async slave has its master's brokerId, registers slave<n> and
// <id>-s<n> nodes, and replicates by consuming its master as group
// slaveGroup, storing each record with the master's id and flag so that its
// records, and therefore its offsets, equal the master's byte for byte.
// With autoSyncMasterConfig it takes the master's server.ini through
// "stats config". Clients read from it only while the master is absent.
//
// # Samsa and gregor
//
// The samsa master forwards each put to its gregor slave with sync, under a
// per-partition lock, and answers 200 only when both stored it; a
// disconnected slave answers 500 "Slave is disconnected " (trailing space
// included) and a failed one "Put message to [slave 'meta://<addr>']
// [partition '<t>-<p>'] failed". After slaveContinuousFailureThreshold
// failures in a row it leaves ZooKeeper and probes the slave every
// checkSlaveIntervalInMills, registering again once a probe succeeds. This
// project's samsa master sends a transaction's commit as one sync unit to
// a slave that offers them (see sync unit). The
// gregor slave never registers in ZooKeeper. With recoverOffset a former
// gregor slave started as samsa master first moves every group's saved
// offset onto its own records: the end of the last record whose id is at
// or below the saved message id.
//
// # metaServer.sh
//
// MetaQ's bin/metaServer.sh commands: start [slave|samsa|gregor], stop,
// restart, status, reload, stats [-item X], slave-status,
// open-partitions/close-partitions (closed partitions answer 403, not
// persisted), move-partitions/delete-partitions (offline) and query.
// cmd/metaq-server replaces it.
//
// # Contrib clients
//
// The python, ruby and .NET producers of MetaQ's contrib read the old
// brokers/topics/<topic>/<id>-m nodes and send the 6-field put; those are
// what keep them working.
//
// # Java defects
//
// Where MetaQ 1.4.6 is wrong this project does not copy it: ids from the
// wall clock, an idle local transaction rolled back when its connection
// closes, a warning for puts that no get can return.
package wire
