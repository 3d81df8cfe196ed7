// Package store is the broker's storage engine: MetaQ-compatible partitions
// (see Records in broker/wire/doc.go) kept in ONE commit log shared by every partition, with
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
//	<Dir>/log/00000000001073741900.idx   the segment's index blocks, and once sealed their list (see below)
//	<Dir>/log/<segment>.log.<pos>.bad    copy of a quarantined (corrupt) range
//	<Dir>/log/<segment>.log.arc | .zip   segment archived by retention
//	<Dir>/checkpoint                     partition table, spans, active segment's blocks (atomic)
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
//     to back, exactly as `get` sends them (see Records in broker/wire/doc.go):
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
//     written when a partition is created (and again after its first
//     records) AND again for every live partition at the start of each new
//     segment, so any suffix of the log describes its own partitions (the
//     key table survives retention and a lost checkpoint). 10,000
//     partitions cost about 0.6 MB per segment. A define is also written
//     when damage makes a hole in a partition at run time, and when a
//     replica skips records its master lost (SkipTo): a define whose end is
//     above the partition's replayed end says the offsets in between were
//     handed out and lost (a hole, see Recovery). One below it is a fence
//     (TruncatePartition, or an older version at damage): replay cuts the
//     partition back there.
//
//     A data entry whose offset is below its partition's end fills a hole
//     (Repair, or the intact records of a damaged entry).
//
//   - type 3, delete: pid was deleted (DeletePartition); its data is dead.
//
//   - type 4, unit: the entries that follow it, up to "partition offset"
//     bytes after it, are one unit (AppendUnitAsync: a transaction's
//     partitions at its commit; AppendRawUnit: such a unit as a replica
//     received it); pid 0, no payload. The writer puts it before the
//     unit's first entry (and before the define of a partition the unit
//     creates) in the same write, so whoever reads the log in order
//     (ReadLog, recovery's scan) knows where the unit ends before it
//     meets any of its entries: ReadLog never ends a read inside a unit
//     of at most 16 MiB (read from its unit entry on: UnitStart moves a
//     position inside a unit, such as LogPosition's for a partition the
//     unit holds, back to it), and recovery cuts a torn tail that falls inside
//     a unit back to the unit entry (none of the unit stays; its write
//     was never durable whole, so never acknowledged). Versions before
//     this entry type read it as a damaged 36-byte range: they
//     quarantine it (a .bad copy and an error in the log) and lose no
//     records. Checked with the metaq-server of the commit before units
//     (6b9f01d) over a data dir of 1,528 records in 300 units written by
//     this version: after a clean close (served from the index, no unit
//     entry read), after a crash (the tail beyond the last checkpoint
//     scanned: one quarantine per unit there) and without a checkpoint
//     (the whole log scanned: 300 quarantines, 300 .bad files), every
//     record is served in order; as a replication master it ships all of
//     them (two ERROR lines per unit entry, "damaged log entry skipped by
//     replication"), and this version serves the data dir afterwards
//     with nothing missing (the .bad copies stay until removed by hand).
//
// # Indexes and memory
//
// Each partition's index is the list of its chunks (offset, log position,
// length, append time) and lives on disk: every log segment has an .idx
// file of 32-byte entries
//
//	pid uint32 | length uint32 | partition offset int64 | log position int64 | append time int64 (ms)
//
// after a 32-byte header (magic "MQIX", format 3, the segment's start).
// Entries are written in blocks: a block holds up to 1,024 consecutive
// chunks of ONE partition (32 KiB). A partition collects its newest chunks
// in memory (its tail, at most one block, always in the active segment);
// when the tail is full it is appended to the active segment's .idx as a
// block, and at a segment roll and at every checkpoint all tails are
// written out (a block may then be short; at a roll by the sealing
// goroutine, see below). With many busy partitions the
// tails are bounded by a budget (512 Ki entries, 16 MiB, in all): past it
// the longer tails are written out early as short blocks, each tail keeping
// its (emptied) array for its next entries; a roll or a checkpoint lets
// the arrays go, so a partition that went idle holds none.
//
// When a segment is sealed (at a roll, or when recovery has re-indexed
// it) its .idx gets a footer written once: one 32-byte record per block in
// the segment (pid, entry number, count, crc32c of the block's bytes,
// first offset, first append time), sorted by partition and offset, and a
// 32-byte trailer (magic "MQIF", format, entry count, block count, the
// segment's start, crc32c of the footer); then the file is fdatasynced
// and never written again (footer.go). The footer is the segment's
// summary: a lookup in a sealed segment reads it (one pread of 32 bytes
// per block in the segment) when it is not cached, checks it (trailer,
// crc, structure, and the crc the checkpoint recorded for it), and keeps
// it in a cache of at most 64 Ki footer blocks (2 MiB) over all segments,
// the least recently used going first.
//
// A roll's sealing runs on a goroutine of its own, so the writer goes on
// with the next appends meanwhile: at the roll the writer only turns each
// partition's tail into a block of the sealed segment held in memory (its
// place in the .idx assigned, its entries read from memory until they are
// written); the sealing goroutine writes those blocks, then the footer,
// turns each partition's blocks in the segment into its span, and writes
// the roll's checkpoint (after the previous roll's). The writer waits for
// the sealing before the next roll, and for the sealing and its
// checkpoint before any request that is not an append (a fence or a hole
// may cut a block, a checkpoint vouches only for sealed segments) and at
// Close. A sealing that fails (the disk full) leaves the segment's blocks
// in memory, where reads find them, and drops the checkpoint; it is done
// again when the disk has room (the first write that succeeds after the
// store refused appends for a full disk, an append or ProbeSpace), and
// the next roll seals that segment before it goes ahead, the active
// segment growing until that succeeds, so the blocks of a segment not
// sealed are always a partition's last ones before the active segment's
// (no span comes after them). A read that finds no chunk at its offset in
// the block the index points it to treats the block as damaged (see
// repairBlock): it ends with what it has, never takes a chunk again.
//
// In memory each partition keeps one reference per block of the ACTIVE
// segment (48 bytes: first offset and time, where it is, its crc, the
// entries of a block being sealed) and one
// span per SEALED segment it has chunks in (the segment, the offset and
// append time of its first chunk there; its chunks there run to the next
// span, or to the active segment's blocks, the tail or its end). Nothing
// is kept per block of a sealed segment. The spans are held compactly
// (spanlist.go): all three fields ascend along a partition's list, so each
// span is three varint deltas from the one before (the segment named by
// the store's number for it, not a pointer: usually 1 byte; offset and
// time 2-3 bytes each for a busy partition), with every 32nd span whole
// (24 bytes) as a restart point for the binary searches; lookups decode at
// most 31 spans after a search of the restart points. That is about 7-9
// bytes per span, slack included, against 24-48 for a slice of structs.
// Retention drops spans from the front a group of 32 at a time: up to 31
// dropped ones stay in a partition's list, skipped.
//
// The memory rule. What grows:
//
//   - with partitions: each partition's fixed part (its key, bounds,
//     counters; a few hundred bytes), its tail (at most one block of 32-byte
//     entries, all tails together at most 16 MiB) and its blocks in the
//     active segment (one 48-byte reference per 1,024 chunks of a segment
//     of at most SegmentBytes);
//   - with partitions x segments: one span per partition and sealed
//     segment it has chunks in, about 7-9 bytes (a partition idle for a
//     segment costs nothing there), and its virtual segments (8 bytes per
//     SegmentBytes of its data);
//   - with segments: the segment itself (two file descriptors, a few
//     hundred bytes);
//   - with connections: nothing in the store (readers' buffers are the
//     size of their reads);
//   - bounded: the summary cache (at most 2 MiB of footer blocks).
//
// Nothing is kept per retained record, and nothing per block of a sealed
// segment beyond the cache. So with a few partitions memory is independent
// of the retained data (BenchmarkBacklog, BENCH.md); with P busy partitions
// it grows by about 8-9 x P bytes per sealed segment: 10,000 partitions
// cost about 86 KB per 1 GiB segment, 0.011 bytes per retained 100-byte
// message (measured: 6.4 bytes per span after a partition's first; the
// heap slope of that run, 0.018-0.036 B, also counts the active segment's
// block references, which differ between its two measuring points;
// 0.049-0.053 with 24-byte spans in slices; BENCH.md). That still grows
// with partitions x segments: a week of 1 GiB segments (about 770) with
// 10,000 busy partitions is about 65 MB of spans.
//
// Lookups: Read, OffsetForTime and Backlog search the spans and block
// references in memory (by first offset, or first time: append times never
// decrease along the log, the writer keeps them monotonic); in a sealed
// segment they then search its summary, and read ONE block (one pread of
// at most 32 KiB, its crc checked) to find the exact chunk; a get that
// spans several blocks reads them in order. Reads then pread the log;
// chunks close together in the log (up to 4 KiB of other partitions'
// entries between them) are read with one pread of at most 4 MiB.
//
// Read-ahead of old data. A consumer catching up reads a partition in
// order with large gets (MetaQ's default fetch is 1 MiB), one at a time:
// it would leave the disk idle while it checks and copies a get, and the
// kernel's read-ahead does not fill the gap (it is per open file, shared
// by every reader of a segment, and in a .idx it would read mostly other
// partitions' blocks, which lie between the reader's own). So a Read of
// at least 64 KiB in a sealed segment asks the kernel (posix_fadvise
// WILLNEED, which starts the reads and returns) for what the next reads
// of that size will need: the log range of the next two, and the
// partition's own index blocks, exactly those (from the summary), for the
// next eight, as the index is 32 bytes per chunk and asked for at the
// log's horizon it would queue behind the log's reads. Each partition
// remembers how far it asked, so each range is asked for once. The .idx
// files are opened with read-ahead off (posix_fadvise RANDOM). ReadLog
// asks for its next window the same way. On this machine that tripled
// the cold read of BenchmarkBacklog (BENCH.md). Reads of the active
// segment, recent and in the page cache, ask for nothing.
//
// No file descriptor is held per partition (10,000 partitions would not fit in
// `ulimit -n` with MetaQ's layout): the store holds two per log segment,
// the .log and the .idx.
//
// ReadLog (the replication shipper) reads the log itself in order and needs
// no index lookup: a chunk is live when it lies in [Min, end) of its
// partition, not in one of its holes, and no fence made it dead (a fence,
// written by older versions at damage, kept per partition and in the
// checkpoint, records that chunks logged before position P at offsets from
// O on were cut off; later chunks reuse those offsets).
//
// Each partition also keeps its virtual segment boundaries (see
// NearestOffset, 8 bytes per SegmentBytes of its data) and the number of
// records it holds, from which Backlog estimates a reader's lag in
// messages (bytes over the mean record size).
//
// The checkpoint (format 4) holds the partition table, each partition's
// Min, end, virtual segments, fences, record count, spans (delta-encoded
// as in memory, without restart points: 6.3 bytes each measured with
// 10,000 partitions, about 7 at 10,000 messages/s; 20 bytes each in
// format 3, which is still read, the next checkpoint being format 4) and
// blocks of the active segment (36 bytes each); per segment its start,
// the number of .idx entries it vouches for and, once sealed, its footer's
// block count and crc; the quarantined ranges and the log position P up
// to which all of that is complete. Before it is written the tails go to
// the active .idx and that file is fdatasynced; a sealed segment's .idx is
// fdatasynced with its footer, or, at a roll, with the roll's checkpoint
// before that is written. So a checkpoint never refers to index bytes
// that are not on disk. It is written after each segment roll, before
// retention removes files, and by Close. A roll's checkpoint is built by
// the writer (a snapshot at P, taken right after the roll's fdatasync, the
// sealed segment's blocks recorded as its spans) and written by the
// sealing goroutine once the segment's footer is written, so the writer
// goes on with the next appends meanwhile. Retention's is built by the
// writer the same way (after the batch's fdatasync and any sealing) and
// written by a goroutine of its own, which answers retention's request
// once it is on disk; Close's is written by Close. A checkpoint being
// written waits for one being written before it, an older one never
// replaces a newer, and until it is on disk the previous checkpoint
// stands. Its size grows like memory: with partitions (and the active
// segment's blocks) and with partitions x segments (a few bytes per
// span), not with the retained chunks: 69-98 KB
// for BenchmarkBacklog's 4 partitions (nearly all of it the active
// segment's blocks) whatever its size, against 36 bytes per block of every
// segment in format 2 (1.2 MB at 39 million chunks, 5.5 MB at 154
// million). With 10,000 busy partitions and a week of 1 GiB segments at
// 10,000 messages/s (about 770 segments) the spans make it about 55 MB
// per roll (150 MB in format 3), read whole at start-up: still growing
// with partitions x segments. Past that the spans themselves would have
// to live on disk (found through the footers rather than listed in
// memory and in the checkpoint), which this format does not do. Index
// data is never fsynced on the append path: it is rebuilt from the log
// after a crash.
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
//     every other request (create, delete, hole, repair, flush, checkpoint,
//     segment roll) first waits for it. If it fails, nothing more is
//     synced: the rollback below cuts what was written after it too, and
//     those appends fail as well. For measuring, METAQ_STORE_CYCLE_STATS
//     (an interval) makes the store log where the cycle's time goes
//     (cyclestats.go); unset, it reads no clock. AppendAsync queues an append without
//     waiting, so one caller (a broker connection) can have several in the
//     same or consecutive commits, in order; its notify function hears the
//     outcome on the writer goroutine, without a goroutine of the caller's
//     having to wake first. AppendManyAsync queues the appends of several
//     partitions as one request (one encode buffer, one queue hand-off, one
//     notify; the writer takes its parts in order into the same batch), so
//     a caller whose messages spread over thousands of partitions pays the
//     hand-off once per call, not once per partition; it also looks up the
//     partitions in the caller's goroutine (by topic, then by number in a
//     slice, topicParts), and the writer uses them unless a partition left
//     the table meanwhile (partsGen). With one message per partition per
//     call (a topic of 10,000), the work per partition is the cost to cut:
//     the writer notes each partition it wrote with its new end in a list
//     (dirtySet, no map), which a commit takes whole without locking the
//     partitions again, and index blocks are encoded into one reused
//     buffer and written a MiB at a time. AppendUnitAsync is
//     AppendManyAsync for appends that are one unit (a transaction's
//     partitions at its commit): the writer puts a unit entry (type 4)
//     before them in the same write, and ReadLog never ends a read inside
//     a unit, so the replication shipper, which cuts its frames where
//     ReadLog stops, ships a unit in one frame, after a restart as
//     before it (the bounds are in the log). AppendRawUnit writes a unit
//     a replica received the same way, so a replica keeps its master's
//     units for replicas of its own.
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
//   - As in MetaQ (see Visibility in broker/wire/doc.go), a partition's readable end (PartitionInfo.Max,
//     answered by `offset`, and the bound of Read) is the durable end: a Read
//     cannot START at or beyond it. A Read that starts below it returns bytes
//     up to the written end (PartitionInfo.Written), which with
//     UnflushThreshold > 0 may include records written but not yet fsynced,
//     exactly as a MetaQ `get` run is cut at the end of the segment file.
//     With group commit every acknowledged record is durable, so Max is the
//     end of the last acknowledged record at once.
//
// # Offsets
//
// NearestOffset follows MetaQ (see offset in broker/wire/doc.go): each partition keeps the boundaries of the
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
// Open loads the checkpoint (position P) and with it the partition table,
// spans and the active segment's block references: it reads neither a
// sealed segment nor its index (it only compares each sealed .idx's size,
// known from opening it, with the size the checkpoint recorded), so a
// start-up after a clean Close (P = the log end) takes the same time
// whatever the retained size (milliseconds for tens of GB, BENCH.md). A
// sealed segment whose .idx is missing, has a bad header or another size
// than its entries and footer (torn, cut, grown) has that .idx rebuilt
// from its own log alone (entries and footer), for the chunks the
// partitions' spans say are there; nothing else is scanned. A footer that
// fails its checks when first read (trailer, crc, structure, or a crc
// other than the checkpoint's: never trusted), and a block whose bytes
// were damaged later (its crc, or its structure: one partition,
// contiguous offsets), make the reader rebuild the segment's .idx from the
// log on the spot and retry (in the active segment, which the writer is
// appending to, the checkpoint is removed instead and the next start-up
// re-indexes). The .idx of a segment the checkpoint saw active must hold
// at least the entries it vouches for; what lies beyond them (written
// after P, a footer included) is cut away. Then the log is scanned from P
// to its end, checking every entry's magic, length and crc32c, and
// re-indexing it (tails, blocks into the scanned segment's .idx) exactly
// as the writer does; each segment the scan leaves behind is sealed (its
// footer written) as at a roll. A crash while a segment was being sealed
// is therefore harmless: the last checkpoint still saw it active.
//
// A full disk does not stop recovery (seed 941024 of the soak: a site
// restarted on a full disk exited). When a .idx cannot be written for
// lack of space (ENOSPC, EDQUOT; a header, a block or a footer), the rest
// of the index recovery rebuilds is held in memory: each segment the scan
// leaves behind keeps its blocks in memory (blockRef.mem, as a roll's
// sealing does until it writes them), the active segment's chunks stay in
// the tails, and the segments not sealed become one failed sealing, done
// again in log order when the disk has room (below) or at the next roll.
// Reads are served from memory meanwhile. The checkpoint goes (the next
// start-up re-indexes the log, so a crash before the index is written
// loses nothing), the store refuses appends as on any full disk (Health,
// ErrNoSpace), and IndexPending reports the segments and entries held. The
// other writes recovery makes after the scan do not stop it either: the
// intact records of damaged entries it cannot write back stay in the log
// (the next start-up salvages them again), and the active segment's
// leading defines, when they do not fit, are written first by the
// writer's next write (as after a roll that could not write them). Any
// other error, and any failed fdatasync, still fails Open.
//
// The crash bound: the checkpoint is written at each segment roll, so
// after a crash recovery reads at most the active segment and, when the
// crash came before the roll's checkpoint was on disk, the one it sealed
// (SegmentBytes each, 1 GiB by default, plus one batch of at most
// MaxBatchBytes): a few seconds at the disk's sequential read rate,
// whatever the retained size.
//
// A data directory of format 2 (every block of every segment in the
// checkpoint, .idx files without footers) is upgraded in place from its
// checkpoint without reading the log: the segments it saw sealed get a
// footer listing the blocks it held for them, every .idx it knows the
// format-3 header, and the next checkpoint is written in format 3 (a crash
// meanwhile leaves the format-2 checkpoint, and the next start-up upgrades
// again). A missing or unusable checkpoint, a checkpoint that does not
// match the files (a format-2 one included), or a data directory of
// format 1 (whole-segment .idx summaries and a checkpoint without block
// directory) makes Open re-index the whole log once, rewriting every .idx
// (sealed ones with their footers) and then the checkpoint in format 3: an
// old directory is upgraded in place (a one-off scan of the whole log). A
// checkpoint of a later format is refused with an error naming the file
// and the format, and nothing is changed.
//
// At the first entry that fails the checks at position X:
//
//   - torn tail: no valid entry exists anywhere after X. The segment is
//     truncated at X (later empty segments are removed). This is the
//     ordinary result of a crash during a write.
//
//   - corruption: a valid entry exists after X (at Y, found by searching
//     for the magic and checking the crc). The bytes [X, Y) are copied to
//     <segment>.log.<X>.bad, logged with path and offset, and remembered as a
//     quarantined range (kept in the checkpoint): ReadLog skips it and it
//     is never served. Only the records in it are lost: a partition whose
//     chunk was there gets a hole, an index entry with pos = holePos over
//     the lost offsets (so the index stays contiguous), and its later
//     chunks stay readable at their offsets (Read inside a hole answers
//     *DamagedError with the next readable offset; the broker answers 301
//     there). Offsets are never handed out twice: the hole ends where the
//     partition's next chunk, or its next define entry, says it went on.
//     When nothing later names the partition (damage in the active
//     segment), the damaged entry's own header gives the end if it still
//     parses and spans exactly [X, Y); otherwise every partition's end is
//     moved up by the range's payload size, a hole that may hold nothing.
//     Partitions not touched by the damage are unaffected.
//
//     One entry may hold many records (a connection's pipelined puts, up
//     to 256). When the entry's header is intact, the records that still
//     pass their own checksum (see Records in broker/wire/doc.go) before and after the ones that
//     fail are written back into the hole as Repair does (salvage.go), so
//     only the damaged records are lost. When no record fails (the damage
//     is in a header, an id or a flag, which no record checksum covers)
//     the whole entry stays lost. An empty record next to the ones that
//     fail is lost with them: its checksum is that of an empty body (0),
//     which proves nothing, and zeroed bytes read as such a record.
//
//     A partition whose creating define was in the damage keeps its data:
//     the scan holds chunks of a pid it does not know (and that was not
//     deleted) until a later define names it (a new partition writes its
//     define again after its first records, and each segment starts with
//     them), then places them.
//
// Damage below the checkpoint (bit rot after a clean start-up) is not seen
// by recovery, so Read checks the crc of every chunk it serves (crc32c is
// hardware-assisted; the cost is in BENCH.md), and the scrub checks the
// sealed segments in the background (see Zero-copy gets below). A chunk that fails is never
// served: its range is quarantined, its offsets become a hole at once (the
// chunk's index entry stays; the partition's list of holes masks it), its
// intact records are written back as in recovery, the writer appends a
// define entry with the partition's end, and the error is logged with the
// log position. ReadLog checks every entry too and does the same for the
// chunk it finds damaged, then goes on with the other entries. Before the
// first chunk after lost records ReadLog returns a hole marker (a LogEntry
// without records at that chunk's offset): a replica that lacks them
// continues at the master's offsets (SkipTo), one that holds them keeps
// them.
//
// # Zero-copy gets, integrity and the scrub
//
// A get's bytes need no change on their way out: they are the payloads of
// the partition's chunks as they sit in the log. ReadRun answers with
// their places (sections of segment files, a LogRun) instead of the bytes,
// and the broker sends them with sendfile(2) from the page cache to the
// socket, after the answer's header (LogRun.Head, sent with MSG_MORE so
// that it leaves in the same packet as the first chunk, not as a packet
// of its own); the bytes never enter the process.
// Each chunk is one section (the 36-byte entry headers between chunks
// are not sent). A run of three sections or more is spliced (splice(2))
// section by section into a pipe and from the pipe to the socket once
// per pipeful (1 MiB pipes, at most 16 and one per 128 descriptors of the
// open-file limit: a send that finds none free, and a run of one or two
// sections, uses sendfile), so the
// socket sees one send per answer instead of one per chunk; the pipe
// holds references to the page cache's pages, not copies. Otherwise one
// sendfile call per chunk: measured on this
// machine (BenchmarkGetPath, BENCH.md) sendfile costs the sending thread
// less CPU than the copy path (pread, crc32c, copy, write) from a mean
// chunk of about 4 KiB up (0.69 against 0.85 ns per byte at 4 KiB, 0.16
// against 0.49-0.58 at 32 KiB, 0.07 against 0.54 at 256 KiB) and more
// below it (1.23 against 0.77 at 2 KiB, 2.3 against 1.0 at 1 KiB), while
// splicing through a pipe beats the copy path down to 1 KiB chunks. So
// ReadRun declines (the broker then copies) when the mean chunk of the
// answer is below 4 KiB (sendfileMinChunk) unless it is at least 1 KiB
// (spliceMinChunk) and the run would be spliced (three sections or more,
// a pipe free), and for connections whose bytes must pass through the
// process (TLS). Consumers at the tail under a steady put rate read such
// chunks (a partition's share of each commit): copying them cost about
// twice the broker CPU per delivery (BENCH.md).
// Several answers ready at once on a connection (a consumer's gets of
// several partitions, sent together) go out as one stream (SendBatch):
// the headers and small answers written into one pipe, the runs' sections
// spliced into it, and the pipe into the socket once per pipeful, so the
// socket sees one send per batch instead of a header and a send per
// answer.
//
// The rule for integrity: a get sends unread only bytes a crc check has
// covered in this process. Those are
//
//   - everything at or after the position recovery scanned from
//     (checkedFrom): the scan checked every entry there, and what this
//     process appended was checksummed from records checked on arrival
//     (a put's checksum, AppendRaw's VerifyRecords);
//   - segments the scrub has checked since start-up (segment.checked).
//
// Anything else (the log below the checkpoint after a clean start-up,
// until the scrub reaches it) goes through the copy path, which checks
// every chunk on the way (Read). Checking a range on the way costs the
// whole copy path, not just the crc (the bytes must be read into memory
// to check them): 0.5-0.85 ns per byte against 0.07-0.16 for sendfile,
// so once checked, cold data too is sent unread and the scrub, not every
// reader, checks it again. A damaged chunk the scrub finds takes the path
// of damage met by a read (quarantine, hole, intact records written back,
// the hole listed by Damaged and repaired from a replica by the bundle's
// repair component); bit rot that comes after a segment's check is found
// by the next pass (Options.ScrubInterval, 6 hours by default).
//
// The scrub (scrub.go) starts Options.ScrubDelay (30 s) after Open, reads
// every sealed segment and the part of the active one below checkedFrom
// at most Options.ScrubRate bytes per second (16 MiB/s by default: a
// 1 GiB segment a minute), checking each entry's magic, length and crc as
// recovery does, and then marks the segment checked. Scrub reports its
// passes, the bytes checked, the damage found and the bytes still
// unchecked (the bundle puts them in its status and /metrics).
// The scrub leaves the page cache as it found it: before reading a range
// it asks the kernel (cachestat, Linux 6.5 and later) which 64 KiB pieces
// of it, and of the 16 MiB after it that the kernel's read-ahead may
// bring in, have no page cached, and once its reads have moved past such
// a piece it drops it (posix_fadvise DONTNEED). Pieces that were cached,
// even in part, stay. So a pass over cold segments does not push the
// data consumers are reading out of the cache. Where the kernel cannot
// tell what is cached, the scrub reads without the advice.
//
// A file under a sendfile is never truncated or reused: a LogRun holds
// only bytes at or below the durable end, and the log is truncated only
// above it (a failed write's partial batch, the rollback to the durable
// end after a failed fdatasync); segment files are created once at new
// positions and never rewritten; a segment retention removes while a run
// is being sent keeps its descriptor open (pinned, segment.pin) until the
// run is released, and the removed file's bytes stay readable through it.
// Quarantine does not change the log (it copies the range to a .bad file
// and masks it): a run built before damage was found was checked when it
// was built, as a Read that finished just before. If the process dies
// during a sendfile, the client has a correct prefix of the answer and
// then the end of the connection (a short value frame, which MetaQ
// clients reject), never other bytes.
//
// Consumers at the tail: the active segment is written with write(2)
// and never dropped from the page cache (the store asks for no
// FADV_DONTNEED), so gets of recent data by any number of groups are
// served from the same cached pages, with no disk read and no cache in
// the broker; only data older than what the page cache holds is read from
// disk, once per reader, with the read-ahead described above.
//
// Repair(topic, partition, off, records) fills a hole with the records a
// replica still holds: verified (framing, crc), fitting in the hole, and
// appended to the log as a data entry whose offset is below the
// partition's end; they are served from there (the partition's list of
// fills), in place of every index entry they cover: one fill may span
// several chunks found damaged one by one. Holes, fills and adopted chunks live in memory: while a store
// has any, it writes no checkpoint, so every start-up scans the whole log
// and finds them again (an undamaged store starts from its checkpoint).
//
// A fence (a define below the partition's end: TruncatePartition, or an
// older version at damage) cuts the partition back there on replay too (the
// chunks after it are dead, fences are kept per partition and in the
// checkpoint), and drops its damage state from there on. Cutting a
// partition's index back (a fence, the rollback after a failed fdatasync)
// is one function, cutIndexLocked.
//
// After the scan the last segment is fdatasynced once (what survived a
// process crash sits in the page cache) and everything on disk is durable.
// Open then appends a define entry for every live partition to the active
// segment, because a crash during a roll can leave a new segment without
// its leading defines.
// A clean Close flushes, writes the tails into the active .idx and a final
// checkpoint at the log end, so the next Open scans nothing.
//
// # Retention
//
// Log segments are shared by topics, so retention works in two steps.
//
//  1. Retain(topic, now) trims each partition of the topic logically: Min
//     moves up to the first chunk appended at or after now-MaxAge
//     (OffsetForTime), the spans and block references wholly below it
//     are freed, and a read below Min gets a *RangeError carrying the new Min
//     (the broker answers 301). The age test is per chunk, not per MetaQ
//     segment: MetaQ deletes a partition's segment file (maxSegmentSize,
//     1 GiB) once its LAST message is older than the limit, so it keeps up
//     to one segment of expired data per partition and frees a whole file
//     at a time; here Min moves chunk by chunk, so expired data stops being
//     served sooner (a consumer reading it gets 301 and the new Min, as
//     MetaQ's after its file went), while the disk space comes back per log
//     segment (step 2), which holds every partition's data of its period.
//     A partition whose data all expired becomes empty at its end (Min =
//     Max) instead of keeping its last segment as MetaQ does: in a shared
//     log, keeping one slow partition's old last segment would pin every
//     log segment its chunks are spread over. MaxAge 0 keeps a topic's data
//     forever.
//  2. Then the oldest sealed log segments that hold no live chunk of any
//     partition (every chunk in them is below its partition's Min, or of a
//     deleted partition) are removed, or renamed to <segment>.arc, or zipped
//     into <segment>.zip (one entry named after the file, as MetaQ's
//     ArchiveDeletePolicy) when a topic with data in them asks for
//     archiving; the segment's .idx (footer included) is removed with it
//     in every case, and its summary leaves the cache (an archived segment
//     is no longer indexed). Segments go only from the
//     front, so the log stays
//     contiguous, and the active segment is never removed. A topic that
//     keeps data forever therefore keeps the segments its data sits in.
//
// A checkpoint is written before files go, so Min survives a restart. If the
// checkpoint is lost, trimmed chunks still present in kept segments become
// readable again (valid and contiguous) until the next Retain.
//
// # Disk errors
//
// All file access goes through FS. When a write fails the writer truncates
// the partial batch away and fails the batch's appends. A full disk
// (ENOSPC, EDQUOT on write) only refuses: the error wraps ErrNoSpace, Health
// reports it, nothing written before is touched, and every later append
// tries again, so the store accepts appends by itself once there is room.
// ProbeSpace tries without an append (a 64 KiB write past the end, cut off
// again), for the broker, whose write gate refuses puts meanwhile. A roll
// that cannot create the next segment (no space, no descriptor) is not
// fatal either: the active segment grows and the roll is retried after the
// next append. Nor is a roll's sealing that cannot write the sealed
// segment's .idx for lack of space: it is done again once the disk has
// room, the next roll seals it first (see Indexes and memory), and the
// next start-up re-indexes the log (the checkpoint is dropped); IndexPending
// reports the index held in memory meanwhile. Nor is a start-up on a
// full disk (see Recovery). The store keeps four file descriptors in reserve (see
// reserveFS) and gives one back when an open fails with EMFILE/ENFILE, so
// rolls and checkpoints go on when client connections used up the rest.
//
// Any other write error, a failed write of an index block other than for
// lack of space (the chunks stay indexed in memory), and any failed
// fdatasync (ENOSPC included: the kernel may have dropped the pages) stop
// the store: appends fail with an error wrapping ErrUnhealthy and the cause
// until it is reopened. After a failed fdatasync the log and the indexes
// are also cut back to the last durable position, so nothing
// unacknowledged stays readable; records acknowledged unfsynced under
// UnflushThreshold > 0 go too, as that policy allows. Data stored before is
// not touched and stays readable. Reopening the store after the cause is
// fixed recovers as after a crash.
//
// # Locks
//
// Lock order: rebuildMu (index rebuilds), then Store.segMu (segment list),
// then Store.mu (partition table), then partition.mu, then segment.idxMu
// (guards reading a segment's .idx against its closing) and segment.logMu
// (the same for its log: the preads of Read and ReadLog hold it, not
// segMu, so a roll or retention never waits behind a pread of cold
// data; it also guards a segment's sendfile pins, which pin and unpin
// take and release with no other lock held). durMu, healthMu, polMu, closeMu, scrubState.mu,
// growWaits.mu (the channels of gets waiting for a partition to grow: Grown
// takes it after looking the partition up, the writer goroutine after a
// commit or flush raised durable ends) and the summary cache's lock are leaves. A span names its segment by number, found in a copy of the
// segment list published on every change (Store.segTab, an atomic
// pointer: no lock, so it can be looked up under partition.mu). Read copies
// block references (or a span) under partition.mu, releases it, and only
// then reads the footer, the .idx and the log (partition.mu is a plain
// mutex: its readers hold it for a few loads and copies, so sharing it
// gained nothing, while a read-write lock cost the writer two more atomic
// operations per chunk); only cutIndexLocked (rare:
// fences, rollback) reads a footer and a block while holding partition.mu,
// through idxMu and the cache's lock alone. The writer goroutine takes
// partition.mu and Store.mu one at a time and segMu alone. ckptWriter.mu
// (held while a checkpoint file is written or removed) comes after
// partition.mu (dropCheckpoint is called under it) and before
// segment.idxMu: the goroutine that seals a segment at a roll and writes
// the roll's checkpoint takes Store.mu (to list the partitions), each
// partition.mu and the sealed segment's idxMu one at a time, then
// ckptWriter.mu and under it the idxMu of each .idx it fdatasyncs.
package store
