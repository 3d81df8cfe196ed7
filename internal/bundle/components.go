package bundle

// builtinComponents returns the components every bundle of this mode runs,
// in start order (they stop in reverse), each behind its own config section:
//
//   - transactions: always (the journal under <dataLogPath>/transactions);
//   - replication-master: every master, unless [replication] enable=false,
//     ships its log to slave sites on its MetaQ port (or on [replication]
//     listen when written) and publishes that address in ZooKeeper;
//   - replication-slave: an async slave (`start slave`, async_slave.properties)
//     replicates its master, found through ZooKeeper or masterAddress, with
//     the compressed stream or, from a master without one, MetaQ's get;
//   - configsync: with a [nats] section, the site's config agent (and, with no
//     [nats] url on the master, the embedded NATS server);
//   - dashboard: with dashboardHttpPort or [site] dashboardAddr written, the
//     dashboard, JSON API, /lag and Prometheus /metrics;
//   - topology: with a [gossip] section, gossip membership, the read router,
//     the site's ZooKeeper view (ZooKeeper on) and lag reports;
//   - repair: while this site is master (started so, or promoted), it
//     refills ranges lost to disk damage from its slaves (registered in
//     ZooKeeper, or alive in gossip).
//
// These three start before the broker accepts connections and registers in
// ZooKeeper (see beforeServing); the others after the admin endpoint.
// The dashboard starts before topology so that topology can gossip the
// dashboard's address; the dashboard reaches topology at request time.
func builtinComponents(b *Bundle) []Component {
	cfg := b.Config()
	comps := []Component{newTxnComponent()}
	if b.shipperEnabled() {
		comps = append(comps, newShipperComponent())
	}
	if b.opts.Mode == ModeSlave && b.Slave != nil {
		comps = append(comps, newReceiverComponent())
	}
	if cfg.NATS.Enabled {
		comps = append(comps, newConfigSyncComponent())
	}
	if cfg.Site.Dashboard {
		comps = append(comps, newDashboardComponent())
	}
	if cfg.Gossip.Enable {
		comps = append(comps, newTopologyComponent())
	}
	if b.Registry != nil || cfg.Gossip.Enable {
		comps = append(comps, newRepairComponent())
	}
	return comps
}
