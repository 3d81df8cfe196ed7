// Package bundle wires one broker bundle together from a server.ini: the
// store, the MetaQ-protocol broker, the ZooKeeper registry (unless
// zk.zkEnable=false), the admin HTTP endpoint and the optional components
// that later parts of the project add (async-slave replication, config sync,
// topology, dashboard). cmd/metaq-server parses flags and calls Run.
//
// Extending the bundle: implement Component (and optionally Reloader and
// StatusReporter) and add a constructor to the list in components.go, or pass
// components in Options.Components. Components start after the broker is
// serving and stop before it, in reverse order. Admin.Handle adds endpoints
// to the admin server.
//
// Start-up with the ensemble down: with zk.zkEnable=true a bundle, master
// or slave, opens and serves nothing (no store, no MetaQ port, no
// replication, no admin endpoint) until its own ZooKeeper ensemble gives
// it a session (waitForEnsemble). It waits for as long as it takes,
// warning once zk.zkConnectionTimeoutMs has passed and then at doubling
// intervals up to five minutes, with the ensemble and the time waited; a
// SIGTERM or SIGINT meanwhile stops it at once, exit status 0. Nothing is
// served before, because the role a bundle starts in is decided there: a
// master reads its brokerId's generation (and acknowledges no put before
// it has confirmed it), a former master learns it was superseded, a slave
// learns a free slaveId and the master it follows; a slave does not start
// its receiver early either, since the master it would follow may have
// been superseded while the site was away. A connect string whose servers
// all answer MetaQ's protocol is a mistake, not an outage: that still
// fails at once. MetaQ 1.4.6's broker instead gives up after
// zk.zkConnectionTimeoutMs (zkclient's ZkTimeoutException from the
// BrokerZooKeeper constructor) and its JVM stays up serving nothing until
// it is killed.
//
// The site's role (master or slave of its brokerId, the generation) and
// every change of it go through one internal/siterole.Machine, held by the
// roleOwner (failoverState.role), which also starts and stops the shipper
// or receiver a transition runs and answers what runs now (shipper,
// receiver, the slave configuration in effect): Promote, Demote,
// switchover and the fence are the only code that changes it, one
// transition at a time; Bundle.Role is what components read instead of
// the mode the bundle started in. The decisions
// (master lost, candidate, sibling ahead, may acknowledge, follows,
// whether a raise of the generation owns it, what to do about a shared
// generation) are
// siterole's pure functions; this package gathers the facts.
//
// Locks: component mu locks are leaves; roleOwner.mu, failoverState.mu
// and takeoverNotices.mu are leaves (they guard pointers, copied out before any call; components
// start and stop with them released); failoverState.idMu is held
// alone while the identity file is opened. The registry's MasterGuard
// (guardMaster) runs under the registry's regMu and takes none of the
// registry's locks; so does the MasterGuard of each session to another
// site's ensemble (siteViews.mirrorGuard), under that session's regMu: it
// reads the bundle's mirror (leaf locks only: roleOwner.mu,
// failoverState.mu, the role machine's siterole.Machine.mu) and that session's
// generation through its unlocked read (CheckNotSuperseded), and never takes siteViews.mu,
// under which sessions are closed. ackGuard.starting is held alone while the write
// check starts a master's hold of puts (ackguard.go); the write check
// only tries it, the shipper's Close waits for it.
package bundle
