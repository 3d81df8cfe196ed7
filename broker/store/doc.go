// Package store is the broker's storage engine: MetaQ-compatible partitions
// (spec §1.10, §2) kept in ONE commit log shared by every partition, with
// per-partition indexes, group commit, crash recovery and retention.
//
// # Why one shared log
//
// MetaQ keeps one directory of segment files per partition. With 1,024 or
// 10,000 partitions every group commit touches as many files as there are
// busy partitions, so the disk sees scattered writes and one fsync per file.
// Here every append of every partition goes to the tail of one log file (the
// active segment), written by one goroutine, so the disk sees one sequential
// stream and one fdatasync per batch whatever the number of partitions (the
// approach of RocketMQ's CommitLog + ConsumeQueue). The per-partition view
// MetaQ clients expect (byte offsets, `get` runs, `offset` answers) is
// rebuilt from an index that points into the log.
//
// # Files
//
//	<Dir>/log/00000000000000000000.log   log segment, named by the log position
//	<Dir>/log/00000000001073741900.log   of its first byte (20 digits, zero padded)
//	<Dir>/log/00000000001073741900.idx   index summary of a segment (see below)
//	<Dir>/log/<segment>.log.<pos>.bad    copy of a quarantined (corrupt) range
//	<Dir>/log/<segment>.log.arc | .zip   segment archived by retention
//	<Dir>/checkpoint                     partition table + index state (atomic)
//
// Log positions are global byte positions: segment N+1 starts exactly where
// segment N ends, so a position names one byte in the whole log. A segment is
// rolled when it reaches Options.SegmentBytes (it may exceed it by one batch).
//
// # Log entries
//
// A segment is a sequence of entries, each a 36-byte header and a payload:
//
//	 0      4        8        12   13    16      20                28            36
//	+------+--------+--------+----+-----+-------+-----------------+-------------+----------...
//	|magic | length | crc32c |type| 000 |  pid  | partition offset| append time | payload
//	| MQLG | uint32 | uint32 | u8 |     | uint32|      int64      | int64 unixms| (length bytes)
//	+------+--------+--------+----+-----+-------+-----------------+-------------+----------...
//
// All integers are big endian. crc32c (Castagnoli) covers bytes 12 .. 36+length,
// so the type, partition key, offset, time and payload are all protected.
//
//   - type 1, data: the payload is whole MetaQ records of ONE partition, back
//     to back, exactly as `get` sends them (spec §1.10):
//
//     +--------+----------+----------+--------+------------------+
//     | msgLen | checksum |    id    |  flag  | body (msgLen)    |  ...next record
//     | int32  | crc32&7f.| int64    | int32  |                  |
//     +--------+----------+----------+--------+------------------+
//
//     "partition offset" is the MetaQ byte offset of the first record. A
//     partition's bytes are the concatenation of its data payloads in log
//     order, so an append returns the record's start offset and the next
//     record starts at offset+20+msgLen.
//
//   - type 2, define: binds pid (a small number) to topic and partition;
//     payload = uint16 topic length, topic, int32 partition; "partition
//     offset" is the partition's end when the entry was written. A define is
//     written when a partition is created AND again for every live partition
//     at the start of each new segment, so any suffix of the log describes
//     its own partitions (the key table survives retention and a lost
//     checkpoint). 10,000 partitions cost about 0.6 MB per segment. A
//     define whose end is below the partition's current end records a fence
//     (see Recovery): replay cuts the partition back to that end.
//
//   - type 3, delete: pid was deleted (DeletePartition); its data is dead.
//
// # Indexes and memory
//
// Each partition keeps in memory one 16-byte entry per data chunk
// (partition offset, log position); a chunk's length is the next chunk's
// offset minus its own. Reads binary-search it and pread the log, so no file
// descriptor is held per partition (10,000 partitions would not fit in
// `ulimit -n` with MetaQ's layout; the store holds one descriptor per log
// segment). Memory is 16 bytes per append call (up to twice that while a
// slice grows): about 1.5% of the log for 1 KiB single-message puts, e.g.
// 160 MB for a 10 GB log, and far less when puts carry several messages.
// Retention frees the entries of trimmed data. The writer also keeps the
// active segment's entries for its .idx (32 bytes per chunk, dropped at
// the roll, when the .idx is written: about 32 MB for a 1 GiB segment of
// 1 KiB chunks, and a short pause of the writer while it is written).
// Each partition also keeps its virtual segment boundaries (see NearestOffset)
// and a sparse time index: one (time, offset) pair when a chunk is at least
// one second newer than the previous pair AND 64 chunks came since, so it
// costs at most 1/64 of the chunk index. Append times never decrease along
// the log (the writer keeps them monotonic), so OffsetForTime narrows the
// range with the sparse index and binary-searches the chunk headers in it
// (a few preads) for the exact first chunk appended at or after t.
//
// The on-disk compact form of the index is the .idx file written when a
// segment is sealed (32 bytes per entry: pid, length, offset, position,
// time) plus the checkpoint, which holds the partition table, each
// partition's Min, end and segment boundaries, the quarantined ranges and
// the log position P up to which that state is complete. A checkpoint (with
// an .idx of the active segment covering up to P) is written after each
// segment roll, before retention removes files, and by Close. Index data is
// never fsynced on the append path: it is rebuilt from the log after a
// crash, scanning at most from the last roll.
//
// # Writes, group commit and fsync rules
//
// One writer goroutine owns the active segment. Append and AppendRaw build
// their records in the caller's goroutine and queue a request; the writer
// takes every queued request (up to 4 MiB), assigns offsets and message ids,
// frames one entry per request, writes the whole batch with one write call
// and then:
//
//   - if any request in the batch belongs to a topic with
//     UnflushThreshold <= 0 (group commit), or is Flush/CreatePartition/
//     DeletePartition: fdatasync once, then acknowledge every request of the
//     batch. Concurrent appends therefore share one fsync. The group
//     commits of append batches are pipelined: a syncer goroutine runs one
//     commit's fdatasync while the writer goes on writing the batches that
//     arrive meanwhile, and the next commit (covering all of them, with
//     the partition ends taken as each batch joins it) is started by the
//     syncer itself as soon as that fdatasync returns. At most one runs;
//     every other request (create, delete, fence, flush, checkpoint,
//     segment roll) first waits for it. If it fails, nothing more is
//     synced: the rollback below cuts what was written after it too, and
//     those appends fail as well. AppendAsync queues an append without
//     waiting, so one caller (a broker connection) can have several in the
//     same or consecutive commits, in order; its notify function hears the
//     outcome on the writer goroutine, without a goroutine of the caller's
//     having to wake first.
//   - otherwise (UnflushThreshold = N > 0): acknowledge at once; fdatasync
//     when some topic has N or more unflushed appends, or when its
//     UnflushInterval (measured with Options.Clock) has passed since its
//     first unflushed append, whichever comes first.
//
// A segment is fdatasynced before the next one is created; the directory is
// fsynced after a segment is created, renamed or removed. Every small
// metadata file (checkpoint, .idx) is written as temp file, fsync, rename,
// directory fsync.
//
// # Durable offsets and visibility
//
// The log's durable end is the position up to which fdatasync has returned.
// A partition's Durable offset is the end of its last chunk below that
// position. Rules:
//
//   - ReadLog returns only entries that end at or below the durable end, and
//     WaitDurable blocks until it moves. The replicator therefore never ships
//     a record the master could lose in a crash.
//   - As in MetaQ (spec §2.3), a partition's readable end (PartitionInfo.Max,
//     answered by `offset`, and the bound of Read) is the durable end: a Read
//     cannot START at or beyond it. A Read that starts below it returns bytes
//     up to the written end (PartitionInfo.Written), which with
//     UnflushThreshold > 0 may include records written but not yet fsynced,
//     exactly as a MetaQ `get` run is cut at the end of the segment file.
//     With group commit every acknowledged record is durable, so Max is the
//     end of the last acknowledged record at once.
//
// # Offsets (spec §1.7)
//
// NearestOffset follows MetaQ: each partition keeps the boundaries of the
// segment files MetaQ would have had. A boundary is added after a chunk when
// the partition's bytes since the previous boundary reach SegmentBytes
// (MetaQ's mayBeRoll). An offset inside the partition answers the start of
// its virtual segment (0 while there is only one); >= Max answers Max; below
// Min answers Min. A Read run may cross a virtual segment boundary (MetaQ's
// stops at the end of its file); clients take whole records from any run,
// so this only makes runs longer.
//
// # Recovery
//
// Open loads the checkpoint (position P), loads the .idx of every segment
// before P (a missing, short or stale .idx makes that segment be scanned
// instead) and scans the log from P to its end, checking every entry's magic,
// length and crc32c. At the first entry that fails at position X:
//
//   - torn tail: no valid entry exists anywhere after X. The segment is
//     truncated at X (later empty segments are removed). This is the
//     ordinary result of a crash during a write.
//   - corruption: a valid entry exists after X (at Y, found by searching
//     for the magic and checking the crc). The bytes [X, Y) are copied to
//     <segment>.log.<X>.bad, logged with path and offset, and remembered as a
//     quarantined range (kept in the checkpoint): ReadLog skips it and it
//     is never served. A partition whose chunk was lost there is fenced:
//     its later chunks no longer start at its end, so they are dropped from
//     its index and never served; the partition continues from the end of
//     its last trusted chunk. Partitions not touched by the damage are
//     unaffected.
//
// Every sealed segment the scan went through gets a fresh .idx, so a
// summary written before damage was found is never trusted again.
//
// Damage below the checkpoint (bit rot after a clean start-up) is not seen
// by recovery, so Read checks the crc of every chunk it serves (crc32c is
// hardware-assisted; the cost is in BENCH.md). A chunk that fails is never
// served: the partition is fenced at it at once (the writer cuts the
// partition's index back to the chunk start, appends continue there, and a
// define entry with the new end goes into the log), the error is logged with
// the log position, and the checkpoint is deleted so that the next start-up
// scans the whole log, quarantines the damage and, replaying that define
// entry, reaches the same partitions. ReadLog checks every entry too: it
// skips a damaged one (resyncing at the next valid entry), quarantines the
// range in memory, fences the partition that owned the chunk there, and goes
// on with the other partitions' entries.
// Offsets after a fence are reused, as after a torn-tail truncation; a
// replica that already holds them sees ErrOffsetMismatch from AppendRaw.
//
// After the scan the last segment is fdatasynced once (what survived a
// process crash sits in the page cache) and everything on disk is durable.
// Open then appends a define entry for every live partition to the active
// segment, because a crash during a roll can leave a new segment without
// its leading defines.
// A clean Close flushes, writes the .idx of the active segment and a final
// checkpoint at the log end, so the next Open scans nothing.
//
// # Retention
//
// Log segments are shared by topics, so retention works in two steps.
//
//  1. Retain(topic, now) trims each partition of the topic logically: Min
//     moves up to the first chunk appended at or after now-MaxAge
//     (OffsetForTime), the index entries below are freed, and a read below
//     Min gets a *RangeError carrying the new Min (the broker answers 301).
//     The age test is per chunk, not per MetaQ segment, and a partition
//     whose data all expired becomes empty at its end (Min = Max) instead of
//     keeping its last segment as MetaQ does: in a shared log, keeping one
//     slow partition's old last segment would pin every log segment its
//     chunks are spread over. MaxAge 0 keeps a topic's data forever.
//  2. Then the oldest sealed log segments that hold no live chunk of any
//     partition (every chunk in them is below its partition's Min, or of a
//     deleted partition) are removed, or renamed to <segment>.arc, or zipped
//     into <segment>.zip (one entry named after the file, as MetaQ's
//     ArchiveDeletePolicy) when a topic with data in them asks for
//     archiving. Segments go only from the front, so the log stays
//     contiguous, and the active segment is never removed. A topic that
//     keeps data forever therefore keeps the segments its data sits in.
//
// A checkpoint is written before files go, so Min survives a restart. If the
// checkpoint is lost, trimmed chunks still present in kept segments become
// readable again (valid and contiguous) until the next Retain.
//
// # Disk errors
//
// All file access goes through FS. When a write or fsync fails (ENOSPC, EIO)
// the writer truncates the partial batch away, fails the batch's appends
// with an error wrapping ErrUnhealthy and the cause, and the store refuses
// further appends; Health reports the error. After a failed fdatasync the
// log and the indexes are also cut back to the last durable position, so
// nothing unacknowledged stays readable (the kernel may have dropped those
// pages); records acknowledged unfsynced under UnflushThreshold > 0 go too,
// as that policy allows. Data stored before is not touched and stays readable. Reopening
// the store after the cause is fixed recovers as after a crash.
//
// # Locks
//
// Lock order: Store.segMu (segment list), then Store.mu (partition table),
// then partition.mu. durMu, healthMu, polMu and closeMu are leaves. Read
// copies chunk positions under partition.mu, releases it, and only then
// reads the files under segMu; the writer goroutine takes partition.mu and
// Store.mu one at a time and segMu alone.
package store
