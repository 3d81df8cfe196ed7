package georeplicator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"metaq/broker/store"
	"metaq/internal/clock"
)

// LogSource is the master-side view of the store. *store.Store implements it.
// All methods must be safe for concurrent use.
type LogSource interface {
	// ReadLog returns whole durable entries from pos (ErrLogTruncated below the first retained byte).
	ReadLog(pos int64, maxBytes int) ([]store.LogEntry, int64, error)
	// LogBounds returns the first retained and the durable end log positions.
	LogBounds() (first, durable int64)
	// WaitDurable blocks until the durable end is beyond pos or ctx ends.
	WaitDurable(ctx context.Context, pos int64) error
	// Partitions lists every partition with its bounds.
	Partitions() []store.PartitionInfo
	// Backlog returns the records of a partition from offset from to its
	// durable end and the append time of the first of them (zero if none).
	Backlog(topic string, partition int, from int64) (int64, time.Time, error)
}

// LogSink is the slave-side view of the store. *store.Store implements it.
type LogSink interface {
	// AppendRaw stores whole records byte-identically at exactly at.
	AppendRaw(ctx context.Context, topic string, partition int, at int64, records []byte) (int64, error)
	// Read returns the partition's bytes from offset.
	Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error)
	// Partition returns one partition's bounds (ErrNoPartition when absent).
	Partition(topic string, partition int) (store.PartitionInfo, error)
	// Partitions lists every local partition.
	Partitions() []store.PartitionInfo
	// DeletePartition removes a partition; used only for an empty local
	// partition that must start at the master's first shipped offset.
	DeletePartition(topic string, partition int) error
	// Flush makes everything appended so far durable.
	Flush() error
}

var (
	_ LogSource = (*store.Store)(nil)
	_ LogSink   = (*store.Store)(nil)
)

// ShipperOptions configure the master side. Zero values mean defaults.
type ShipperOptions struct {
	// Listen is the replication address. Required unless Listener is set
	// (the bundle passes the MetaQ port's, or one on [replication] listen).
	Listen string
	// Listener, when set, is used instead of opening Listen (the broker's
	// MetaQ port through Broker.ListenFirstBytes, socket activation, or a
	// socket opened in another network namespace). The Shipper closes it.
	Listener net.Listener
	// BrokerID is the master's brokerId; a slave with another brokerId is refused.
	BrokerID int
	// Source is the master's store. Required.
	Source LogSource
	// Compression is the default codec mode when the slave states none: zstd (default), s2, none, auto.
	Compression Mode
	// BandwidthBytesPerSec caps each link (token bucket on bytes sent). 0 = unlimited.
	// When the slave asks for a lower cap, the lower one applies.
	BandwidthBytesPerSec int64
	// StuckAfter: a slave that is behind and has made no progress for this long is "stuck". Default 30s.
	StuckAfter time.Duration
	// FrameBytes is the raw payload target per frame. Default 256 KiB.
	FrameBytes int
	// Keepalive is the idle interval between keepalives. Default 1s. A peer
	// silent for 4 intervals (at least 2s) is disconnected.
	Keepalive time.Duration
	// DefaultMaxDelay is used when a slave does not send slaveMaxDelayInMills. Default 500ms.
	DefaultMaxDelay time.Duration
	// StateFile keeps each slave group's progress across master restarts. "" = memory only.
	StateFile string
	// TLS, when set, serves TLS only: a slave that does not start with a
	// ClientHello is refused with an error frame saying so. Set ClientAuth
	// to tls.RequireAndVerifyClientCert for mutual TLS.
	TLS *tls.Config
	// Secret, when set, is the replication shared secret (see auth.go and
	// LoadSecrets): a slave must prove it holds it before it is told
	// anything, and the master proves it in turn.
	Secret []byte
	// PreviousSecrets are also accepted from slaves, so a new Secret can be
	// rolled out one host at a time. Ignored without Secret.
	PreviousSecrets [][]byte
	// AutoLANRTT is the round trip below which mode auto treats a link as a
	// LAN and picks s2 (see auto.go). Default 2ms.
	AutoLANRTT time.Duration
	// CongestionControl is the TCP congestion control asked for on slave
	// connections (Linux). Default "bbr"; "system" keeps the host default. If
	// the kernel lacks it, the host default is used and a warning logged once.
	CongestionControl string
	// ConfigBytes returns the master's server.ini bytes for autoSyncMasterConfig. nil = not offered.
	ConfigBytes func() ([]byte, error)

	// LogID names this master's log and Generation the master generation it
	// serves (Identity). Both go into the handshake. A slave that followed
	// a log with another LogID resumes by its partition ends; a slave that
	// knows a newer generation is refused and the master steps down.
	LogID      string
	Generation uint64
	// PromotionEnds are each partition's end when this master was promoted
	// (Identity.Ends, keyed by PartKey). A slave that resumes by partition
	// ends is resumed from at most these, and told them: what it holds
	// beyond them this master never had, and it cuts that tail.
	PromotionEnds map[string]int64
	// History is the history of this master's log (Identity.History: every
	// generation's promotion ends, this master's last). A slave that
	// resumes by partition ends and sends its own history is cut at the
	// earliest fork of both, and takes this history as its own. nil with
	// PromotionEnds set: this master's own epoch only.
	History []Epoch
	// Sites is the number of sites of this brokerId, master included. When
	// above 1 the master holds a lease: it is confirmed while it and enough
	// slaves for a majority of Sites acked within Lease, and reports
	// through OnFence when that changes. Default 0: no lease.
	Sites int
	// Lease is how long a slave's ack confirms the master. Default 4 keepalives, at least 2s.
	Lease time.Duration
	// OnFence is called (from a Shipper goroutine, never concurrently) when
	// the master must stop acknowledging writes (fenced) or may again.
	OnFence func(Fence)
	// OnControl, when set, takes requests slaves send over their link
	// (Receiver.Control; offered in the handshake). It is called on the
	// link's reader and must not block: it starts the work, which answers
	// with req.Reply. Requests over a link authenticated by neither Secret
	// nor a client certificate are refused before it is called, unless
	// AllowUnauthenticatedControl (then each is logged as a warning).
	OnControl                   func(req *ControlRequest)
	AllowUnauthenticatedControl bool

	Logger *slog.Logger // nil = discard
	Clock  clock.Clock  // nil = real
}

