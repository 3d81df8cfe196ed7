package bundle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/broker"
	"metaq/broker/registry"
	"metaq/internal/backoff"
	"metaq/internal/siterole"
)

// replicaHolder is the write gate holder (broker.Broker.RefuseWrites) of a
// bundle that runs as a replica.
const replicaHolder = "replica"

// refuseReplicaWrites makes a replica refuse client writes before its
// broker starts serving: an async slave, or a gregor slave, keeps its
// master's offsets and ids, so a put stored there would make it diverge
// from the master (and stop replication for good). Replication itself (the
// georeplicator's appends, the samsa master's syncs) is not gated.
func (b *Bundle) refuseReplicaWrites(ctx context.Context) {
	var reason string
	switch {
	case b.opts.Mode == ModeGregor:
		reason = "this broker is the synchronous slave of a samsa master and takes no puts; send them to the master"
	case b.failover.role.isSlave():
		reason = slaveRefusal(b.Config().System.BrokerID, false, b.masterName(ctx))
	default:
		return
	}
	b.Broker.RefuseWrites(replicaHolder, broker.Refusal{Reason: reason})
}

// slaveRefusal is the reason a replica's puts are refused: a slave names
// the master it follows now, a former master (demoted) says it is no longer
// master.
func slaveRefusal(brokerID int, demoted bool, master string) string {
	if demoted {
		return fmt.Sprintf("this broker is no longer master of broker %d; it follows the new master %s: send puts there", brokerID, master)
	}
	return "this broker is a slave of broker " + strconv.Itoa(brokerID) + " and takes no puts; send them to its master " + master
}

// masterName names the master this replica follows now, as well as it
// knows it: the meta:// URL the master of its brokerId registered in
// ZooKeeper (a promoted site registers there), else the replication address
// its receiver is connected to (after a failover, the new master's, found
// in ZooKeeper or by gossip), else the master a demotion named, else the
// replication address of async_slave.properties.
func (b *Bundle) masterName(ctx context.Context) string {
	return b.masterNameFor(ctx, b.connectedMaster())
}

// masterNameFor is masterName with the replication address the receiver
// is connected to given ("" = none).
func (b *Bundle) masterNameFor(ctx context.Context, connected string) string {
	path := ""
	if b.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		path = b.Registry.Paths().BrokerID(b.Config().System.BrokerID) + "/master"
		if data, _, err := b.Registry.Get(ctx, path); err == nil && len(data) > 0 {
			return string(data)
		}
	}
	if connected != "" {
		return "(replication address " + connected + ")"
	}
	if m := b.Role().Master; m != "" {
		return m
	}
	if sl := b.SlaveConfig(); sl != nil && sl.MasterAddress != "" {
		return "(replication address " + sl.MasterAddress + ")"
	}
	if path != "" {
		return "(registered at " + path + ")"
	}
	return "(unknown)"
}

// refusalEvery is how often a replica checks which master its put refusal
// should name.
const refusalEvery = 2 * time.Second

// followMasterInRefusal keeps a replica's put refusal naming the master it
// follows now until ctx ends: once the replica follows a master of a newer
// generation than the one its refusal was written for (a failover moved it
// to another master after it started or was demoted), the refusal names the
// master it is connected to; and each time its brokerId's master node in
// ZooKeeper (ids/<brokerId>/master) names another master, the refusal names
// that one (not after a demotion wrote its own, until a newer generation).
// The node is followed because the generation alone may be read
// too early: a slave site follows the new master (found by gossip) before
// the new master registered in its site's ensemble, and the name read then
// was the fenced old master's, kept until the next promotion. It only ever
// rewrites a refusal that is in place (Broker.UpdateRefusal), so a
// promotion that withdrew it is never undone.
func (b *Bundle) followMasterInRefusal(ctx context.Context) {
	tk := time.NewTicker(refusalEvery)
	defer tk.Stop()
	registered := make(chan string, 1) // the master node's latest name
	if b.Registry != nil && b.opts.Mode != ModeGregor {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.watchMasterNode(ctx, registered)
		}()
		defer wg.Wait()
	}
	start := b.Role()
	var (
		since   = start.Since      // the role the refusal was written for
		written = start.Generation // the generation it names the master of
		// following: the refusal names the master ZooKeeper named (at
		// start, or rewritten here), so it follows the master node; not
		// after a transition wrote its own (a demotion names the master
		// it follows) until a newer generation has it rewritten here.
		following = true
	)
	for {
		named := ""
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		case <-b.RoleChanged():
		case named = <-registered:
		}
		role := b.Role()
		if b.opts.Mode == ModeGregor || role.Role != siterole.Slave {
			continue
		}
		if !role.Since.Equal(since) {
			since, written, following = role.Since, role.Generation, false
		}
		if following && named != "" && named != b.Broker.URL() {
			b.Broker.UpdateRefusal(replicaHolder, broker.Refusal{
				Reason: slaveRefusal(b.Config().System.BrokerID, b.demotedReceiver() != nil, named)})
		}
		id := b.failover.openedIdentity()
		addr := b.connectedMaster()
		if id == nil || addr == "" || id.Generation() <= written {
			continue
		}
		gen := id.Generation()
		name := b.masterNameFor(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if b.Broker.UpdateRefusal(replicaHolder, broker.Refusal{
			Reason: slaveRefusal(b.Config().System.BrokerID, b.demotedReceiver() != nil, name)}) {
			written, following = gen, true
		}
	}
}

// watchMasterNode passes the name in this brokerId's master node in
// ZooKeeper to names each time it is read: when the watch is set and at
// every change (names keeps only the latest) until ctx ends. A failed read
// is retried with backoff.
func (b *Bundle) watchMasterNode(ctx context.Context, names chan string) {
	r := b.Registry
	path := r.Paths().Broker(b.Config().System.BrokerID, -1)
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		w, name, err := readMasterNodeW(ctx, r, path)
		if err != nil {
			b.log.Debug("REPLICA: watching the master node for the put refusal failed; trying again", "node", path, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(retry.Next()):
			}
			continue
		}
		retry.Reset()
		if name != "" {
			select { // only this goroutine sends: after the drain there is room
			case <-names:
			default:
			}
			names <- name
		}
		select {
		case <-ctx.Done():
		case <-w:
		}
	}
}

// readMasterNodeW reads the master node at path and watches it (or its
// creation, name ""), so that a change made after the read is not missed.
func readMasterNodeW(ctx context.Context, r *registry.Registry, path string) (registry.Watch, string, error) {
	data, w, err := r.GetW(ctx, path)
	if errors.Is(err, registry.ErrNoNode) {
		ok, ew, err := r.ExistsW(ctx, path)
		if err != nil {
			return nil, "", fmt.Errorf("watch %s: %w", path, err)
		}
		if ok {
			return closedWatch(), "", nil // created meanwhile: read it
		}
		return ew, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", path, err)
	}
	return w, strings.TrimSpace(string(data)), nil
}

// connectedMaster is the replication address this replica's receiver is
// connected to, "" while it is not.
func (b *Bundle) connectedMaster() string {
	if rc := b.receiver(); rc != nil {
		if r := rc.Receiver(); r != nil {
			if st := r.Status(); st.Connected {
				return st.MasterAddr
			}
		}
	}
	return ""
}
