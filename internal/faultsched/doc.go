// Package faultsched runs seeded fault schedules against three sites of the
// deploy/ layout (bj master, hf and gz slaves of brokerId 1; replication
// secret and mutual TLS; one ZooKeeper per site; gossip), each site a
// separate metaq-server process started with the systemd unit's command,
// and checks the outcome with a checker that reads only the workload's
// history and what the sites serve once every fault is healed.
//
// The parts, one job each:
//
//   - layout.go: the files, written by deploy/local-three-sites.sh layout,
//     with the ZooKeeper and replication addresses pointed at the link
//     proxies and the schedule's short timeouts and topics;
//   - linkproxy.go: a TCP proxy in front of each site's replication
//     listener and each site's ZooKeeper that tells which site dialed it
//     (from /proc) and so cuts, slows or stalls one pair of sites (a
//     site's connection to another site's ZooKeeper is the pair of the two
//     sites), and ones in front of each site's MetaQ port and ZooKeeper for
//     the workload's clients;
//   - cluster.go: the processes (ZooKeeper per site, metaq-server per site)
//     and the operator commands (switchover, promote); disk.go: each site's
//     data filesystem (a tmpfs, as root) to fill, and flipped bytes;
//   - schedule.go: a schedule of faults drawn from a seed, a pure function
//     of the seed and the options, so the same seed replays it;
//   - nemesis.go: applies a schedule to a cluster and logs every fault;
//   - rawclient.go: a MetaQ text-protocol client (put, get, offset) written
//     from the protocol specification, sharing no code with broker/client;
//   - workload.go: producers on both clients, every put's outcome recorded;
//   - checker.go: the checks over the history and the served logs;
//   - run.go: one schedule end to end; report.go: many schedules' totals.
//
// Every link between two sites goes through the proxies: replication,
// gossip (memberlist's TCP through a proxy, its UDP through a datagram
// relay, udpproxy.go), each site's sessions with the other sites'
// ZooKeepers and, with push faults, the NATS gateways; a cut between two
// sites is a partition. A client-cut black-holes the workload's
// connections to one site: its MetaQ port and the Go client's ZooKeeper
// session. SOAK.md beside this file lists the fault kinds, the checks and
// what runs found.
//
// Locks: Links.mu, each proxy's and relay's mu, Cluster.mu, Nemesis.mu and Workload.mu
// are leaves; Links.Close copies the proxies under Links.mu and closes them
// after releasing it.
package faultsched
