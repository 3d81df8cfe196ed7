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
package bundle
