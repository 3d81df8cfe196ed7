package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"metaq/broker/config"
)

// Mode is the role the bundle starts in, as `metaServer.sh start [mode]` (see metaServer.sh in broker/wire/doc.go).
type Mode int

const (
	// ModeMaster is a plain broker (`start`).
	ModeMaster Mode = iota
	// ModeSlave is an async slave (`start slave`, async_slave.properties).
	ModeSlave
	// ModeSamsa is a synchronous-replication master (`start samsa`, samsa_master.properties).
	ModeSamsa
	// ModeGregor is a synchronous-replication slave (`start gregor`); it never registers in ZooKeeper.
	ModeGregor
)

// String returns the mode's metaServer.sh name ("" for master).
func (m Mode) String() string {
	switch m {
	case ModeSlave:
		return "slave"
	case ModeSamsa:
		return "samsa"
	case ModeGregor:
		return "gregor"
	}
	return "master"
}

// ParseMode parses "", "master", "slave", "samsa" or "gregor".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "", "master":
		return ModeMaster, nil
	case "local":
		// MetaQ's `start local` also ran an embedded ZooKeeper.
		return ModeMaster, fmt.Errorf("bundle: there is no local mode: set zk.zkEnable=false in [zookeeper] to run without ZooKeeper")
	case "slave", "metaslave":
		return ModeSlave, nil
	case "samsa":
		return ModeSamsa, nil
	case "gregor":
		return ModeGregor, nil
	}
	return ModeMaster, fmt.Errorf("bundle: unknown mode %q (want slave, samsa or gregor)", s)
}

// Options configure a Bundle.
type Options struct {
	// ConfigPath is the server.ini to load; required.
	ConfigPath string
	// Mode is the role; default ModeMaster.
	Mode Mode
	// PluginPath is the mode's properties file: async_slave.properties for
	// ModeSlave (required), samsa_master.properties for ModeSamsa (required),
	// ignored otherwise.
	PluginPath string
	// Logger receives every component's logs; nil discards.
	Logger *slog.Logger

	// ListenAddr overrides the MetaQ protocol address (default
	// ":<serverPort>"); tests use "127.0.0.1:0".
	ListenAddr string
	// AdminAddr overrides [site] adminAddr: a TCP address for the admin
	// endpoint besides its unix socket (<dataPath>/admin.sock); "off"
	// disables the endpoint, socket included.
	AdminAddr string
	// DataPath overrides [system] dataPath (metaq-server start -data, tests),
	// with the transaction journal unless dataLogPath names its own directory.
	DataPath string
	// AllowUnknown starts even when the configuration files hold keys or
	// sections this project does not know. Without it New refuses them
	// (a typo silently loses its setting), except in a server.ini that is
	// exactly the version configsync last applied here: its pusher chose.
	AllowUnknown bool
	// Adjust, when set, changes the loaded configuration (at start and at
	// every reload) without touching the files: tests run several bundles
	// from one unchanged MetaQ server.ini on one host, with their own ports
	// and ZooKeeper.
	Adjust func(*config.Server)

	// ZooKeeperDialer replaces the registry's net.DialTimeout (fault
	// injection in tests, e.g. broker/registry/zktest).
	ZooKeeperDialer func(network, address string, timeout time.Duration) (net.Conn, error)

	// GossipDropTo, when set, is asked before every gossip packet and
	// connection this bundle sends to another member's gossip address
	// (host:port): true drops it (topology.Options.DropTo). Tests cut two
	// sites' gossip off from each other with it.
	GossipDropTo func(addr string) bool

	// ReplicationDialer, when set, opens a slave site's connections to its
	// master's replication listener instead of net.Dialer (tests put an
	// emulated WAN between sites that find each other in ZooKeeper, or cut
	// a former master's link to the new one); also a master that became a
	// slave at run time.
	ReplicationDialer func(ctx context.Context, network, address string) (net.Conn, error)

	// PromoteFinishTimeout bounds the background finisher of a promotion
	// that failed after it raised the generation: past it the site gives
	// the promotion up (promote_finish.go); 0 takes [replication]
	// promoteFinishTimeoutMs (default 5 minutes).
	PromoteFinishTimeout time.Duration

	// Components are started after the built-in ones (see components.go).
	Components []Component
}

func (o *Options) validate() error {
	if o.ConfigPath == "" {
		return fmt.Errorf("bundle: a server.ini path is required")
	}
	if (o.Mode == ModeSlave || o.Mode == ModeSamsa) && o.PluginPath == "" {
		return fmt.Errorf("bundle: mode %s needs its properties file (-s)", o.Mode)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
