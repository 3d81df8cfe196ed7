// Package georeplicator copies a master site's commit log to slave sites
// over WAN links: the master's Shipper streams the durable log in
// checksummed, compressed frames and each slave's Receiver stores the
// records byte-identically at the master's offsets (the semantics of Async slaves in broker/wire/doc.go,
// without MetaQ's consumer-based copy).
//
// # Roles
//
// A slave site runs the bundle with the same brokerId as its master and an
// async_slave.properties (slaveId, slaveGroup, slaveMaxDelayInMills,
// autoSyncMasterConfig). Any number of slaves may follow one master; the
// master tracks each (slaveGroup, slaveId) separately.
//
// # Connection and handshake
//
// The slave dials the master's replication address (found by a Resolver:
// masterAddress, or the master's ZooKeeper entry ids/<brokerId>/replication;
// by default the master's MetaQ port itself, where the broker hands over
// the connections that start with FirstBytes), optionally over mutual TLS,
// and sends hello:
// protocol version, brokerId, slaveId, slaveGroup, codec preference, the
// master log position it resumes from (-1 when it has none), its window in
// bytes (>= 4 MiB), an optional bandwidth cap, slaveMaxDelayInMills and
// whether it wants the master's server.ini. The master answers welcome (the
// position the stream starts at, its first and durable log positions, the
// keepalive interval) or error (different brokerId, a position beyond the
// master's durable end, unknown codec), then the config bytes if asked.
// With a shared secret (ShipperOptions.Secret, ReceiverOptions.Secret;
// [replication] secretFile) an auth step follows hello before anything else
// (auth.go): the master challenges, the slave answers with an HMAC-SHA256
// over both nonces and the hello, and the master proves the secret back. A
// peer that fails gets an error frame naming the cause and nothing else: no
// welcome, no server.ini, no log, no entry in the lag report. A slave with a
// secret refuses a master without one. After such a handshake every frame
// in both directions carries an HMAC-SHA256 trailer keyed per direction
// from the secret and the handshake, over a frame count (framemac.go): a
// frame inserted, replayed, reordered or reflected on the path fails it,
// and the link is dropped before the frame is acted on, so control
// requests and acks are only ever taken from authenticated frames. The
// format is stated in the handshake (featureFrameMAC, the master's proof
// label): an older peer is refused with an error naming it. A listener on a non-loopback address
// with neither TLS nor a secret, and a slave dialling another host that way,
// log a loud warning at start.
//
// A position the master has removed by retention, or -1, starts the stream
// at the master's first retained entry ("truncated"); partitions the slave
// does not have are created at their first shipped offset, so offsets still
// equal the master's.
//
// # Failover: log identity, generations, fencing (identity.go, fence.go, tail.go)
//
// Log positions mean something only within one site's log; partition
// offsets are the same everywhere. Each site's data directory keeps an
// Identity: its own log id, the highest master generation it has seen, on a
// promoted site each partition's end at its promotion, the history of its
// log (history.go: every generation whose records it holds, with the
// partition ends its master was promoted with, as Kafka's leader-epoch
// checkpoint keeps epoch -> start offset; a promotion appends its epoch, a
// slave takes its master's history once it follows it), and the role a
// promotion or a demotion gave the site (the bundle starts in it again). Both ends of
// the handshake carry them (optional tails of hello and welcome, which
// older peers neither send nor read). A slave whose checkpoint names a log
// also sends its partition ends and the generations of its history. It is
// resumed by those ends when its checkpoint names another log than the
// master's (it followed the master before a failover, or it is a former
// master without a checkpoint), and also when it names the master's log
// but the generations differ from the master's history: the master's log
// forked since the slave followed it (it followed another master in
// between, cut its tail there and took that master's records at the same
// offsets), so a position in it no longer means what it did. The two logs share
// every generation up to the newest both hold, and each partition forks at
// the lowest end a later epoch of either history recorded (forkEnds). A
// slave whose checkpoint names the master's own log is resumed the same
// way when the master's history has a generation the slave lacks that
// began below what the slave holds: the master followed another log since
// (cutting its tail there) and was promoted again, so a log position no
// longer names the same records. The master cuts the ends at its own later epochs (a slave that sends no
// generations, at its own promotion ends), starts the stream at the lowest
// log position that covers every one of them (Store.LogPosition; moved
// back to the start of the commit it falls in, Store.UnitStart, so that a
// commit the slave lacks still travels in one frame), and
// names the common generation in welcome; the slave cuts each partition
// once, at the lower of those ends and its own later epochs (the higher
// one may lie inside a record of its log), then connects again when its
// own was the lower (the master chose the start without it), and the
// receiver verifies and skips what it holds. After welcome the master sends its history (featureHistory),
// which the slave keeps as its own. A history keeps at most 16 epochs: older
// ones are merged into one that cuts no higher than they would. A site two generations behind (bj, the
// master of generation 0, rejoining hf, promoted at generation 2 from the
// log of gz, promoted at 1) is cut at gz's promotion, where its log forked,
// not at hf's. Ends beyond the fork are records the new master never had:
// the slave saves them in
// <TailDir>/<topic>-<partition>-<from>-<to>-gen<g>.records (fsynced; one
// file per run of readable records when the tail holds a range the site
// lost to disk damage, which is logged and cut with the rest), then
// cuts them with Store.TruncatePartition, so they are never served as if
// replicated (`metaq-server unreplicated` lists and re-publishes them).
//
// A master refuses a slave that knows a newer generation and steps down
// (Fence.SteppedDown; also through ObserveGeneration from ZooKeeper or
// gossip); a slave does not follow a master of an older generation than it
// knows. With Sites > 1 a master holds a lease: it is confirmed while
// itself and enough slaves for a majority acked within Lease, and fenced
// otherwise (the bundle then answers puts 503). A master starts fenced, is
// confirmed no earlier than Lease plus a keepalive after it started, and
// counts a slave only once that long has passed since the slave connected:
// by then the old master, which counts acks only from connected slaves,
// has lost its own lease, so two masters are never confirmed together.
//
// A planned switchover (switchover.go): with client writes stopped, the
// master's Handover waits until the chosen slave reports its whole durable
// log checkpointed, then sends it promote (the durable end); the slave
// checkpoints and calls OnPromote, which makes it master at the next
// generation, and the old master steps down. A slave with a diverged
// partition refuses (its log position passed the master's end, but that
// partition holds other records and lacks the master's later ones): it
// stays a slave and says why in its last error. The bundle then turns the old
// master into a receiver of the new one at run time; that receiver is a
// former master without a checkpoint, so it resumes by partition ends and
// cuts any tail beyond the promotion ends as above. A master that stepped
// down after an unplanned promotion elsewhere (it was cut off, or came
// back) does the same by itself as soon as it knows where the new master
// is: in ZooKeeper, or by gossip. With ZooKeeper off, a
// receiver's Resolver is how it follows a promoted master: the bundle's
// asks gossip for the master of the highest generation.
//
// # Optional messages (control.go)
//
// Each end states in the handshake the optional messages it handles
// (hello.Features, welcome.Features, trailing fields older peers ignore),
// so an older peer never receives a type it does not know. A master that
// offers featureControl takes control requests from a slave over the
// established link (Receiver.Control, answered with the outcome or the
// error): the bundle's `switchover` asked at a slave site is one, carried
// out by the master (ShipperOptions.OnControl) and answered just before the
// chosen slave is told to take over (HandoverThen). A request over a link
// that neither the shared secret nor a client certificate authenticates is
// refused unless ShipperOptions.AllowUnauthenticatedControl; a request to a
// master that offers none fails with ErrControlUnsupported. A slave that
// states featureLagReport gets, with each keepalive, its own lag as the
// master computes it (totals, and the partitions behind with bytes,
// messages and the age of the oldest missing record, at most 256 of
// them); Receiver.LastLagReport keeps the last one, which is what a
// promoted site reports it was behind.
//
// The master tells a TLS slave from a plain-text one by the first byte
// (a ClientHello's 0x16, or frameMagic): with TLS configured a plain-text
// hello is answered with an error frame saying so; without it a TLS
// client is dropped and logged.
//
// # Frames
//
// Every message is a frame (see frame.go): a 32-byte header with magic,
// type, codec, epoch, sequence, raw and wire lengths, CRC32C of the wire
// payload and CRC32C of the header itself. A data frame's payload is a
// batch: start and end master log positions and the log entries between
// them (topic, partition, offset, append time, whole MetaQ records),
// compressed as a unit with zstd (SpeedFastest, one goroutine, 1 MiB window,
// pooled encoders), s2, or not at all. A frame holds what one or a few
// ReadLog calls return, and ReadLog never stops inside a unit of the
// master's log (a transaction's commit, store.Store.AppendUnitAsync), so a
// commit's partitions travel in one frame and a slave applies all of them
// or none (a frame is applied whole before the next is read): a master
// killed mid-stream leaves no slave holding part of a commit (a slave
// killed while it applies a frame may, until it resumes from its
// checkpoint). The unit's bounds are in the master's log (a unit entry,
// see broker/store), so this holds after the master restarted too. A
// frame to a slave that states featureUnits lists its units after the
// entries (each one's first entry and number of entries); the slave
// stores each unit in one piece as a unit of its own log
// (store.Store.AppendRawUnit, UnitSink), so once promoted it ships the
// commits it received whole to slaves of its own (a unit whose entries
// do not simply continue the slave's partitions, bytes it already holds
// say, is applied entry by entry). Each frame names its codec, so mode
// auto can change codec per frame (rule in auto.go). A frame that would grow
// is sent uncompressed.
//
// # Flow
//
// The master streams continuously: it keeps up to the slave's window of
// unacknowledged wire bytes in flight (a WAN link's bandwidth-delay product,
// 375 KB at 50 Mbit/s and 61 ms, fits many times), and the slave acks every
// applied frame with the master log position applied, the position
// checkpointed, changed partition ends, the timestamp of the last
// keepalive (the master's RTT sample) and, last so that either side may
// predate it, the position its store has fsynced (ack.Synced). Only durable data is read
// (store.ReadLog). A frame is sent as soon as data is durable; a frame
// under 64 KiB waits at most slaveMaxDelayInMills/10 (and 20 ms) for company, so a
// record reaches the wire well within slaveMaxDelayInMills. Idle links carry
// a keepalive every Keepalive (1 s); a peer silent for 4 keepalives (at
// least 2 s) is dropped. A token bucket caps bytes per second per link. The
// master asks for BBR congestion control on its sockets (CUBIC collapses
// under WAN loss).
//
// # Synchronous topics
//
// A put to a topic with minSyncSites=N is answered by the broker only once
// N slave sites (distinct slave groups) have fsynced it: the broker's put
// route calls Shipper.AwaitDurable(N, timeout, done) when the put's group
// commit returns, which waits for the master's durable log end of that
// moment to be covered by the Synced position of slaves of N groups
// (syncsites.go). While such a wait is open, the builders send what they
// have at once instead of lingering, and mark the frames up to the awaited
// position flagSyncNow (a header flag byte that older slaves ignore; they
// still fsync at their next checkpoint); a slave flushes its store after
// applying a flagged frame and acks with the new Synced. An idle stream
// whose last frame went out before the wait began sends an empty flagged
// frame. Shipper.ConnectedSites counts the slave groups connected now.
// Other topics' data moves exactly as before.
//
// # Corruption, cuts and restarts
//
// A frame whose payload fails its CRC or does not decode is dropped, counted
// and never applied: the slave sends rewind with a new epoch and its applied
// position, and discards frames of older epochs until the master resends. A
// damaged header (the stream is out of step) or a cut connection ends the
// connection; the slave reconnects with exponential backoff and jitter and
// resumes from its applied position. The slave checkpoints the applied
// position only after flushing its store (temp file, fsync, rename), so
// after a crash it resumes at or before what it holds: entries it already
// has are compared byte for byte with the shipped ones and skipped, so there
// are no duplicates and no gaps. Every shipped record's checksum is
// checked before it reaches the store; a bad one is asked for again. Bytes
// that differ, or a gap the master cannot fill (retention removed data the
// slave never got), stop that partition with a DivergedError that is
// reported (ReceiverStatus.Diverged), never written around; the other
// partitions keep replicating.
//
// Records the master lost to disk damage (store.Damaged) are not a gap: the
// master ships a hole marker (an entry without records) before the first
// chunk after them. A slave that holds the lost records keeps them (the
// master can repair from it); one that does not continues at the marker's
// offset (store.SkipTo), so offsets stay the master's, and takes the
// records when the master ships its repair (store.Repair).
//
// # MetaQ's method
//
// A master that publishes no replication address (a MetaQ 1.4.6 Java
// master, or ours with [replication] enable=false) is copied by
// MetaQPuller the way MetaQ's own async slave does it (metaslave
// SubscribeHandler): a consumer of group slaveGroup that reads every
// partition of the master with get, from this slave's end of it (or from
// the master's first offset, asked with `offset ... 0`), stores the whole,
// checksum-verified records of each answer at the same offsets, backs off
// by slaveMaxDelayInMills/10 per empty fetch, and follows the master's
// topics and partition counts (MetaQMaster, over ZooKeeper in the bundle).
// A partition whose local bytes cannot continue the master's (a gap, or a
// slave ahead of its master) stops with the reason, never written around.
// Failures of either method are logged at WARN once per distinct cause,
// with the address tried and what to change; repeats go to DEBUG.
//
// # Lag
//
// The master keeps every slave's progress in memory and in a small state
// file, so lag survives master restarts. Shipper.Lag reports per slave and
// partition the bytes, messages and seconds (age of the oldest record not
// on the slave) behind, and "stuck" (behind with no progress for
// StuckAfter). Messages and seconds come from the master store's own
// partition index (LogSource.Backlog): the seconds from the append time of
// the first chunk the slave lacks (exact), the messages from the bytes and
// the partition's mean record size (exact when records are of one size).
// Shipper.StatsLines renders it for `stats
// slave`; Receiver.Status and Receiver.StatsLines give the slave's view
// (slave-status).
//
// # Wiring (cmd/metaq-server)
//
// Master (every master bundle unless [replication] enable=false):
// NewShipper(ShipperOptions{Listener: the broker's
// ListenFirstBytes(FirstBytes()...) on the MetaQ port, or a listener of its
// own on [replication] listen when that is written, BrokerID, Source: the *store.Store, Compression,
// BandwidthBytesPerSec, StuckAfter, StateFile: <dataPath>/replication.json,
// Secret and PreviousSecrets: LoadSecrets([replication] secretFile),
// ConfigBytes: the running server.ini bytes without secrets
// (config.StripSecrets)}), Start, Close on shutdown
// after the listeners and before the store; Broker.SetSiteReplicator(the
// shipper) once it runs, nil before it closes. It starts before the broker
// serves and registers, and publishes the replication address in ZooKeeper
// (see Resolver) before the master node appears.
//
// Slave: the stream when masterAddress is set or the master publishes its
// replication address, else MetaQPuller (also while the published address
// cannot be reached, ReceiverStatus.DialFailures, and the master's MetaQ
// port can: a master whose ports all refuse is down, and the stream keeps
// its log position for a promotion); the choice follows the master's
// ZooKeeper entries and is reported in the log and in slave-status. When
// those entries change (a new master published its address) the bundle
// calls Receiver.Redial, so the slave does not wait out its backoff.
// A slave with a shared secret never uses MetaQPuller: MetaQ's get proves
// nothing about the master.
// NewReceiver(ReceiverOptions{Sink: the *store.Store, Resolver,
// BrokerID, SlaveID, Group, MaxDelay, Compression, BandwidthBytesPerSec,
// CheckpointFile: <dataPath>/replication.checkpoint, TLS: ClientTLS(...),
// Secret: the first of LoadSecrets([replication] secretFile),
// AutoSyncMasterConfig, OnMasterConfig: write the file (temp, rename) and
// reload when the topic sections differ}), Start, Close before the store.
//
// Write gateway (gatewaylink.go): every bundle claims GatewayFirstByte on
// its MetaQ port (Broker.ListenFirstBytes), runs GatewayLinks.Accept (one
// register per bundle) with LoadSecrets([replication] secretFile) on each
// connection and serves the link as a MetaQ client connection
// (Broker.ServeConn), releasing it when served; a replica's
// broker.GatewayOptions.LinkDial opens the master's MetaQ port and runs
// GatewayDialAs with its current secret, compressing, naming the gateway
// "<site>/<brokerId>" (GatewayDial, anonymous, when the master predates
// named links: ErrGatewayVersion), and its Dial, for transactions' links,
// runs GatewayDial.
package georeplicator
