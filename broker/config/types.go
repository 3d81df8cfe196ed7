// Package config loads MetaQ 1.4.6 server.ini and async_slave.properties files
// (and this project's own optional sections) into typed, validated structs.
//
// It is the one place that knows MetaQ's key names and defaults (see Configuration in broker/wire/doc.go).
// It never writes an operator's file: ini.v1 does not round-trip comments.
//
// Load, Parse and ParseWithOverlay read server.ini; LoadSlave and ParseSlave
// read async_slave.properties. A file MetaQ 1.4.6 accepts loads here too.
// Where MetaQ stops at start-up (a bad number, a malformed cron or delete
// policy, a missing section or required key, an unusable topic name) the
// loaders return an ErrorList naming file, section, key, value and what was
// expected, with every problem of the file, not just the first. Where MetaQ
// stops on an unknown key, we return a Warning marked Unknown with MetaQ's
// "did you mean" hint and carry on; an unknown section gets the same.
// CheckUnknown turns those into an error for the commands that start a broker
// or publish a file. Loading never creates anything on disk.
//
// Diff tells a reload which topics changed and which keys need a restart;
// Describe prints the effective configuration for `metaq-server check`.
package config

import (
	"path/filepath"
	"regexp"
	"time"
)

// Server is a loaded and validated server.ini.
type Server struct {
	// File is the path the configuration was loaded from ("" when parsed from bytes).
	File string
	// Raw holds the file's exact bytes; `stats config` and configsync serve them unchanged.
	Raw []byte
	// Checksum is the unsigned CRC32 (IEEE) of Raw, as MetaQ writes into master_config_checksum.
	Checksum uint32

	System    System
	ZooKeeper ZooKeeper
	// Topics holds every [topic=<name>] section in file order, with [system]
	// values filled in where the section leaves a key out.
	Topics []Topic

	// Site, Gossip, NATS and Replication are this project's extensions. They are
	// optional sections; a MetaQ 1.4.6 file has none of them and gets defaults.
	Site        Site
	Gossip      Gossip
	NATS        NATS
	Replication Replication
	// Limits is the optional [limits] section: connection and memory bounds.
	Limits Limits
}

// System is the [system] section (see Configuration in broker/wire/doc.go). Durations are converted from
// MetaQ's milliseconds.
type System struct {
	BrokerID                    int           // required, 0..1023
	HostName                    string        // "" = first non-loopback address
	ServerPort                  int           // default 8123
	DashboardHTTPPort           int           // default 8120
	DataPath                    string        // default ${HOME}/meta
	DataLogPath                 string        // default = DataPath
	AppClassPath                string        // accepted for compatibility; filters are not loaded from jars
	NumPartitions               int           // required, default 1
	UnflushThreshold            int           // required, default 1000; <= 0 means group commit
	UnflushInterval             time.Duration // required, default 10s
	MaxSegmentSize              int64         // required, default 1 GiB
	MaxTransferSize             int           // required, default 1 MiB
	GetProcessThreadCount       int           // default 10*CPUs
	PutProcessThreadCount       int           // default 10*CPUs
	DeletePolicy                DeletePolicy  // default delete,168
	DeleteWhen                  Cron          // default "0 0 6,18 * * ?"
	QuartzThreadCount           int           // default 5
	MaxCheckpoints              int           // default 3
	CheckpointInterval          time.Duration // default 1h
	MaxTxTimeoutTimerCapacity   int           // default 30000
	FlushTxLogAtCommit          int           // 0, 1 (default) or 2
	MaxTxTimeoutInSeconds       int           // default 60
	AcceptPublish               bool          // default true
	AcceptSubscribe             bool          // default true
	Stat                        bool          // default false
	UpdateConsumerOffsets       bool          // default false
	LoadMessageStoresInParallel bool          // default false
}

// MoveData points the data directory at dir (the -data override of
// metaq-server): the transaction journal moves with it unless server.ini
// gave dataLogPath a directory of its own, so an override never leaves
// the journal behind in the directory it was meant to replace.
func (s *System) MoveData(dir string) {
	if dir == "" {
		return
	}
	if s.DataLogPath == "" || filepath.Clean(s.DataLogPath) == filepath.Clean(s.DataPath) {
		s.DataLogPath = dir
	}
	s.DataPath = dir
}

