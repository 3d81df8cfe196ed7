package bundle

import (
	"metaq/broker/client"
	"metaq/topology"
)

// Accessors for programs that embed bundles (the three-site demo, tests):
// each returns the zero value when the component does not run.

// ReplicationAddr is the master's replication address as slaves dial it:
// the listener of the shipper that runs for the role now (a promotion's,
// else the configured one); "" on a slave.
func (b *Bundle) ReplicationAddr() string {
	if c := b.failover.role.shipper(); c != nil {
		return c.Addr()
	}
	return ""
}

// NATSURL is the client URL of the embedded NATS server this bundle runs.
func (b *Bundle) NATSURL() string {
	if c, ok := findComp[*configSyncComponent](b); ok {
		return c.NATSURL()
	}
	return ""
}

// Topology is the bundle's gossip membership.
func (b *Bundle) Topology() *topology.Topology {
	if c, ok := findComp[*topologyComponent](b); ok {
		return c.Topology()
	}
	return nil
}

// Router is the site-affinity router for Go consumers in this process.
func (b *Bundle) Router() client.Router {
	if c, ok := findComp[*topologyComponent](b); ok {
		return c.Router()
	}
	return nil
}

// DashboardAddr is the dashboard's listen address.
func (b *Bundle) DashboardAddr() string {
	if c, ok := findComp[*dashboardComponent](b); ok {
		return c.Addr()
	}
	return ""
}

// ConfigVersion is the configsync version this site runs (0 when none).
func (b *Bundle) ConfigVersion() uint64 {
	if c, ok := findComp[*configSyncComponent](b); ok {
		if a := c.Agent(); a != nil {
			return a.State().Version
		}
	}
	return 0
}
