package registry

import (
	"context"
	"fmt"
)

// Unlisted is the first entry under topics-pub of this registry's own
// topics (those it accepts puts for) that is not a node of its current
// session, "" when every one is. A master calls it to find an entry gone
// behind its back: an old master that stepped down late deletes the nodes
// it owned, and a node this session wrote in its place in one step can
// carry the version the old one had, so DeleteOwned's check-then-delete
// may take the new master's entry; producers then find no partition.
//
// It takes no lock: it reads the registration the last finished write left
// (Registration), so a write waiting on its ensemble does not hold it up.
func (r *Registry) Unlisted(ctx context.Context) (string, error) {
	w := r.written.Load()
	if w == nil {
		return "", nil
	}
	name := BrokerString(r.opts.BrokerID, w.slaveID)
	var paths []string
	for topic, t := range w.topics {
		if t.acceptPublish {
			paths = append(paths, r.paths.TopicsPub()+"/"+topic+"/"+name)
		}
	}
	for _, p := range paths {
		ok, err := r.Owns(ctx, p)
		if err != nil {
			return "", fmt.Errorf("registry: read %s: %w", p, err)
		}
		if !ok {
			return p, nil
		}
	}
	return "", nil
}
