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

	// MaxMessageSize is the largest put/sync body accepted, in bytes; a larger
	// declared body closes the connection without reading it. Default
	// 16 MiB, never above 16 MiB.
	MaxMessageSize int
	// MaxInFlight bounds the requests one connection may have in progress;
	// the reader stops reading while it is reached. Default 256.
	MaxInFlight int
	// MaxPendingBytes bounds the fetched data one connection holds before
	// it is written (a get reserves min(maxSize, maxTransferSize) while it
	// reads); gets wait when it is used up. Default 32 MiB.
	MaxPendingBytes int64
	// WriteTimeout bounds one response write; a client that does not read
	// for this long is disconnected. Default 30s.
	WriteTimeout time.Duration
	// Version is the string `version` answers; default Version.
	Version string
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
	if o.MaxMessageSize <= 0 || o.MaxMessageSize > HardMaxMessageSize {
		o.MaxMessageSize = HardMaxMessageSize
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 256
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 32 << 20
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Version == "" {
		o.Version = Version
	}
	if id := o.Config.System.BrokerID; id < 0 || id > 1023 {
		return fmt.Errorf("broker: brokerId %d outside 0..1023", id)
	}
	return nil
}

// defaultListenAddr is every interface, as MetaQ listens, except when the
// broker advertises a loopback hostName: nobody elsewhere could use it, so it
// is not exposed beyond this machine either.
func defaultListenAddr(hostName string, port int) string {
	if ip := net.ParseIP(strings.Trim(hostName, "[]")); (ip != nil && ip.IsLoopback()) || hostName == "localhost" {
		return net.JoinHostPort(strings.Trim(hostName, "[]"), strconv.Itoa(port))
	}
	return fmt.Sprintf(":%d", port)
}
