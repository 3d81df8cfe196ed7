package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// ensureMasterPubLocked makes path, this master's entry of topic under
// topics-pub, an ephemeral node of this session holding data, as
// ensureEphemeral does. When writing it changes the topic's children (the
// entry was missing, or another session's: this brokerId's master changed),
// the same multi deletes the entries of the other brokerIds whose master a
// newer generation superseded (supersededSiblingsLocked).
//
// Why: MetaQ 1.4.6's Java producer, on every change of those children,
// reads the master node of every <id>-m listed and waits up to 10 s for
// each on ZooKeeper's event thread (ProducerZooKeeper.syncedUpdateBrokersInfo,
// awaitReadyInterrupt). When a whole site is lost and its brokerIds are
// promoted one by one, the first promotion's change made it wait 10 s for
// the dead master the second one was about to replace. Left out, that
// brokerId's partitions are not offered until its new master registers
// (which lists them again); a superseded master acknowledges nothing
// anyway, so no put it could have taken is lost to the producer.
func (r *Registry) ensureMasterPubLocked(ctx context.Context, topic, path string, data []byte) error {
	_, st, err := r.Get(ctx, path)
	var ops []any
	switch {
	case errors.Is(err, ErrNoNode):
		ops = []any{&zk.CreateRequest{Path: path, Data: data, Acl: openACL, Flags: zk.FlagEphemeral}}
	case err != nil:
		return err
	case st.EphemeralOwner == r.conn.SessionID():
		return r.ensureEphemeral(ctx, path, data) // the children do not change
	default:
		ops = []any{&zk.DeleteRequest{Path: path, Version: st.Version},
			&zk.CreateRequest{Path: path, Data: data, Acl: openACL, Flags: zk.FlagEphemeral}}
	}
	stale, err := r.supersededSiblingsLocked(ctx, topic)
	if err != nil {
		return err
	}
	if len(stale) == 0 {
		return r.ensureEphemeral(ctx, path, data)
	}
	names := make([]string, 0, len(stale))
	for _, s := range stale {
		ops = append(ops, &zk.DeleteRequest{Path: s.path, Version: s.version})
		names = append(names, s.name)
	}
	err = r.call(ctx, func() error {
		_, err := r.conn.Multi(ops...)
		return err
	})
	switch {
	case err == nil:
		r.log.Warn("REGISTRY: left out of the topic's publishers the masters a newer generation superseded, which their new masters list again when they register",
			"topic", topic, "entry", BrokerString(r.opts.BrokerID, r.opts.SlaveID), "leftOut", names)
		return nil
	case errors.Is(err, ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, ErrNodeExists):
		// Something moved meanwhile (a sibling's new master registered):
		// write this entry alone.
		return r.ensureEphemeral(ctx, path, data)
	default:
		return fmt.Errorf("registry: write %s leaving out superseded masters %v: %w", path, names, err)
	}
}

// staleEntry is another brokerId's master entry under topics-pub that
// ensureMasterPubLocked deletes.
type staleEntry struct {
	name, path string
	version    int32
}

// supersededSiblingsLocked lists topic's entries <id>-m under topics-pub,
// of brokerIds other than this registry's, whose master is superseded in
// this ensemble: its master node ids/<id>/master was created before
// ids/<id>/generation was last raised (its holder registered at an older
// generation: a master killed or paused while a slave site was promoted,
// whose session has not expired), and the entry belongs to the same
// session as that node. A master registered at the current generation
// created its node after the raise, so it is never listed.
func (r *Registry) supersededSiblingsLocked(ctx context.Context, topic string) ([]staleEntry, error) {
	dir := r.paths.TopicsPub() + "/" + topic
	kids, err := r.Children(ctx, dir)
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list %s: %w", dir, err)
	}
	var out []staleEntry
	for _, k := range kids {
		id, slaveID, ok := ParseBrokerString(k)
		if !ok || slaveID >= 0 || id == r.opts.BrokerID {
			continue
		}
		ok, mst, err := r.Exists(ctx, r.paths.Broker(id, -1))
		if err != nil {
			return nil, fmt.Errorf("registry: read the master node of broker %d: %w", id, err)
		}
		if !ok || mst.EphemeralOwner == 0 || mst.EphemeralOwner == r.conn.SessionID() {
			continue
		}
		ok, gst, err := r.Exists(ctx, r.paths.GenerationPath(id))
		if err != nil {
			return nil, fmt.Errorf("registry: read the generation of broker %d: %w", id, err)
		}
		if !ok || gst.Mzxid <= mst.Czxid {
			continue
		}
		path := dir + "/" + k
		ok, pst, err := r.Exists(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("registry: read %s: %w", path, err)
		}
		if !ok || pst.EphemeralOwner != mst.EphemeralOwner {
			continue
		}
		out = append(out, staleEntry{name: k + " (generation raised after its master registered, session 0x" + strconv.FormatInt(mst.EphemeralOwner, 16) + ")", path: path, version: pst.Version})
	}
	return out, nil
}
