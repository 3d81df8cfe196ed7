package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"
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
	p, _, err := r.unlisted(ctx, false)
	return p, err
}

// UnlistedW is Unlisted plus a watch on every entry it read (one read per
// topic): it fires when one of them is created, changed or deleted, so a
// master learns of an entry gone without reading them again and again.
// With an error the watch is nil.
func (r *Registry) UnlistedW(ctx context.Context) (string, Watch, error) {
	return r.unlisted(ctx, true)
}

func (r *Registry) unlisted(ctx context.Context, watch bool) (string, Watch, error) {
	w := r.written.Load()
	if w == nil {
		return "", nil, nil
	}
	name := BrokerString(r.opts.BrokerID, w.slaveID)
	var ws []Watch
	missing := ""
	for topic, t := range w.topics {
		if !t.acceptPublish {
			continue
		}
		p := r.paths.TopicsPub() + "/" + topic + "/" + name
		var ok bool
		var err error
		if watch {
			var pw Watch
			ok, pw, err = r.OwnsW(ctx, p)
			if err == nil {
				ws = append(ws, pw)
			}
		} else {
			ok, err = r.Owns(ctx, p)
		}
		if err != nil {
			// The watches armed so far end with their events.
			return "", nil, fmt.Errorf("registry: read %s: %w", p, err)
		}
		if !ok && missing == "" {
			missing = p
			if !watch {
				return p, nil, nil
			}
		}
	}
	if !watch {
		return "", nil, nil
	}
	return missing, r.AnyOf(ws...), nil
}

// OwnsW is Owns plus a watch that fires when the node is created, changed
// or deleted.
func (r *Registry) OwnsW(ctx context.Context, path string) (bool, Watch, error) {
	var ok bool
	var st *zk.Stat
	var ch <-chan zk.Event
	err := r.call(ctx, func() (err error) { ok, st, ch, err = r.conn.ExistsW(path); return })
	if err != nil {
		return false, nil, err
	}
	return ok && st != nil && st.EphemeralOwner == r.conn.SessionID(), r.watch(ch), nil
}

// AnyOf is a watch that fires when the first of ws fires; with none it
// never fires. Its goroutines end then (the registry's close fires every
// watch).
func (r *Registry) AnyOf(ws ...Watch) Watch {
	if len(ws) == 1 {
		return ws[0]
	}
	out := make(chan struct{})
	var once sync.Once
	for _, w := range ws {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			select {
			case <-w:
				once.Do(func() { close(out) })
			case <-out:
			}
		}()
	}
	return out
}
