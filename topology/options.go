package topology

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"metaq/internal/clock"
)

// DefaultLaggingAfter is Options.LaggingAfter's default, also used where
// lag is classified without a Topology (the dashboard of a bundle without
// gossip).
const DefaultLaggingAfter = 5 * time.Second

// Options configure a Topology. Zero values mean the defaults noted.
type Options struct {
	// Name is the gossip node name, unique in the pool. Default
	// "<site>-<brokerId>-m" for a master, "<site>-<brokerId>-s<slaveId>" for
	// a slave, so a restarted bundle takes its old place. The name is the
	// bundle's identity in the pool, not its role: it keeps the start-up
	// role's default after a promotion or demotion (memberlist cannot rename
	// a live node), and the role gossiped beside it (Meta.Role, from the
	// Mastership source) is the current one.
	Name string
	// Site is this bundle's site ([site] name). Required.
	Site string
	// Role, BrokerID and SlaveID identify the bundle as in ZooKeeper
	// (SlaveID is ignored for a master and reported as -1).
	Role     Role
	BrokerID int
	SlaveID  int
	// ServeURL is meta://host:port of the MetaQ listener. Required.
	ServeURL string
	// ReplAddr is the replication listener (host:port) of a master.
	ReplAddr string
	// HTTPAddr is where /lag is served (dashboardHttpPort), gossiped so that
	// tools can find any bundle's report.
	HTTPAddr string
	// ZKConnect and ZKRoot are this bundle's ZooKeeper ensemble and root,
	// gossiped so that bundles of other sites can keep this site's view
	// when its own bundles are down. Empty when ZooKeeper is off.
	ZKConnect string
	ZKRoot    string

	// Bind is the gossip listen address host:port ([gossip] bind). Port 0
	// picks a free port (tests). Default 127.0.0.1:0.
	Bind string
	// Advertise is the address others reach this node at; default Bind's.
	Advertise string
	// Join lists seed addresses tried by Start; failures are logged, not fatal,
	// because the first bundle of a pool has nobody to join.
	Join []string
	// Key is the gossip encryption key (16, 24 or 32 bytes). Empty disables
	// encryption and logs a warning: production pools must set one.
	Key []byte
	// Label separates pools of different environments on the same network;
	// packets with another label are dropped.
	Label string

	// Timing holds the failure detector's intervals; zero fields take
	// memberlist's WAN defaults. FastTiming gives short ones for tests.
	Timing Timing

	// Health and Lag feed the node metadata; nil means "healthy" and "no
	// slave groups".
	Health HealthSource
	Lag    LagSource
	// Mastership, when set, reports the role, slaveId, generation and
	// replication address as they change at run time.
	Mastership MastershipSource
	// RefreshInterval is how often metadata is recomputed from Health and Lag
	// and gossiped when it changed. Default 2s.
	RefreshInterval time.Duration
	// LaggingAfter is the seconds-behind above which a connected slave group is
	// reported lagging rather than ok. Default DefaultLaggingAfter.
	LaggingAfter time.Duration

	// OnEvent, when set, is called from the event goroutine for every event, in
	// order. It must not block for long and must not call Close.
	OnEvent func(Event)
	// Logger receives topology's and memberlist's logs; nil discards.
	Logger *slog.Logger
	// Clock stamps events and member state changes. Default clock.Real.
	Clock clock.Clock

	// DropTo, when set, is asked before every gossip packet and connection
	// this member sends to another member's address (host:port): true
	// drops it (the packet is lost, the connection refused), as a network
	// cut between two sites would. Fault injection for tests: two members
	// whose DropTo names each other are cut off from each other.
	DropTo func(addr string) bool

	// transport, when set, replaces memberlist's own UDP/TCP transport (Bind
	// is then ignored); tests use it to make a member stop answering.
	transport memberlist.Transport
}

// Timing holds memberlist's failure-detection intervals.
type Timing struct {
	ProbeInterval    time.Duration // default 5s (WAN)
	ProbeTimeout     time.Duration // default 3s (WAN)
	GossipInterval   time.Duration // default 500ms (WAN)
	PushPullInterval time.Duration // default 60s (WAN)
	TCPTimeout       time.Duration // default 30s (WAN)
	SuspicionMult    int           // default 6 (WAN)
	// SuspicionMaxTimeoutMult bounds how long suspicion can last without
	// confirmations; default 6.
	SuspicionMaxTimeoutMult int
	// DeadNodeReclaimTime lets a node that died come back at a new address
	// after this long; default 0 (only at the same address).
	DeadNodeReclaimTime time.Duration
	// RejoinInterval is how often the join seeds that are not alive members
	// and the members held down are asked to join again; default 30s.
	RejoinInterval time.Duration
}

// DefaultRejoinInterval is Timing.RejoinInterval's default.
const DefaultRejoinInterval = 30 * time.Second