// AdminSocketName is the admin endpoint's unix socket in the data
// directory (System.AdminSocket).
const AdminSocketName = "admin.sock"

// AdminSocket is the path of the admin endpoint's unix socket: in the data
// directory, which belongs to one broker, so brokers on one host never
// share it and it takes no port.
func (s *System) AdminSocket() string { return filepath.Join(s.DataPath, AdminSocketName) }

// ZooKeeper is the [zookeeper] section (see Configuration in broker/wire/doc.go).
type ZooKeeper struct {
	Connect           string        // zk.zkConnect, default localhost:2181
	SessionTimeout    time.Duration // zk.zkSessionTimeoutMs, default 30s
	ConnectionTimeout time.Duration // zk.zkConnectionTimeoutMs, default 30s
	SyncTime          time.Duration // zk.zkSyncTimeMs, default 5s
	Enable            bool          // zk.zkEnable, default true
	Root              string        // zk.zkRoot, default /meta, normalised: leading '/', no trailing '/'
}

// Topic is one [topic=<name>] section with [system] values filled in (see Configuration in broker/wire/doc.go).
type Topic struct {
	// Name is the section name after "topic=". It may hold '*' and regex
	// characters: Pattern is the compiled full-match form MetaQ uses.
	Name             string
	Pattern          string // regexp source, anchored, '*' turned into '.*'
	NumPartitions    int
	UnflushThreshold int
	UnflushInterval  time.Duration
	DataPath         string
	DeletePolicy     DeletePolicy
	DeleteWhen       Cron
	AcceptPublish    bool
	AcceptSubscribe  bool
	Stat             bool
	// MinSyncSites is minSyncSites: a put is acknowledged only once its
	// record is durable here and at this many slave sites (distinct slave
	// groups of the cross-site replication). 0, the default, replicates
	// asynchronously as MetaQ does.
	MinSyncSites int
	// SyncDegrade is syncDegrade: what a put to a topic with MinSyncSites
	// gets while fewer slave sites are connected: SyncDegradeRefuse (the
	// default, a retriable refusal) or SyncDegradeAsync (stored and
	// acknowledged without waiting, with an alarm).
	SyncDegrade string
	// ForwardPuts is forwardPuts: while this site's broker is a slave, it
	// accepts puts to the topic and carries them to the master, answering
	// with the master's answer (the write gateway). ForwardUnset, the
	// default, takes [site] forwardPuts.
	ForwardPuts Forward
	// StoreAndForward is storeAndForward: a forwarded put (ForwardPuts) is
	// answered once it is durable in this site's outbox (<dataPath>/outbox)
	// and carried to the master later, instead of once the master stored
	// it. ForwardUnset, the default, takes [site] storeAndForward.
	StoreAndForward Forward
	// Filters maps consumer group to the filter class named by group.<g>=<class>.
	Filters map[string]string

	re *regexp.Regexp // compiled Pattern, set by the loader
}

// syncDegrade values.
const (
	SyncDegradeRefuse = "refuse"
	SyncDegradeAsync  = "async"
)

// DeletePolicy is deletePolicy=name,age[,compress] (see Retention in broker/wire/doc.go).
type DeletePolicy struct {
	Name     string        // "delete" or "archive"
	MaxAge   time.Duration // age after which a segment is removed
	Compress bool          // archive only: zip instead of rename to .arc
	Text     string        // the value as written
}

// Cron is a parsed Quartz cron expression (6 or 7 fields, '?' allowed).
type Cron struct {
	Text string // the expression as written
	// Next returns the first activation strictly after t. It is nil only for
	// the zero Cron.
	Next func(t time.Time) time.Time `json:"-"`
}

