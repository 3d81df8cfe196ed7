// Package ctl holds the operator side of metaq-server (see metaServer.sh in broker/wire/doc.go): running the
// server in the background with a pid and log file, stopping it, and the
// commands that talk to a running server (stats over the MetaQ protocol, the
// admin endpoint) or work on its data and ZooKeeper tree offline.
package ctl