func (t Timing) rejoinInterval() time.Duration {
	if t.RejoinInterval > 0 {
		return t.RejoinInterval
	}
	return DefaultRejoinInterval
}

// FastTiming returns intervals for tests on loopback: a dead member is
// detected in well under two seconds.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            50 * time.Millisecond,
		GossipInterval:          20 * time.Millisecond,
		PushPullInterval:        500 * time.Millisecond,
		TCPTimeout:              500 * time.Millisecond,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 2,
		DeadNodeReclaimTime:     100 * time.Millisecond,
		RejoinInterval:          500 * time.Millisecond,
	}
}

// DefaultName is the node name Options.Name defaults to; the role in it is
// the start-up role (see Options.Name).
func DefaultName(site string, role Role, brokerID, slaveID int) string {
	if role == RoleSlave {
		return site + "-" + strconv.Itoa(brokerID) + "-s" + strconv.Itoa(slaveID)
	}
	return site + "-" + strconv.Itoa(brokerID) + "-m"
}

func (o *Options) validate() error {
	if o.Site == "" {
		return errors.New("topology: site name required")
	}
	if o.ServeURL == "" {
		return errors.New("topology: serving address required")
	}
	if o.BrokerID < 0 || o.BrokerID > 1023 {
		return fmt.Errorf("topology: brokerId %d out of range 0..1023", o.BrokerID)
	}
	if o.Role == RoleMaster {
		o.SlaveID = -1
	} else if o.SlaveID < 0 {
		return fmt.Errorf("topology: slave needs slaveId >= 0, got %d", o.SlaveID)
	}
	if o.Name == "" {
		o.Name = DefaultName(o.Site, o.Role, o.BrokerID, o.SlaveID)
	}
	if o.Bind == "" {
		o.Bind = "127.0.0.1:0"
	}
	if _, _, err := splitHostPort(o.Bind); err != nil {
		return fmt.Errorf("topology: bind %q: %w", o.Bind, err)
	}
	if o.Advertise != "" {
		if _, _, err := splitHostPort(o.Advertise); err != nil {
			return fmt.Errorf("topology: advertise %q: %w", o.Advertise, err)
		}
	}
	switch len(o.Key) {
	case 0, 16, 24, 32:
	default:
		return fmt.Errorf("topology: gossip key is %d bytes, want 16, 24 or 32", len(o.Key))
	}
	if len(o.Label) > memberlist.LabelMaxSize {
		return fmt.Errorf("topology: gossip label longer than %d bytes", memberlist.LabelMaxSize)
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 2 * time.Second
	}
	if o.LaggingAfter <= 0 {
		o.LaggingAfter = DefaultLaggingAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	// The identity must fit in the metadata whatever the lag looks like.
	if _, err := EncodeMeta(o.staticMeta()); err != nil {
		return err
	}
	return nil
}

func (o *Options) staticMeta() Meta {
	return Meta{
		Site:      o.Site,
		Role:      o.Role,
		BrokerID:  o.BrokerID,
		SlaveID:   o.SlaveID,
		ServeURL:  o.ServeURL,
		ReplAddr:  o.ReplAddr,
		HTTPAddr:  o.HTTPAddr,
		ZKConnect: o.ZKConnect,
		ZKRoot:    o.ZKRoot,
		Health:    Health{StorageOK: true, ReplicationOK: true},
	}
}

// memberlistConfig builds the pool configuration from DefaultWANConfig.
func (o *Options) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultWANConfig()
	c.Name = o.Name
	host, port, _ := splitHostPort(o.Bind)
	c.BindAddr, c.BindPort = host, port
	c.AdvertiseAddr, c.AdvertisePort = "", port
	if o.Advertise != "" {
		h, p, _ := splitHostPort(o.Advertise)
		c.AdvertiseAddr, c.AdvertisePort = h, p
	}
	if len(o.Key) > 0 {
		c.SecretKey = append([]byte(nil), o.Key...)
	}
	c.Label = o.Label
	t := o.Timing
	setDur(&c.ProbeInterval, t.ProbeInterval)
	setDur(&c.ProbeTimeout, t.ProbeTimeout)
	setDur(&c.GossipInterval, t.GossipInterval)
	setDur(&c.PushPullInterval, t.PushPullInterval)
	setDur(&c.TCPTimeout, t.TCPTimeout)
	setDur(&c.DeadNodeReclaimTime, t.DeadNodeReclaimTime)
	if t.SuspicionMult > 0 {
		c.SuspicionMult = t.SuspicionMult
	}
	if t.SuspicionMaxTimeoutMult > 0 {
		c.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	}
	if t.GossipInterval > 0 {
		// Dead nodes are gossiped to for a while so they can refute; keep it
		// proportional when tests shrink the intervals.
		c.GossipToTheDeadTime = 30 * t.GossipInterval
	}
	return c, nil
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, n, nil
}
