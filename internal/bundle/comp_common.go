package bundle

import (
	"sync/atomic"

	"metaq/broker"
)

// Component names, used in logs, /status and to find a component from another.
const (
	compTxn       = "transactions"
	compShipper   = "replication-master"
	compReceiver  = "replication-slave"
	compConfig    = "configsync"
	compTopology  = "topology"
	compDashboard = "dashboard"
	compRepair    = "repair"
)

// findComp returns the bundle's component of type T, if it runs one. It
// reads b.comps, which is set before any component starts and not changed
// afterwards, so components may call it from Start and later.
func findComp[T Component](b *Bundle) (T, bool) {
	for _, c := range b.comps {
		if t, ok := c.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// shipperEnabled: the master side of replication runs on every master
// bundle unless [replication] enable=false, so a MetaQ server.ini with no
// [replication] section ships to slave sites too.
func (b *Bundle) shipperEnabled() bool {
	return b.opts.Mode == ModeMaster && b.Config().Replication.Enable
}

// slaveStats returns what the broker answers `stats slave` from: the
// replication component's lines on an async slave or on a master that ships
// to slaves, nil otherwise (the item then falls through to a topic, as on
// MetaQ).
func (b *Bundle) slaveStats() broker.SlaveStats {
	if b.opts.Mode == ModeSlave || b.shipperEnabled() {
		return &b.slave
	}
	return nil
}

// slaveStatsHolder lets the broker, which starts before the components,
// answer `stats slave` from the replication component once it runs.
type slaveStatsHolder struct {
	role  *roleOwner // asked at every call: a promotion or a demotion changes it
	lines atomic.Pointer[func() []string]
}

func (h *slaveStatsHolder) IsSlave() bool { return h.role.isSlave() }

func (h *slaveStatsHolder) Lines() []string {
	if f := h.lines.Load(); f != nil {
		return (*f)()
	}
	return []string{"replication not running"}
}

func (h *slaveStatsHolder) set(f func() []string) {
	if f == nil {
		h.lines.Store(nil)
		return
	}
	h.lines.Store(&f)
}
