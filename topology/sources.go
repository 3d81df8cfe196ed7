package topology

import (
	"context"

	"metaq/georeplicator"
)

// HealthSource reports this bundle's storage and replication health. Health
// is called from the metadata refresh loop; it must be safe for concurrent
// use and return quickly (read a flag, do not probe the disk).
type HealthSource interface {
	Health() Health
}

// HealthFunc adapts a function to HealthSource.
type HealthFunc func() Health

// Health calls f.
func (f HealthFunc) Health() Health { return f() }

// LagSource returns the replication lag of every slave group this bundle
// ships to (empty on a slave). Lag must be safe for concurrent use and must
// not block for long; the caller owns the returned slice. A
// *georeplicator.Shipper is one.
type LagSource interface {
	Lag() []georeplicator.GroupLag
}

// LagFunc adapts a function to LagSource.
type LagFunc func() []georeplicator.GroupLag

// Lag calls f.
func (f LagFunc) Lag() []georeplicator.GroupLag { return f() }

// ConsumerOffset is one committed consumer offset as MetaQ stores it under
// <root>/consumers/<group>/offsets/<topic>/<brokerId>-<partition>.
type ConsumerOffset struct {
	// Root is the ZooKeeper root the offset was read under: the real root or
	// a site view root (/meta-view-<site>).
	Root string `json:"root"`
	// Site is the site whose consumers committed it: the view's site, or,
	// for the real root, the site whose ZooKeeper it was read from. ""
	// derives it from a /meta-view-<site> root.
	Site      string `json:"site,omitempty"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	BrokerID  int    `json:"brokerId"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
}

// OffsetSource reads committed consumer offsets (from ZooKeeper, through the
// registry, adapted in cmd). It may block on the network and must honour ctx.
type OffsetSource interface {
	ConsumerOffsets(ctx context.Context) ([]ConsumerOffset, error)
}

// OffsetFunc adapts a function to OffsetSource.
type OffsetFunc func(ctx context.Context) ([]ConsumerOffset, error)

// ConsumerOffsets calls f.
func (f OffsetFunc) ConsumerOffsets(ctx context.Context) ([]ConsumerOffset, error) { return f(ctx) }

// Mastership is what this bundle is for its brokerId right now, when that
// changes at run time (a promotion or a demotion).
type Mastership struct {
	Role       Role
	SlaveID    int    // -1 for a master
	Generation uint64 // the master generation this bundle knows
	ReplAddr   string // the replication listener of a master, "" on a slave
	LogPos     int64  // applied (slave) or written (master) log position
}

// MastershipSource reports the bundle's current Mastership; it overrides
// Options.Role, SlaveID and ReplAddr in the gossiped metadata.
type MastershipSource interface {
	Mastership() Mastership
}

// MastershipFunc adapts a function to MastershipSource.
type MastershipFunc func() Mastership

// Mastership calls f.
func (f MastershipFunc) Mastership() Mastership { return f() }
