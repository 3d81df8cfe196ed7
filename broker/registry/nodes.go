package registry

import (
	"context"
	"errors"
	"strings"

	"github.com/go-zookeeper/zk"
)

var openACL = zk.WorldACL(zk.PermAll)

// Stat is the part of a znode's metadata callers need.
type Stat struct {
	// EphemeralOwner is the session that owns an ephemeral node, 0 for a persistent one.
	EphemeralOwner int64
	// Version is the data version, for conditional writes.
	Version int32
	// NumChildren is the number of children.
	NumChildren int32
	// Cversion counts the creations and deletions of children.
	Cversion int32
	// Czxid is the ZooKeeper transaction that created the node (creations
	// in one ensemble are ordered by it).
	Czxid int64
	// Mzxid is the ZooKeeper transaction that last changed its data.
	Mzxid int64
}

func toStat(s *zk.Stat) Stat {
	if s == nil {
		return Stat{}
	}
	return Stat{EphemeralOwner: s.EphemeralOwner, Version: s.Version, NumChildren: s.NumChildren, Cversion: s.Cversion, Czxid: s.Czxid, Mzxid: s.Mzxid}
}

// Watch fires once: it is closed when the watched node or its children
// change, the session is lost, or the registry closes.
type Watch <-chan struct{}

func (r *Registry) watch(ch <-chan zk.Event) Watch {
	out := make(chan struct{})
	r.wg.Add(1)
	go func() {
		// The library always delivers one event on a watch channel, also when
		// the connection closes, so this goroutine ends.
		defer r.wg.Done()
		<-ch
		close(out)
	}()
	return out
}

// Get returns a node's data (ErrNoNode when absent).
func (r *Registry) Get(ctx context.Context, path string) ([]byte, Stat, error) {
	var data []byte
	var st *zk.Stat
	err := r.call(ctx, func() (err error) { data, st, err = r.conn.Get(path); return })
	if err != nil {
		// On a cancelled ctx the call may still be writing data and st.
		return nil, Stat{}, err
	}
	return data, toStat(st), nil
}

// GetW is Get plus a watch on the node's data and existence.
func (r *Registry) GetW(ctx context.Context, path string) ([]byte, Watch, error) {
	var data []byte
	var ch <-chan zk.Event
	err := r.call(ctx, func() (err error) { data, _, ch, err = r.conn.GetW(path); return })
	if err != nil {
		return nil, nil, err
	}
	return data, r.watch(ch), nil
}

// Exists reports whether a node exists.
func (r *Registry) Exists(ctx context.Context, path string) (bool, Stat, error) {
	var ok bool
	var st *zk.Stat
	err := r.call(ctx, func() (err error) { ok, st, err = r.conn.Exists(path); return })
	if err != nil {
		return false, Stat{}, err
	}
	return ok, toStat(st), nil
}

// ExistsW is Exists plus a watch that fires when the node is created,
// changed or deleted.
func (r *Registry) ExistsW(ctx context.Context, path string) (bool, Watch, error) {
	var ok bool
	var ch <-chan zk.Event
	err := r.call(ctx, func() (err error) { ok, _, ch, err = r.conn.ExistsW(path); return })
	if err != nil {
		return false, nil, err
	}
	return ok, r.watch(ch), nil
}

// Children lists a node's children in the server's order (ErrNoNode when absent).
func (r *Registry) Children(ctx context.Context, path string) ([]string, error) {
	var kids []string
	err := r.call(ctx, func() (err error) { kids, _, err = r.conn.Children(path); return })
	if err != nil {
		return nil, err
	}
	return kids, nil
}

// ChildrenW is Children plus a watch on the set of children.
func (r *Registry) ChildrenW(ctx context.Context, path string) ([]string, Watch, error) {
	var kids []string
	var ch <-chan zk.Event
	err := r.call(ctx, func() (err error) { kids, _, ch, err = r.conn.ChildrenW(path); return })
	if err != nil {
		return nil, nil, err
	}
	return kids, r.watch(ch), nil
}

// EnsurePath creates path and its missing parents as persistent empty nodes.
func (r *Registry) EnsurePath(ctx context.Context, path string) error {
	return r.createParents(ctx, path+"/x")
}

// CreateEphemeral creates an ephemeral node owned by this session, creating
// missing parents as persistent nodes. ErrNodeExists when it exists.
func (r *Registry) CreateEphemeral(ctx context.Context, path string, data []byte) error {
	return r.createEphemeral(ctx, path, data)
}

