package bundle

import (
	"context"

	"metaq/broker/config"
)

// Component is an optional part of the bundle with its own lifecycle, such
// as the async-slave receiver, the config-sync agent, topology or the
// dashboard. Start is called once the store, registry and broker run (the
// component reaches them through the Bundle) and must return once the
// component is running; Close must stop every goroutine it started and be
// idempotent.
type Component interface {
	Name() string
	Start(ctx context.Context, b *Bundle) error
	Close() error
}

// Reloader is implemented by components that re-apply a reloaded server.ini
// (SIGHUP, `metaq-server reload`, the admin endpoint, config sync). Reload is
// called after the broker accepted the new configuration.
type Reloader interface {
	Reload(ctx context.Context, cfg *config.Server, changes config.Changes) error
}

// StatusReporter is implemented by components that add a section to the
// admin /status answer. Status must return quickly; the value is encoded as JSON.
type StatusReporter interface {
	Status() any
}

// SlaveStatusReporter is implemented by the async-slave component; its
// answer is served at /slave-status (MetaQ's SubscribeHandler.getStatus).
type SlaveStatusReporter interface {
	SlaveStatus() any
}

// beforeServing is implemented by built-in components that must run before
// the broker accepts connections and registers in ZooKeeper: the ones that
// answer protocol commands (transactions) and the ones whose znodes a peer
// reads together with the broker's (the replication address).
type beforeServing interface {
	startsBeforeServing() bool
}

func startsBeforeServing(c Component) bool {
	e, ok := c.(beforeServing)
	return ok && e.startsBeforeServing()
}

// orderComponents moves the components that start before serving to the
// front, keeping the order within both groups, so the started ones are
// always a prefix (Close stops them in reverse).
func orderComponents(comps []Component) []Component {
	out := make([]Component, 0, len(comps))
	for _, c := range comps {
		if startsBeforeServing(c) {
			out = append(out, c)
		}
	}
	for _, c := range comps {
		if !startsBeforeServing(c) {
			out = append(out, c)
		}
	}
	return out
}