func (o *ShipperOptions) validate() error {
	for _, k := range append([][]byte{o.Secret}, o.PreviousSecrets...) {
		if len(o.Secret) > 0 && len(k) < MinSecretLen {
			return fmt.Errorf("georeplicator: shared secret of %d bytes, want at least %d", len(k), MinSecretLen)
		}
	}
	if o.Listen == "" && o.Listener == nil {
		return errors.New("georeplicator: ShipperOptions.Listen is required")
	}
	if o.Source == nil {
		return errors.New("georeplicator: ShipperOptions.Source is required")
	}
	m, err := ParseMode(string(o.Compression))
	if err != nil {
		return err
	}
	o.Compression = m
	if o.BandwidthBytesPerSec < 0 {
		return fmt.Errorf("georeplicator: negative bandwidth %d", o.BandwidthBytesPerSec)
	}
	if o.StuckAfter <= 0 {
		o.StuckAfter = 30 * time.Second // long enough to ride out a reconnect with backoff
	}
	if o.FrameBytes <= 0 {
		o.FrameBytes = 256 << 10 // ~40 ms at 50 Mbit/s: latency and compression ratio both fine
	}
	if o.FrameBytes > maxFrameBytes/2 {
		return fmt.Errorf("georeplicator: FrameBytes %d too large", o.FrameBytes)
	}
	if o.Keepalive <= 0 {
		o.Keepalive = time.Second
	}
	if o.AutoLANRTT <= 0 {
		o.AutoLANRTT = autoLANRTT
	}
	switch o.CongestionControl {
	case "":
		o.CongestionControl = "bbr" // see setCongestion
	case "system":
		o.CongestionControl = ""
	}
	if o.DefaultMaxDelay <= 0 {
		o.DefaultMaxDelay = 500 * time.Millisecond // MetaQ's slaveMaxDelayInMills default
	}
	if o.Lease <= 0 {
		o.Lease = idleTimeout(o.Keepalive)
	}
	if o.Sites < 0 {
		return fmt.Errorf("georeplicator: negative Sites %d", o.Sites)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return nil
}

// ReceiverOptions configure the slave side. Zero values mean defaults.
type ReceiverOptions struct {
	// Sink is the slave's store. Required.
	Sink LogSink
	// Resolver finds the master's replication address. Required.
	Resolver Resolver
	// BrokerID is the slave's brokerId, which must equal the master's. -1 skips the check.
	BrokerID int
	// SlaveID and Group identify this slave (async_slave.properties slaveId, slaveGroup).
	SlaveID int
	Group   string // default meta-slave-group_<slaveId>
	// MaxDelay is slaveMaxDelayInMills: the master sends a durable record within this time. Default 500ms.
	MaxDelay time.Duration
	// Compression is the slave's codec preference; "" = the master's setting.
	Compression Mode
	// BandwidthBytesPerSec asks the master to cap this link. 0 = no cap from this side.
	BandwidthBytesPerSec int64
	// Window is how many sent-but-unacknowledged bytes the master may have in
	// flight. Default 8 MiB, at least 4 MiB: more than a WAN link's
	// bandwidth-delay product (375 KB at 50 Mbit/s and 61 ms).
	Window int
	// CheckpointFile holds the master log position applied and durable here. Required.
	CheckpointFile string
	// Identity, when set, is this site's generation record: the hello
	// carries the highest generation known here (a master with an older
	// one is refused and steps down) and a newer one from the master is
	// recorded. nil = no generation check.
	Identity *IdentityStore
	// OnPromote is called when the master hands mastership over to this
	// slave (a planned switchover) once it holds everything up to pos. It
	// must not block: it starts the promotion, which closes this Receiver.
	OnPromote func(pos int64)
	// TailDir is where records this slave holds beyond what its (new)
	// master had at its promotion are saved before they are cut from the
	// store (a former master's unreplicated tail). Default: the directory
	// of CheckpointFile + "/unreplicated".
	TailDir string
	// CheckpointInterval is how often the applied position is made durable. Default 200ms.
	CheckpointInterval time.Duration
	// TLS, when set, dials with TLS (with Certificates for mutual TLS).
	TLS *tls.Config
	// Secret, when set, is the replication shared secret: the slave proves
	// it holds it and replicates only from a master that proves the same.
	Secret []byte
	// AutoSyncMasterConfig asks for the master's server.ini at every connect and
	// hands it to OnMasterConfig.
	AutoSyncMasterConfig bool
	OnMasterConfig       func(ctx context.Context, serverIni []byte) error
	// BackoffMin and BackoffMax bound reconnect delays (exponential, full jitter). Defaults 100ms and 10s.
	BackoffMin, BackoffMax time.Duration
	// DialTimeout bounds connect plus handshake. Default 10s.
	DialTimeout time.Duration
	// Dial, when set, opens the TCP connection instead of net.Dialer (a
	// source address, a proxy, another network namespace).
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger *slog.Logger // nil = discard
	Clock  clock.Clock  // nil = real

	// applyHook, when set (tests and benchmarks), sees every entry after it is applied.
	applyHook func(e store.LogEntry, at time.Time)
}

const minWindow = 4 << 20

func (o *ReceiverOptions) validate() error {
	if len(o.Secret) > 0 && len(o.Secret) < MinSecretLen {
		return fmt.Errorf("georeplicator: shared secret of %d bytes, want at least %d", len(o.Secret), MinSecretLen)
	}
	if o.Sink == nil {
		return errors.New("georeplicator: ReceiverOptions.Sink is required")
	}
	if o.Resolver == nil {
		return errors.New("georeplicator: ReceiverOptions.Resolver is required")
	}
	if o.CheckpointFile == "" {
		return errors.New("georeplicator: ReceiverOptions.CheckpointFile is required")
	}
	if o.SlaveID < 0 {
		return fmt.Errorf("georeplicator: slaveId %d must be >= 0", o.SlaveID)
	}
	if o.Group == "" {
		o.Group = fmt.Sprintf("meta-slave-group_%d", o.SlaveID) // MetaQ's default
	}
	if o.Compression != "" {
		m, err := ParseMode(string(o.Compression))
		if err != nil {
			return err
		}
		o.Compression = m
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 500 * time.Millisecond
	}
	if o.Window <= 0 {
		o.Window = 8 << 20
	}
	if o.Window < minWindow {
		o.Window = minWindow
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 200 * time.Millisecond
	}
	if o.TailDir == "" {
		o.TailDir = filepath.Join(filepath.Dir(o.CheckpointFile), "unreplicated")
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 10 * time.Second
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = o.BackoffMin
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.AutoSyncMasterConfig && o.OnMasterConfig == nil {
		return errors.New("georeplicator: AutoSyncMasterConfig needs OnMasterConfig")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return nil
}
