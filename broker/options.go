package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"metaq/broker/config"
	"metaq/internal/clock"
)

// Options configure a Broker. Zero values mean defaults.
type Options struct {
	// Config is the loaded server.ini; required.
	Config *config.Server
	// Store is the open storage engine; required. The broker does not close it.
	Store Store
	// Logger receives the broker's logs; nil discards them.
	Logger *slog.Logger
	// Clock drives retention schedules, uptime and rate counters; nil = real.
	Clock clock.Clock
	// Registry publishes the broker in ZooKeeper; nil = standalone.
	Registry Registry
	// TxHandler handles transactions; nil answers them with 500.
	TxHandler TxHandler
	// SlaveStats provides `stats slave`; nil reports "slave false".
	SlaveStats SlaveStats

	// ListenAddr is the MetaQ protocol address; default ":<serverPort>".
	// Tests use "127.0.0.1:0".
	ListenAddr string
	// Listener, when set, is served instead of listening on ListenAddr
	// (a TLS listener, for example: its connections' gets take the copy
	// path, see Zero-copy gets in doc.go). Close closes it.
	Listener net.Listener
	// SyncReceiver makes this broker a synchronous-replication slave (MetaQ
	// "gregor"): it accepts `sync` commands and stores their records under
	// the given ids. Without it `sync` gets 503 as on a plain MetaQ broker.
	SyncReceiver bool
	// SyncSlave is the MetaQ-protocol address (host:port) of a synchronous
	// slave (MetaQ "samsa" master): every put is forwarded with `sync` and
	// acknowledged only when the slave stored it too. "" = none.
	SyncSlave string
	// SyncTimeout bounds one forwarded sync (sendToSlaveTimeoutInMills);
	// default 2s as in MetaQ.
	SyncTimeout time.Duration
	// SyncFailureThreshold is slaveContinuousFailureThreshold: after this
	// many failed syncs in a row the master unregisters from ZooKeeper (so
	// producers go elsewhere) and probes the slave every SyncProbeInterval
	// (checkSlaveIntervalInMills) until it answers, then registers again.
	// Defaults 100 and 100ms, as in MetaQ.
	SyncFailureThreshold int
	SyncProbeInterval    time.Duration
	// SiteSyncTimeout bounds how long a put to a topic with minSyncSites
	// waits for its slave sites to fsync it (see SetSiteReplicator);
	// default 5s.
	SiteSyncTimeout time.Duration

	// MaxMessageSize is the largest put/sync body accepted, in bytes; a larger
	// declared body closes the connection without reading it. Default
	// 16 MiB, never above 16 MiB.
	MaxMessageSize int
	// MaxInFlight bounds the requests one connection may have in progress;
	// the reader stops reading while it is reached. Default 256.
	MaxInFlight int
	// The limits below default to the [limits] section of Config (where a
	// zero count or timeout means none); a positive value here wins.

	// MaxPendingBytes bounds the bytes one connection holds: fetched data
	// before it is written (a get reserves what it may return, and returns
	// at most this much) and put bodies before they are stored. Config:
	// maxConnectionBufferedBytes.
	MaxPendingBytes int64
	// MaxBufferedBytes bounds the same bytes for all connections together.
	// Config: maxBufferedBytes.
	MaxBufferedBytes int64
	// MaxAddressBufferedBytes bounds the same bytes for the connections of
	// one IP address together, so that no address can hold the broker's
	// whole budget (nor queue every other client behind its own waits).
	// Default half of MaxBufferedBytes; at least MaxPendingBytes.
	// Config: maxAddressBufferedBytes.
	MaxAddressBufferedBytes int64
	// MaxConnections bounds the open client connections; a connection over
	// it is closed at once. It is kept at or below three quarters of the
	// process's open-file limit. Config: maxConnections.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections from one IP address.
	// Config: maxConnectionsPerAddress.
	MaxConnectionsPerAddress int
	// IdleTimeout closes a connection that sent nothing and awaits no
	// answer for this long. Config: idleTimeoutMs.
	IdleTimeout time.Duration
	// ReadTimeout bounds the time a client may spend sending one request
	// once it has started it. Config: readTimeoutMs.
	ReadTimeout time.Duration
	// SniffTimeout bounds the wait for a new connection's first byte, which
	// tells a MetaQ client from another protocol served on the same port
	// (ListenFirstBytes). A connection that sends nothing for this long is
	// closed, as an idle one is. Default IdleTimeout, or 10 minutes when
	// that is 0 (no idle timeout): a silent peer never holds its goroutine
	// and its connection slot for ever.
	SniffTimeout time.Duration
	// WriteTimeout bounds one response write; a client that does not read
	// for this long is disconnected. Config: writeTimeoutMs.
	WriteTimeout time.Duration
	// GetWait is how long a get that finds no records at its offset (the
	// end of its partition) waits for the partition to grow: it is answered
	// as soon as records there are readable, else 404 once GetWait is up
	// (see get in broker/wire/doc.go). 0 answers at once. Config: getWaitMs.
	GetWait time.Duration
	// GetWaitMinBytes and GetWaitLinger: a held get woken by its
	// partition's growth with fewer than GetWaitMinBytes readable at its
	// offset (at most its maxSize) waits up to GetWaitLinger more for
	// them, within GetWait, so that its answer carries a batch: fewer gets
	// and answers per delivered message. 0 takes the config's (absent from
	// server.ini: config.DefaultGetWaitMinBytes, DefaultGetWaitLinger); either
	// at most 0 there, or negative here: answered at the first growth.
	// Config: getWaitMinBytes, getWaitLingerMs.
	GetWaitMinBytes int64
	GetWaitLinger   time.Duration
	// TCPCongestion is the TCP congestion control set on the listener the
	// broker opens (not on Options.Listener); "" takes the config's
	// ([limits] tcpCongestion), whose "" keeps the host's.
	TCPCongestion string
	// StallTimeout: while the broker's budget is used up and requests wait
	// for it, a connection holding some of it whose client has taken none of
	// its answers for this long is closed, so that clients that read are
	// served before WriteTimeout frees the memory. Default 5s.
	StallTimeout time.Duration
	// Version is the string `version` answers; default Version.
	Version string
	// CopyGets answers every get through the copy path (read, crc check,
	// copy, write) instead of sending checked log bytes with sendfile
	// (see Zero-copy gets in doc.go); for comparisons. Default false.
	CopyGets bool

	// noInlineGets sends every get to a worker goroutine, never answering
	// one on the reader (getInline); tests compare the two.
	noInlineGets bool
	// waiterIdle replaces workerIdle for the connections' waiter goroutines
	// (getwait.go) when set (tests).
	waiterIdle time.Duration
}

