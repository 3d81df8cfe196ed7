package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/topology"
)

// repairInterval is how often a degraded site asks replicas again for
// damaged ranges they did not give; repairPoll how often it looks for
// damage it has not tried to repair yet, and tries again when the last
// attempt could ask no replica (no master or slave known yet, the receiver
// not connected): that waits on the site's own state, not on a replica, and
// a restarted slave finds its damage before its receiver has reconnected.
var (
	repairInterval = time.Minute
	repairPoll     = 5 * time.Second
)

// repairComponent repairs a site's damaged ranges by itself where it can
// (every bundle runs it): at start, then every repairInterval while the
// store reports damage (every repairPoll while no replica could be asked),
// and within repairPoll of new damage,
//   - a master (configured or promoted, not stepped down) asks each slave of
//     its broker id registered in ZooKeeper or alive in gossip for the lost
//     records;
//   - a slave whose receiver follows its master (connected, the partition
//     not diverged) asks its master, found in gossip or in ZooKeeper: the
//     master never ships a range again, and the slave's log holds the
//     master's records at the master's offsets;
//
// each with RepairFrom (fetched with `get`, verified, written back
// byte-identical). Ranges no replica holds stay reported; `metaq-server
// repair -from` names a replica by hand.
type repairComponent struct {
	b      *Bundle
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	repaired int
	lastErr  string
}

func newRepairComponent() *repairComponent { return &repairComponent{} }

func (c *repairComponent) Name() string { return compRepair }