// SetPersistent writes data into a persistent node, creating it and its
// parents when missing (ZkUtils.updatePersistentPath).
func (r *Registry) SetPersistent(ctx context.Context, path string, data []byte) error {
	err := r.call(ctx, func() error { _, err := r.conn.Set(path, data, -1); return err })
	if !errors.Is(err, ErrNoNode) {
		return err
	}
	if err := r.createParents(ctx, path); err != nil {
		return err
	}
	err = r.call(ctx, func() error { _, err := r.conn.Create(path, data, 0, openACL); return err })
	if errors.Is(err, ErrNodeExists) {
		// Someone created it between our Set and Create: write again.
		return r.call(ctx, func() error { _, err := r.conn.Set(path, data, -1); return err })
	}
	return err
}

// Delete removes a node; a missing node is not an error.
func (r *Registry) Delete(ctx context.Context, path string) error {
	err := r.call(ctx, func() error { return r.conn.Delete(path, -1) })
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	return err
}

// DeleteOwned removes path unless it is an ephemeral node of another
// session: during a change of master two brokers of one brokerId write the
// same paths (ids/<id>/master, its replication address, the topics'
// <id>-m entries), and the one stepping down must not delete what the new
// master has already written there. A missing node is not an error.
func (r *Registry) DeleteOwned(ctx context.Context, path string) error {
	_, st, err := r.Get(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.EphemeralOwner != 0 && st.EphemeralOwner != r.conn.SessionID() {
		return nil
	}
	err = r.call(ctx, func() error { return r.conn.Delete(path, st.Version) })
	if errors.Is(err, ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return nil // gone or rewritten meanwhile: no longer ours to delete
	}
	return err
}

// DeleteTree removes path and everything below it; a missing node is not an
// error.
func (r *Registry) DeleteTree(ctx context.Context, path string) error {
	kids, err := r.Children(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := r.DeleteTree(ctx, path+"/"+k); err != nil {
			return err
		}
	}
	return r.Delete(ctx, path)
}

// createParents creates every missing ancestor of path as a persistent node.
func (r *Registry) createParents(ctx context.Context, path string) error {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := ""
	for _, p := range parts[:len(parts)-1] {
		cur += "/" + p
		// Exists first: on a healthy tree every parent is there, and a read is
		// cheaper for the ensemble than a failed create.
		ok, _, err := r.Exists(ctx, cur)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		err = r.call(ctx, func() error { _, err := r.conn.Create(cur, nil, 0, openACL); return err })
		if err != nil && !errors.Is(err, ErrNodeExists) {
			return err
		}
	}
	return nil
}

func (r *Registry) createEphemeral(ctx context.Context, path string, data []byte) error {
	create := func() error {
		_, err := r.conn.Create(path, data, zk.FlagEphemeral, openACL)
		return err
	}
	err := r.call(ctx, create)
	if !errors.Is(err, ErrNoNode) {
		return err
	}
	if err := r.createParents(ctx, path); err != nil {
		return err
	}
	return r.call(ctx, create)
}

// ensureEphemeral makes path an ephemeral node of this session holding data.
// A node of ours is rewritten; a node left by an older session of this
// broker is replaced.
func (r *Registry) ensureEphemeral(ctx context.Context, path string, data []byte) error {
	for range 3 {
		err := r.createEphemeral(ctx, path, data)
		if !errors.Is(err, ErrNodeExists) {
			return err
		}
		_, st, err := r.Get(ctx, path)
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if st.EphemeralOwner == r.conn.SessionID() {
			err = r.call(ctx, func() error { _, err := r.conn.Set(path, data, -1); return err })
			if errors.Is(err, ErrNoNode) {
				continue
			}
			return err
		}
		// Replaced in one step (delete and create as one multi): a client
		// listing the parent never finds the node missing in between (a
		// topic's master entry during a switchover).
		err = r.call(ctx, func() error {
			_, err := r.conn.Multi(&zk.DeleteRequest{Path: path, Version: st.Version},
				&zk.CreateRequest{Path: path, Data: data, Acl: openACL, Flags: zk.FlagEphemeral})
			return err
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, ErrNodeExists) {
			return err
		}
	}
	return errors.New("registry: node " + path + " keeps changing under us")
}