// Site is the optional [site] section: what differs between datacenters.
// Keys: name, dashboardAddr, adminAddr, token, overlay.
type Site struct {
	Name          string // e.g. "bj"; default "default"
	DashboardAddr string // listen address for the dashboard/JSON API; default 127.0.0.1:<dashboardHttpPort>
	AdminAddr     string // TCP listen address for the admin endpoint; default none (the endpoint is the unix socket System.AdminSocket)
	Token         string // required when DashboardAddr or AdminAddr is not loopback
	Overlay       string // path of the per-site overlay file that configsync never overwrites
	// Dashboard is true when [system] dashboardHttpPort or [site]
	// dashboardAddr is written: the bundle then serves its dashboard.
	Dashboard bool
	// ForwardPuts is forwardPuts: the default of topics' forwardPuts at
	// this site (false, MetaQ's behaviour: a slave refuses puts).
	ForwardPuts bool
	// StoreAndForward is storeAndForward: the default of topics'
	// storeAndForward at this site (false: a forwarded put waits for the
	// master's answer).
	StoreAndForward bool
	// OutboxMaxBytes is outboxMaxBytes: the bytes of puts the outbox holds
	// before it refuses more (0: outbox.DefaultMaxBytes, 256 MiB).
	OutboxMaxBytes int64
	// OutboxMaxAge is outboxMaxAgeMs: the age of the outbox's oldest put
	// past which it refuses more (0: outbox.DefaultMaxAge, one hour).
	OutboxMaxAge time.Duration
	// ForwardMaxInFlightBytes is forwardMaxInFlightBytes: the bodies of
	// forwarded puts the write gateway has awaiting the master's answers,
	// all producer connections together, past which a put waits for room
	// (at most the gateway's 2.5 s) and is then refused 503 naming the key
	// (0: broker.DefaultForwardMaxInFlightBytes, 64 MiB).
	ForwardMaxInFlightBytes int64
}

// Forward is a topic's forwardPuts setting.
type Forward int8

// Forward values.
const (
	ForwardUnset Forward = iota // the site's [site] forwardPuts
	ForwardOn
	ForwardOff
)

// Forwards reports whether a slave broker of site forwards t's puts to the
// master (see Topic.ForwardPuts).
func (t *Topic) Forwards(site Site) bool {
	switch t.ForwardPuts {
	case ForwardOn:
		return true
	case ForwardOff:
		return false
	}
	return site.ForwardPuts
}

// StoresAndForwards reports whether a slave broker of site answers t's
// forwarded puts once they are in its outbox (see Topic.StoreAndForward):
// only for a topic it forwards.
func (t *Topic) StoresAndForwards(site Site) bool {
	if !t.Forwards(site) {
		return false
	}
	switch t.StoreAndForward {
	case ForwardOn:
		return true
	case ForwardOff:
		return false
	}
	return site.StoreAndForward
}

// Gossip is the optional [gossip] section for topology's memberlist pool.
// Keys: bind, advertise, join (comma list), key (base64, 16/24/32 bytes), label,
// probeIntervalMs, enable.
type Gossip struct {
	Enable        bool
	Bind          string // default 127.0.0.1:<serverPort+3>
	Advertise     string
	Join          []string
	Key           []byte
	Label         string
	ProbeInterval time.Duration
}

// NATS is the optional [nats] section used by configsync and control messages.
// Keys: url ("" = embedded server), embeddedListen, credsFile, tlsCert, tlsKey,
// tlsCA, bucket, subject, trustedKeys, allowUnsigned.
type NATS struct {
	// Enabled is true when the section is written: the bundle then runs
	// the configsync agent.
	Enabled        bool
	URL            string
	EmbeddedListen string // default 127.0.0.1:<serverPort+4>
	// EmbeddedListenSet is true when embeddedListen is written: with no
	// url, a slave then runs the embedded server too (a master always does).
	EmbeddedListenSet bool
	CredsFile         string
	TLSCert           string
	TLSKey            string
	TLSCA             string
	Bucket            string // JetStream KV bucket, default "metaq_config"
	Subject           string // subject prefix, default "metaq.config"
	// Agent is the name this bundle's configsync agent reports and answers
	// pushes as; default the [site] name. A site with more than one broker
	// gives each bundle its own (bj-1, bj-2) in its overlay.
	Agent string
	// TrustedKeys lists the public keys ("ed25519:<base64>", comma
	// separated, as `configsync keygen` prints them) whose signature a
	// pushed server.ini must carry to be applied on this site.
	TrustedKeys string
	// AllowUnsigned makes the agent apply unsigned pushes too: anyone who
	// can write to the bucket can then change the site. Off by default.
	AllowUnsigned bool
}