func (c *repairComponent) Start(ctx context.Context, b *Bundle) error {
	c.mu.Lock() // Status may be asked while the bundle still starts its components
	c.b = b
	c.mu.Unlock()
	c.log = b.log.With("component", "repair")
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// Read once, here: tests set them around a bundle's life, and the loop
	// must not read them while a test restores them.
	interval, poll := repairInterval, min(repairPoll, repairInterval)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(poll)
		defer t.Stop()
		var (
			tried []store.Damage // the damage the last attempt saw
			last  time.Time
			again time.Duration // from last to the next attempt at the same damage
		)
		for {
			// An attempt every repairInterval while damaged (every
			// repairPoll while the last one could ask no replica), and at
			// once when the store finds damage it did not have at the
			// last attempt (a scrub or a get met it).
			d := b.Store.Damaged()
			if r := b.Role(); !r.SteppedDown && len(d) > 0 && (!slices.Equal(d, tried) || time.Since(last) >= again) {
				asked := false
				switch r.Role {
				case siterole.Master:
					asked = c.attempt(ctx)
				case siterole.Slave:
					asked = c.attemptFromMaster(ctx)
				}
				tried, last, again = d, time.Now(), interval
				if !asked {
					again = poll
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// attempt tries every damaged partition against every slave of this
// broker id: those registered in this site's ZooKeeper, and those gossip
// has alive (with one ZooKeeper ensemble per site, as deploy/ lays them
// out, the slave sites register in their own ensembles, not here). It
// reports whether it asked any replica.
func (c *repairComponent) attempt(ctx context.Context) bool {
	b := c.b
	id := b.Config().System.BrokerID
	var (
		replicas []string
		seen     = map[string]bool{}
	)
	addReplica := func(u string) {
		if a := strings.TrimPrefix(u, "meta://"); a != "" && !seen[a] {
			seen[a] = true
			replicas = append(replicas, a)
		}
	}
	var (
		brokers []registry.Broker
		zkErr   error
	)
	if b.Registry != nil {
		brokers, zkErr = b.Registry.Brokers(ctx)
	}
	for _, br := range brokers {
		if br.ID == id {
			for _, u := range br.Slaves {
				addReplica(u)
			}
		}
	}
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		for _, m := range tc.Topology().Members() {
			if !m.Local && m.State == topology.StateAlive && m.Meta.BrokerID == id && m.Meta.Role == topology.RoleSlave {
				addReplica(m.Meta.ServeURL)
			}
		}
	}
	if len(replicas) == 0 {
		if zkErr != nil {
			c.setErr(fmt.Errorf("no slave to repair from: gossip knows none alive, and ZooKeeper: %w", zkErr))
			return false
		}
		c.setErr(errors.New("no slave registered to repair from, and gossip knows none alive"))
		return false
	}
	return c.repairFrom(ctx, replicas, nil)
}

// repairFrom asks replicas, in turn, for the damaged ranges of every
// damaged partition skip does not name (nil: none), logs and counts what
// they repaired, and records what is left. It reports whether it asked any
// replica (skip may have named every partition).
func (c *repairComponent) repairFrom(ctx context.Context, replicas []string, skip func(topic string, partition int) error) bool {
	b := c.b
	type pk struct {
		topic string
		part  int
	}
	parts := map[pk]bool{}
	var (
		errs  []error
		asked bool
	)
	for _, d := range b.Store.Damaged() {
		k := pk{d.Topic, d.Partition}
		if parts[k] {
			continue
		}
		parts[k] = true
		if skip != nil {
			if err := skip(d.Topic, d.Partition); err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", d.Topic, d.Partition, err))
				continue
			}
		}
		for _, addr := range replicas {
			asked = true
			done, err := RepairFrom(ctx, b.Store, addr, d.Topic, d.Partition)
			for _, r := range done {
				c.log.Warn("damaged range repaired from a replica", "role", b.Role().Role.String(), "partition", fmt.Sprintf("%s-%d", r.Topic, r.Partition),
					"from", r.From, "to", r.To, "replica", addr)
			}
			c.mu.Lock()
			c.repaired += len(done)
			c.mu.Unlock()
			if err == nil {
				break
			}
			errs = append(errs, fmt.Errorf("%s-%d from %s: %w", d.Topic, d.Partition, addr, err))
		}
	}
	if len(b.Store.Damaged()) == 0 {
		c.setErr(nil)
		return asked
	}
	c.setErr(errors.Join(errs...))
	return asked
}

// attemptFromMaster repairs a slave's damaged partitions from its master's
// MetaQ port. Only partitions the receiver follows are repaired: there the
// slave's log is the master's, offset for offset (a former master that has
// not yet cut its unreplicated tail, or a diverged partition, holds other
// records at those offsets). It reports whether it asked the master.
func (c *repairComponent) attemptFromMaster(ctx context.Context) bool {
	b := c.b
	id := b.Config().System.BrokerID
	rc := b.receiver()
	if rc == nil {
		c.setErr(errors.New("this slave runs no receiver: not repairing from a master it does not follow"))
		return false
	}
	var st *georeplicator.ReceiverStatus
	if r := rc.Receiver(); r != nil { // nil: the MetaQ method, a consumer copy at the master's offsets
		s := r.Status()
		if !s.Connected {
			c.setErr(errors.New("not connected to the master: repairing once the receiver follows it again"))
			return false
		}
		st = &s
	}
	var (
		masters []string
		seen    = map[string]bool{}
	)
	add := func(u string) {
		if a := strings.TrimPrefix(u, "meta://"); a != "" && !seen[a] {
			seen[a] = true
			masters = append(masters, a)
		}
	}
	if tc := compOf[*topologyComponent](b); tc != nil && tc.Topology() != nil {
		if m, ok := tc.Topology().Master(id); ok {
			add(m.Meta.ServeURL)
		}
	}
	var zkErr error
	if b.Registry != nil {
		var brokers []registry.Broker
		brokers, zkErr = b.Registry.Brokers(ctx)
		for _, br := range brokers {
			if br.ID == id && br.Master != "" {
				add(br.Master)
			}
		}
	}
	if len(masters) == 0 {
		if zkErr != nil {
			c.setErr(fmt.Errorf("no master to repair from: gossip knows none alive, and ZooKeeper: %w", zkErr))
			return false
		}
		c.setErr(errors.New("no master to repair from: none registered, and gossip knows none alive"))
		return false
	}
	return c.repairFrom(ctx, masters, func(topic string, partition int) error {
		if st == nil {
			return nil
		}
		key := "partition " + georeplicator.PartKey(topic, partition) + " diverged"
		for _, d := range st.Diverged {
			if strings.Contains(d, key) {
				return errors.New("replication of this partition diverged from the master's: not repairing it from the master")
			}
		}
		return nil
	})
}

func (c *repairComponent) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.lastErr = ""
		return
	}
	if c.lastErr != err.Error() {
		c.log.Warn("damaged ranges not repaired", "err", err)
	}
	c.lastErr = err.Error()
}

// Status implements StatusReporter.
func (c *repairComponent) Status() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b == nil {
		return map[string]any{"running": false}
	}
	return map[string]any{"repaired": c.repaired, "lastError": c.lastErr, "damaged": len(c.b.Store.Damaged())}
}

func (c *repairComponent) Close() error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	return nil
}
