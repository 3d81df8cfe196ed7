// Package topology joins every bundle to one gossip pool (hashicorp/memberlist,
// WAN defaults, encrypted and labelled), publishes each bundle's site, role,
// addresses, health and replication lag as node metadata, and turns that into
// site events, read routing for consumers, per-site ZooKeeper views for
// unmodified Java consumers, and lag reports.
//
// # Gossip
//
// Each bundle is one memberlist node named <site>-<brokerId>-m (master) or
// <site>-<brokerId>-s<slaveId> (slave). Its metadata (Meta) is encoded in a
// compact binary form and always fits memberlist's 512-byte limit: a master
// with more slave groups than fit leaves the tail out and says so. The
// metadata is recomputed from a HealthSource and a LagSource every
// RefreshInterval and gossiped (UpdateNode) only when it changed.
//
// Events: NodeUp, NodeUpdate, NodeSuspect, NodeDown and, per site, SiteUp,
// SiteSuspect, SiteDown (a site is up while any of its bundles is alive).
// Down comes from memberlist's failure detector, so it arrives within
// DetectionTime. memberlist has no hook for suspicion; Suspect is taken from
// the prober's log line (memberlist's logs are routed to slog anyway) and
// cleared by the next successful probe.
//
// memberlist gossips to a member it declared dead only for a while
// (GossipToTheDeadTime) and never probes it again, so every RejoinInterval
// (30 s) a node asks its join seeds that are not alive members, and the
// members it holds down, to join again: a WAN partition longer than that
// heals when the link does, and a bundle whose seeds were all down when it
// started joins them once they are up.
//
// # Read routing (Go consumers)
//
// Router implements broker/client's Router. Choose is the pure rule: a
// consumer in site hf with the LocalFirst preference reads a broker id's
// partitions from hf's replica while it is alive, healthy, reported
// connected and progressing by its master and within the consumer's MaxLag;
// otherwise from the master; while the master is down, from the nearest
// usable replica. It returns to hf as soon as gossip shows the replica usable
// again. Offsets carry over unchanged because replicas are byte-identical at
// the same offsets.
//
// A consumer process that is not a gossip member uses RemoteRouter instead:
// it polls one or more bundles' /lag documents (own site first, then
// another site) and applies the same rule to the members listed there.
//
// # Site views (unmodified Java consumers)
//
// A Java consumer cannot be given a router, but it reads its brokers from
// ZooKeeper under zkRoot. Each site gets a view root, /meta-view-<site>
// (registry.SiteViewRoot), written by registry.SiteView and kept current by
// RunView: for every broker id, brokers/ids/<id>/master points at the site's
// replica while it is healthy and caught up (master reports it ok and within
// MaxLag), and at the real master otherwise; a replica whose link to the
// master broke while the master's last report still has it ok stays (the
// master may be dead before gossip says so); topics-sub, topics-pub and
// topics are mirrored as <id>-m entries. The one-line change for a Java
// consumer in site hf is its zkRoot:
//
//	zkConfig.zkRoot = "/meta-view-hf";   // was "/meta" (the default)
//
// Producers keep the real root, unless the site's bundles forward puts to
// the master ([site] forwardPuts): a slave that does not refuses them. A
// producer on a view reads the brokers again only when the children of
// topics-pub/<topic> change, so when an address the view named is declared
// dead (Topology.ServeURLDown: a member serving it is down, none alive or
// suspect; a suspect master superseded by a newer generation counts as
// down), registry.SiteView re-creates a marker there and the producers
// move to the view's current address, once no entry of the view names an
// address gossip does not hold alive (Topology.ServeURLNotAlive): a woken
// MetaQ 1.4.6 producer reads every broker id's entry and waits 10 s for
// each dead one.
//
// The consumer writes its group's registration, ownership and offsets under
// the root it uses, so a group consuming through a view keeps its offsets at
// /meta-view-hf/consumers/<group>/offsets/..., not under /meta. The offsets
// are byte offsets that are identical on every replica, so they are valid
// whichever copy the view points at, and the switch between replica and
// master loses nothing (at-least-once: a switch re-reads at most what was
// consumed since the last offset commit). All members of one group must use
// the same root; a group moved onto a view starts from the view's offsets, so
// copy its offset nodes across first when it must not restart
// (registry.SiteView.SeedOffsets does that without overwriting any).
//
// The view's nodes are persistent so that a view survives the bundle that
// wrote it. A site's view lives in that site's own ZooKeeper ensemble (one
// ensemble per site), so it must be kept by a bundle that holds a session to
// it: every bundle gossips its site's ensemble (Meta.ZKConnect, ZKRoot) and
// the sites whose ensembles it reaches now (Meta.Views, SetViewReach; a
// bundle counts its own site's ensemble as reached through a disconnect
// while its session may still be alive, up to the session timeout, since
// the session and its nodes outlive a disconnect), and
// one bundle writes each view at a time (IsViewKeeper): the site's first
// member by name that is not down (alive or suspect) and reaches the
// ensemble, else the first other such member. A suspect member keeps its
// view: another site takes it only once gossip declares the site's
// bundles down. So the view follows its site's health even while all of
// that site's bundles are down. Ensembles lists the gossiped ensembles,
// down members included. Every bundle runs RunViews, which keeps each
// site's view while it is that site's keeper. Through the same sessions a
// master's bundle also registers itself under the real root of every other
// site's ensemble (registry.Registry.Mirror), so a view's real root, and any
// client using that ensemble, finds the current master after a switchover or
// a promotion. A master of an older generation than another that gossip
// knows (stepped down, not yet demoted) is neither a view target nor a read
// route (Replicas).
//
// # Locks
//
// Topology has two mutexes that are never held together: qmu guards the
// queue memberlist's callbacks append to (they run under memberlist's own
// locks and must take nothing else), mu guards the member table and the
// subscribers. refreshMu serialises the metadata refresh; it is held
// across memberlist's UpdateNode, and by Close across memberlist's Leave
// and Shutdown (an UpdateNode after Leave could find this member's own
// node reaped). mu is taken under it only to read the memberlist pointer,
// qmu never, and memberlist's callbacks never take it.
//
// # Lag reports
//
// Reports gives one row per slave group (site, partitions, bytes, messages,
// seconds behind, state ok/lagging/stuck/down) from the masters' gossiped
// summaries, refined by the local LagSource where this bundle is the master.
// ConsumerLag gives each consumer group's backlog per site root for this
// bundle's broker id while it is its master; MergeConsumers adds every
// other broker id's, asked of its current master (CurrentMasters) through a
// LagFetcher. NewLagHandler serves both as JSON
// at /lag, every id's consumer groups when given a fetcher, this bundle's own
// with ?scope=local; Collector exports this bundle's own to Prometheus, and
// `metaq lag` prints them.
package topology