// Replication is the optional [replication] section on the master side:
// listen address and codec. Keys: listen, compression (zstd|s2|none|auto),
// bandwidthBytesPerSec, stuckAfterMs, tlsCert, tlsKey, tlsCA, secretFile.
type Replication struct {
	// Enable runs the master side on a master bundle; default true, so a
	// MetaQ server.ini without this section ships to slave sites too.
	Enable bool
	// Listen (listen) gives replication a listener of its own. Default
	// empty: the MetaQ port itself, which tells slaves from MetaQ clients by
	// their first byte, so replication needs no port MetaQ did not use.
	Listen string
	// Advertise (advertise) is the address other sites dial to reach the
	// replication listener, published in ZooKeeper and gossip: set it when
	// they reach this host through a relay or a NAT. Default: the listen
	// address (an unspecified host becomes hostName).
	Advertise string
	// ListenSet is true when listen is written with a value: replication
	// then has a listener of its own there (a taken port is an error), not
	// the MetaQ port.
	ListenSet            bool
	Compression          string
	BandwidthBytesPerSec int64
	StuckAfter           time.Duration
	// TLSCert and TLSKey make the replication listener serve TLS; with TLSCA
	// set, slaves must present a certificate signed by it (mutual TLS).
	TLSCert, TLSKey, TLSCA string
	// FenceSites (fenceSites) is the number of sites of this brokerId, the
	// master's included. Above 1 the master acknowledges writes only while
	// a majority of them confirmed it within Lease (leaseMs), so that two
	// masters never acknowledge writes at once after a failover. 0 (the
	// default) = no lease: the master acknowledges whatever it can reach.
	FenceSites int
	Lease      time.Duration
	// Sites (sites, comma-separated) lists every site of the deployment,
	// this one included, sorted; empty when not written. The same list
	// everywhere (it belongs in the shared file), it gives each site a
	// class of generations (its index in the list, mod its length) that a
	// promotion which cannot write every site's ZooKeeper ensemble takes
	// its number from, so that two sites cut off from each other and both
	// promoted never take one generation (siterole.ClassAllows). At most
	// MaxSites; a site it does not name refuses to start.
	Sites []string
	// SecretFile names the file holding the replication shared secret. Set
	// on both sides (one shared server.ini sets it for the whole deployment),
	// it makes master and slave prove to each other that they hold it
	// before anything is sent. The secret itself never goes in server.ini.
	// A relative path is taken from server.ini's directory.
	SecretFile string
	// AutoFailover (autoFailover, default false) lets a slave site promote
	// itself when a majority of the sites (by gossip) and its own
	// ZooKeeper agree its master has been unreachable for AutoFailoverAfter
	// (autoFailoverAfterMs, default 30000); only the most caught-up slave
	// site (ties: the lowest site name) does. It needs gossip and ZooKeeper.
	AutoFailover      bool
	AutoFailoverAfter time.Duration
	// HandoverHold (handoverHoldMs, default 2500) is how long a master
	// that hands mastership over (switchover) holds a put that arrives
	// meanwhile, waiting to pass it on to the new master, before answering
	// it 503, not stored; 0 refuses such puts at once (503). Held puts are
	// answered with the new master's answer (broker/hold.go). A master
	// waiting for the confirmation of its generation (just started, or
	// confirming it again) holds puts with the same bounds, and stores
	// them once confirmed (internal/bundle/ackguard.go).
	// HandoverHoldBytes (handoverHoldBytes, default 64 MiB) bounds the body
	// bytes held at once; a put beyond it is answered 503 at once.
	// HandoverHoldMax (handoverHoldMaxMs, default 2900) is the hard limit
	// of a switchover's hold of one put, from its arrival: while the
	// handover progresses (the slave caught up, the new master said it
	// took over, the new master answers "not master yet") a put waits
	// HandoverHold from the last progress, never beyond HandoverHoldMax;
	// below HandoverHold it is HandoverHold. The default stays below the
	// Java producer's 3 s send timeout: a put answered after its client
	// gave up may be sent again and stored twice.
	HandoverHold      time.Duration
	HandoverHoldBytes int64
	HandoverHoldMax   time.Duration
	// AllowUnauthenticatedSwitchover (default false) lets a master hand
	// mastership over when a slave site asks over a replication link that
	// neither the shared secret (SecretFile) nor mutual TLS authenticates.
	// Off, such a request is refused: anyone who reaches the replication
	// port could otherwise move mastership across sites.
	AllowUnauthenticatedSwitchover bool
	// PromoteFinishTimeout (promoteFinishTimeoutMs, default 300000, at
	// least 1000) is how long a site keeps finishing a promotion whose step
	// after the raise of the generation failed (taking the master node,
	// registering, a disk that stays full) before it gives the promotion
	// up, stops what it started and takes no puts.
	PromoteFinishTimeout time.Duration
}

