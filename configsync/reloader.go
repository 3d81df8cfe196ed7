package configsync

import (
	"context"
	"sort"

	"metaq/broker/config"
)

// Reloader changes the running broker to a new configuration. The bundle
// supplies it; configsync never touches the broker directly.
//
// Reload is called from one goroutine at a time, after the new file has been
// written to disk. cfg is the validated configuration with the site's overlay
// applied; the Reloader owns it after the call. Reload applies what can change
// in process ([topic=...] sections) and returns what changed, listing in
// RestartKeys the [system]/[zookeeper] keys that only a restart can apply.
// When it returns an error it must leave the running configuration as it was:
// the agent then restores the previous file and reports the error.
// Reload should honour ctx; the agent cancels it on Close.
type Reloader interface {
	Reload(ctx context.Context, cfg *config.Server) (config.Changes, error)
}

// ReloaderFunc adapts a function to the Reloader interface.
type ReloaderFunc func(ctx context.Context, cfg *config.Server) (config.Changes, error)

// Reload calls f(ctx, cfg).
func (f ReloaderFunc) Reload(ctx context.Context, cfg *config.Server) (config.Changes, error) {
	return f(ctx, cfg)
}

// TopicCounter is the optional part of a Reloader that counts the messages
// the site stores per configured topic. With it, the agent refuses a version
// that removes a topic still holding messages unless the version allows it,
// and records the counts in its site state for pushers to check first.
type TopicCounter interface {
	TopicMessages() map[string]int64
}

// nonEmptyRemoved returns, sorted, the topics of counts that hold messages
// and that no section of cfg matches any more.
func nonEmptyRemoved(counts map[string]int64, cfg *config.Server) []string {
	var out []string
	for topic, n := range counts {
		if n <= 0 {
			continue
		}
		if _, ok := cfg.TopicFor(topic); !ok {
			out = append(out, topic)
		}
	}
	sort.Strings(out)
	return out
}
