// Package registry keeps a broker's registration in ZooKeeper exactly as
// MetaQ 1.4.6 lays it out (see ZooKeeper layout in broker/wire/doc.go), and reads what producers, consumers and
// tools need from the same tree (brokers, topic partitions, consumer offsets).
//
// It is the only package that imports github.com/go-zookeeper/zk. The broker
// sees it through a small interface, so most broker tests use a fake.
//
// Session handling: the library buffers only a few session events and drops
// the rest, so a goroutine of ours drains them. When a session expires and a
// new one is established, everything this process registered is created
// again (MetaQ's SessionExpireListener.handleNewSession), because the server
// deleted our ephemeral nodes with the old session. Watches handed out by
// ChildrenW/GetW fire once; their owners re-arm them (OnNewSession tells them
// when a new session began). SessionRegained tells a caller waiting to retry
// that the session is back. A connection whose server does not answer the
// connect request is given up after the session timeout divided by the
// number of servers, as the Java client does (go-zookeeper alone waits 6.7
// session timeouts), and the next server is tried.
//
// With one ensemble per site, Mirror copies a master's registration (read
// with Registration from its own registry) into another site's ensemble
// through a registry of that ensemble, with its replication address and
// generation, and removes it when the broker is no longer master.
//
// All node data is a plain UTF-8 string with no serialisation header, as the
// Java clients' ZkUtils.StringSerializer reads and writes it.
package registry