// Limits is the optional [limits] section: what one client, or many, may
// make the broker hold. Keys: maxConnections, maxConnectionsPerAddress,
// idleTimeoutMs, readTimeoutMs, writeTimeoutMs, maxBufferedBytes,
// maxAddressBufferedBytes, maxConnectionBufferedBytes, getWaitMs, getWaitMinBytes, getWaitLingerMs. A zero
// count or timeout means no limit (getWaitMs: no wait; getWaitMinBytes or getWaitLingerMs: no lingering).
type Limits struct {
	// MaxConnections bounds the open client connections; the broker lowers
	// it further to three quarters of its open-file limit.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections from one IP address.
	MaxConnectionsPerAddress int
	// IdleTimeout closes a connection that sent nothing and waits for no
	// answer for this long.
	IdleTimeout time.Duration
	// ReadTimeout bounds the time a client takes to send one whole request
	// once it has started it (a slowloris client is cut off).
	ReadTimeout time.Duration
	// WriteTimeout closes a connection that does not read its answers.
	WriteTimeout time.Duration
	// MaxBufferedBytes bounds, broker-wide, the get answers not yet written
	// and the put bodies being read or not yet stored.
	MaxBufferedBytes int64
	// MaxAddressBufferedBytes is the share of MaxBufferedBytes the
	// connections of one IP address may hold together, at least
	// MaxConnectionBufferedBytes; 0 means half of MaxBufferedBytes (or
	// MaxConnectionBufferedBytes if that is more).
	MaxAddressBufferedBytes int64
	// MaxConnectionBufferedBytes is the share of MaxBufferedBytes one
	// connection may hold; it also caps the bytes one get returns.
	MaxConnectionBufferedBytes int64
	// GetWait is how long a get that finds no records at its offset (the
	// end of its partition) may wait for the partition to grow before it
	// is answered 404; 0 (the default) answers at once, as MetaQ does.
	GetWait time.Duration
	// GetWaitMinBytes and GetWaitLinger: a held get (GetWait) that the
	// partition's growth wakes with fewer than GetWaitMinBytes readable
	// at its offset waits up to GetWaitLinger more for that many (Kafka's
	// fetch.min.bytes and fetch.max.wait.ms), so that its answer carries
	// a batch rather than one group commit's records. Either 0: answered
	// at the first growth.
	GetWaitMinBytes int64
	GetWaitLinger   time.Duration
	// TCPCongestion is the TCP congestion control of the client listener,
	// which the connections it accepts start with; "" (server.ini: host)
	// keeps the host's.
	TCPCongestion string
}

// Slave is a loaded async_slave.properties (see Plugin files in broker/wire/doc.go) plus this project's
// link settings.
type Slave struct {
	File                 string
	SlaveID              int           // required, >= 0
	SlaveGroup           string        // default meta-slave-group_<slaveId> when blank
	SlaveMaxDelay        time.Duration // slaveMaxDelayInMills, default 500ms
	AutoSyncMasterConfig bool          // default false
	// Extensions.
	MasterAddress          string // replication address of the master when ZooKeeper is off
	Compression            string // zstd (default), s2, none, auto
	BandwidthBytesPerSec   int64  // 0 = unlimited
	TLSCert, TLSKey, TLSCA string
}

// Warning is a non-fatal finding, such as an unknown key.
type Warning struct {
	File, Section, Key, Message string
	// Unknown marks a key or section this project does not know (a typo,
	// most often). Loading carries on, as a reload must; the commands that
	// start a broker or publish a file refuse it (see CheckUnknown).
	Unknown bool
}

func (w Warning) String() string {
	return w.File + ": [" + w.Section + "] " + w.Key + ": " + w.Message
}