// Version is this project's protocol version string, in MetaQ's format.
const Version = "1.4.6.2"

// HardMaxMessageSize is the upper bound for Options.MaxMessageSize.
const HardMaxMessageSize = 16 << 20

func (o *Options) validate() error {
	if o.Config == nil {
		return errors.New("broker: Options.Config is required")
	}
	if o.Store == nil {
		return errors.New("broker: Options.Store is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.ListenAddr == "" {
		o.ListenAddr = defaultListenAddr(o.Config.System.HostName, o.Config.System.ServerPort)
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 2 * time.Second
	}
	if o.SyncFailureThreshold <= 0 {
		o.SyncFailureThreshold = 100
	}
	if o.SyncProbeInterval <= 0 {
		o.SyncProbeInterval = 100 * time.Millisecond
	}
	if o.SiteSyncTimeout <= 0 {
		o.SiteSyncTimeout = 5 * time.Second
	}
	if o.MaxMessageSize <= 0 || o.MaxMessageSize > HardMaxMessageSize {
		o.MaxMessageSize = HardMaxMessageSize
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 256
	}
	o.applyLimits(o.Config.Limits)
	if o.Version == "" {
		o.Version = Version
	}
	if id := o.Config.System.BrokerID; id < 0 || id > 1023 {
		return fmt.Errorf("broker: brokerId %d outside 0..1023", id)
	}
	return nil
}

// applyLimits fills the limits left zero from the [limits] section, and
// from the defaults where that is zero too (a Config built by hand).
func (o *Options) applyLimits(l config.Limits) {
	pick := func(opt, cfg, def int64) int64 {
		switch {
		case opt > 0:
			return opt
		case cfg > 0:
			return cfg
		}
		return def
	}
	o.MaxPendingBytes = pick(o.MaxPendingBytes, l.MaxConnectionBufferedBytes, config.DefaultMaxConnectionBufferedBytes)
	o.MaxBufferedBytes = pick(o.MaxBufferedBytes, l.MaxBufferedBytes, max(config.DefaultMaxBufferedBytes, o.MaxPendingBytes))
	o.MaxBufferedBytes = max(o.MaxBufferedBytes, o.MaxPendingBytes)
	// At least one connection's share, so that what one connection may hold
	// always fits its address's budget.
	o.MaxAddressBufferedBytes = pick(o.MaxAddressBufferedBytes, l.MaxAddressBufferedBytes, o.MaxBufferedBytes/2)
	o.MaxAddressBufferedBytes = min(max(o.MaxAddressBufferedBytes, o.MaxPendingBytes), o.MaxBufferedBytes)
	o.MaxConnections = int(pick(int64(o.MaxConnections), int64(l.MaxConnections), 0))
	o.MaxConnectionsPerAddress = int(pick(int64(o.MaxConnectionsPerAddress), int64(l.MaxConnectionsPerAddress), 0))
	o.IdleTimeout = time.Duration(pick(int64(o.IdleTimeout), int64(l.IdleTimeout), 0))
	o.ReadTimeout = time.Duration(pick(int64(o.ReadTimeout), int64(l.ReadTimeout), 0))
	o.WriteTimeout = time.Duration(pick(int64(o.WriteTimeout), int64(l.WriteTimeout), int64(config.DefaultWriteTimeout)))
	o.StallTimeout = time.Duration(pick(int64(o.StallTimeout), 0, int64(defaultStallTimeout)))
	o.GetWait = time.Duration(pick(int64(o.GetWait), int64(l.GetWait), 0))
	// 0 takes the config's, whose 0 is no lingering (the defaults apply
	// where the key is absent from server.ini); negative is none.
	if o.GetWaitMinBytes == 0 {
		o.GetWaitMinBytes = l.GetWaitMinBytes
	}
	if o.GetWaitLinger == 0 {
		o.GetWaitLinger = l.GetWaitLinger
	}
	if o.TCPCongestion == "" {
		o.TCPCongestion = l.TCPCongestion
	}
	o.SniffTimeout = time.Duration(pick(int64(o.SniffTimeout), int64(o.IdleTimeout), int64(config.DefaultIdleTimeout)))
	if fdCap := fileLimit() * 3 / 4; fdCap > 0 && (o.MaxConnections == 0 || o.MaxConnections > fdCap) {
		o.MaxConnections = fdCap
	}
}

// defaultStallTimeout is Options.StallTimeout's default.
const defaultStallTimeout = 5 * time.Second

// defaultListenAddr is every interface, as MetaQ listens, except when the
// broker advertises a loopback hostName: nobody elsewhere could use it, so it
// is not exposed beyond this machine either.
func defaultListenAddr(hostName string, port int) string {
	if ip := net.ParseIP(strings.Trim(hostName, "[]")); (ip != nil && ip.IsLoopback()) || hostName == "localhost" {
		return net.JoinHostPort(strings.Trim(hostName, "[]"), strconv.Itoa(port))
	}
	return fmt.Sprintf(":%d", port)
}
