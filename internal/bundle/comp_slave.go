package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/georeplicator"
)

// Replication methods of an async slave.
const (
	methodStream = "stream" // the master's compressed log stream (georeplicator.Receiver)
	methodMetaQ  = "metaq"  // MetaQ's own async-slave method: get as slaveGroup (georeplicator.MetaQPuller)
)

// receiverComponent is the slave side (ModeSlave, async_slave.properties).
// It copies the master with the compressed stream when the master offers
// one (masterAddress is set, or the master publishes
// ids/<brokerId>/replication in ZooKeeper), and otherwise with MetaQ's own
// method, which every MetaQ 1.4.6 master serves. It follows the master's
// ZooKeeper entries and changes method when the master does.
type receiverComponent struct {
	b      *Bundle
	sl     *config.Slave // this receiver's slave configuration, taken at Start
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	method string
	reason string
	r      *georeplicator.Receiver
	p      *georeplicator.MetaQPuller
	master *zkMetaQMaster
	// fellBack: MetaQ's get runs because the stream could not reach the
	// master's replication address (not because the master has none).
	fellBack bool
	// streamOnly: a former master follows the new master only with the
	// stream, which cuts and saves aside the records the new master never
	// had; MetaQ's get would stop at them instead.
	streamOnly bool
	// waitSince is when this receiver began waiting for a master to follow
	// (no method runs: no master node, or a master that publishes no
	// replication address to a stream-only follower); zero once a method
	// runs.
	waitSince time.Time
}

func newReceiverComponent() *receiverComponent { return &receiverComponent{} }

func (c *receiverComponent) Name() string { return compReceiver }

// startsBeforeServing: `stats slave` is answered from the first connection
// on, and replication does not wait for the broker's registration.
func (c *receiverComponent) startsBeforeServing() bool { return true }

func (c *receiverComponent) Start(ctx context.Context, b *Bundle) error {
	sl := b.SlaveConfig()
	if sl == nil {
		return errors.New("replication: this bundle has no slave configuration")
	}
	c.b, c.sl = b, sl
	c.streamOnly = c.streamOnly || b.formerMaster
	if sl.TLSCert != "" && b.Config().Replication.TLSCert == "" && b.Config().Replication.Enable {
		b.Logger().Warn("REPLICATION: this slave dials its master with TLS, but [replication] names no tlsCert/tlsKey/tlsCA: " +
			"once it becomes master (a switchover, a promotion) it serves its log without TLS, which slaves that require TLS cannot follow; set them in this site's overlay")
	}
	dir := filepath.Join(b.Config().System.DataPath, "replication")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	if sl.MasterAddress != "" {
		if err := c.switchTo(methodStream, "masterAddress="+sl.MasterAddress+" is set in "+sl.File); err != nil {
			return err
		}
		sctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		resolve := b.newestMasterResolver(sl.MasterAddress)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			redialOnMove(sctx, redialEvery, func() moveFollower {
				if r := c.Receiver(); r != nil {
					return r
				}
				return nil
			}, resolve)
		}()
		return nil
	}
	if b.Registry == nil {
		return errors.New("replication: ZooKeeper is off and async_slave.properties has no masterAddress")
	}
	sctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.master = newZKMetaQMaster(sctx, b.Registry, b.Config().System.BrokerID)
	method, reason, watch, err := c.decide(ctx, nil)
	if err != nil {
		// ZooKeeper away at start (a site restarted by its unit during an
		// outage): wait for it and the master's entries, as supervise does
		// once running, rather than end the bundle.
		method, watch = "", closedWatch()
		reason = fmt.Sprintf("cannot read the master's entries in ZooKeeper yet (%v)", err)
	}
	if method != "" {
		if err := c.switchTo(method, reason); err != nil {
			cancel()
			return err
		}
	} else {
		c.mu.Lock()
		c.reason = reason // slave-status says why nothing runs
		c.waitSince = time.Now()
		c.mu.Unlock()
		b.Logger().Warn("REPLICATION: "+reason+"; waiting for it", "slave", sl.SlaveID)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.supervise(sctx, watch)
	}()
	return nil
}

// decide reads the master's entries under ids/<brokerId>: the replication
// address means our master with its stream, a master node without it a
// MetaQ master (or ours with [replication] enable=false). watch, when not
// nil and not fired, is kept instead of setting a new one.
func (c *receiverComponent) decide(ctx context.Context, watch registry.Watch) (string, string, registry.Watch, error) {
	r := c.b.Registry
	base := r.Paths().BrokerID(c.b.Config().System.BrokerID)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var kids []string
	var err error
	if watch == nil || fired(watch) {
		kids, watch, err = r.ChildrenW(ctx, base)
		if errors.Is(err, registry.ErrNoNode) {
			var ok bool
			ok, watch, err = r.ExistsW(ctx, base)
			if err == nil && ok {
				watch = closedWatch() // created meanwhile: look again
			}
		}
	} else {
		kids, err = r.Children(ctx, base)
		if errors.Is(err, registry.ErrNoNode) {
			err = nil
		}
	}
	if err != nil {
		return "", "", nil, fmt.Errorf("replication: read %s: %w", base, err)
	}
	switch {
	case slices.Contains(kids, replicationNode):
		return methodStream, "the master publishes its replication address at " + base + "/" + replicationNode, watch, nil
	case slices.Contains(kids, "master") && c.streamOnly:
		return "", "the master at " + base + "/master publishes no replication address (yet): this former master follows its new master only with the stream, which cuts the records the new master never had", watch, nil
	case slices.Contains(kids, "master") && c.b.Config().Replication.SecretFile != "":
		// MetaQ's get proves nothing about the master: with a shared secret
		// the slave copies only from a master that proves it.
		return "", "the master at " + base + "/master publishes no replication address, and [replication] secretFile is set: " +
			"this slave copies only from a master that proves the shared secret, not with MetaQ's get; give the master a replication listener and the same secretFile", watch, nil
	case slices.Contains(kids, "master"):
		return methodMetaQ, "the master at " + base + "/master publishes no replication address (a MetaQ 1.4.6 master, or [replication] enable=false): copying it with MetaQ's get as group " + c.sl.SlaveGroup, watch, nil
	}
	return "", "no master registered at " + base + "/master", watch, nil
}

func fired(w registry.Watch) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}

func closedWatch() registry.Watch {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// unreachableAfter is how many attempts in a row must fail to reach the
// master's published replication address before the slave copies with
// MetaQ's get instead, through the MetaQ port its clients use too (a
// firewall that only lets the MetaQ port through, a master advertising an
// address this site cannot route to).
const unreachableAfter = 3

// reprobeEvery is how often a slave that fell back to MetaQ's get checks
// whether the replication address is reachable again (a variable for tests).
var reprobeEvery = time.Minute

// supervise follows the master's entries. A change of method is confirmed
// after zk.zkSyncTimeMs (as MetaQ's slave waits before acting on the
// master's node), so a master that stops cleanly, removing its replication
// address just before its master node, does not flip the slave to MetaQ's
// method on its way out. Without a master the running method stays: it
// retries by itself. A stream that cannot reach the master's address falls
// back to MetaQ's get, and returns once the address answers again; a
// master that refuses the handshake is reported, never worked around.
func (c *receiverComponent) supervise(ctx context.Context, watch registry.Watch) {
	settle := max(c.b.Config().ZooKeeper.SyncTime, 100*time.Millisecond)
	var lastRead, lastProbe time.Time
	for {
		t := time.NewTimer(2 * time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-watch:
		case <-t.C:
		}
		t.Stop()
		c.mu.Lock()
		cur, r, fellBack := c.method, c.r, c.fellBack
		c.mu.Unlock()
		if r != nil {
			// With a shared secret there is no falling back to MetaQ's get,
			// which authenticates no one: the stream keeps retrying.
			// A master whose MetaQ port refuses too is down, not behind a
			// firewall: MetaQ's get would not reach it either, and the
			// stream receiver, which knows its position in the master's
			// log, is what a promotion of this site needs.
			// Nor for a former master, whose records beyond the new master's
			// promotion only the stream cuts.
			if st := r.Status(); st.DialFailures >= unreachableAfter && c.b.Config().Replication.SecretFile == "" && !c.streamOnly && c.metaqReachable(ctx) {
				reason := fmt.Sprintf("the master's replication address %s cannot be reached from here (%s): copying it with MetaQ's get on its MetaQ port until it can; open that address to this site, or set [replication] listen on the master to one that is",
					r.Tried(), st.LastError)
				c.fallBack(reason)
				lastProbe = time.Now()
				continue
			}
		}
		if !fired(watch) && time.Since(lastRead) < 10*time.Second &&
			!(fellBack && time.Since(lastProbe) >= reprobeEvery) {
			continue
		}
		lastRead = time.Now()
		changed := fired(watch)
		method, reason, w, err := c.decide(ctx, watch)
		if err != nil {
			if ctx.Err() == nil {
				c.b.Logger().Warn("REPLICATION: cannot read the master's entries", "err", err)
			}
			watch = closedWatch()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		watch = w
		if changed && method == methodStream && cur == methodStream && r != nil && !r.Status().Connected {
			// The master's entries changed (a promoted site published its
			// replication address): try it now, not after the backoff.
			r.Redial()
		}
		if method == methodStream && fellBack {
			// A changed entry (a new master's address) is probed at once.
			if time.Since(lastProbe) < reprobeEvery && !changed {
				continue
			}
			lastProbe = time.Now()
			if !c.streamReachable(ctx) {
				continue
			}
			reason = "the master's replication address answers again"
			cur = "" // switch back without waiting
		}
		if method == "" || (method == cur && !(method == methodStream && fellBack)) {
			continue
		}
		if cur != "" {
			select {
			case <-ctx.Done():
				return
			case <-time.After(settle):
			}
			m2, r2, w2, err := c.decide(ctx, watch)
			if err != nil {
				continue
			}
			watch = w2
			if m2 != method {
				continue
			}
			reason = r2
		}
		if err := c.switchTo(method, reason); err != nil {
			c.b.Logger().Error("REPLICATION: cannot start the "+method+" method", "err", err)
		}
	}
}

// fallBack replaces a stream that cannot reach the master with MetaQ's get.
func (c *receiverComponent) fallBack(reason string) {
	if err := c.switchTo(methodMetaQ, reason); err != nil {
		c.b.Logger().Error("REPLICATION: cannot start the "+methodMetaQ+" method", "err", err)
		return
	}
	c.mu.Lock()
	c.fellBack = true
	c.mu.Unlock()
	c.b.Logger().Warn("REPLICATION: " + reason)
}

// metaqReachable reports whether the master's MetaQ port (its meta:// url
// in ZooKeeper) accepts a TCP connection.
func (c *receiverComponent) metaqReachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addr, err := c.master.Addr(ctx)
	if err != nil {
		return false
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// streamReachable reports whether the published replication address
// accepts a TCP connection.
func (c *receiverComponent) streamReachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addr, err := zkMasterResolver(c.b.Registry, c.b.Config().System.BrokerID).MasterAddr(ctx)
	if err != nil {
		return false
	}
	dial := c.b.opts.ReplicationDialer
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// switchTo stops the running method and starts another.
func (c *receiverComponent) switchTo(method, reason string) error {
	b, sl := c.b, c.sl
	c.mu.Lock()
	oldR, oldP := c.r, c.p
	c.r, c.p = nil, nil
	c.mu.Unlock()
	if oldR != nil {
		oldR.Close()
	}
	if oldP != nil {
		oldP.Close()
	}
	log := b.Logger()
	var lines func() []string
	switch method {
	case methodStream:
		r, err := c.newReceiver()
		if err != nil {
			return err
		}
		if err := r.Start(); err != nil {
			return err
		}
		c.mu.Lock()
		c.r = r
		c.mu.Unlock()
		lines = r.StatsLines
	case methodMetaQ:
		mo := georeplicator.MetaQOptions{
			Sink:     b.Store,
			Master:   c.master,
			Group:    sl.SlaveGroup,
			SlaveID:  sl.SlaveID,
			MaxDelay: sl.SlaveMaxDelay,
			Logger:   log,
		}
		if sl.AutoSyncMasterConfig && !configSyncOwnsConfig(b) {
			mo.OnMasterConfig = func(ctx context.Context, data []byte) error { return syncMasterConfig(ctx, b, data) }
		}
		p, err := georeplicator.NewMetaQPuller(mo)
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		c.mu.Lock()
		c.p = p
		c.mu.Unlock()
		lines = p.StatsLines
	}
	c.mu.Lock()
	c.method, c.reason, c.fellBack, c.waitSince = method, reason, false, time.Time{}
	c.mu.Unlock()
	b.slave.set(func() []string {
		return append([]string{"method " + method, "method_reason " + reason}, lines()...)
	})
	log.Info("REPLICATION: slave method "+method, "why", reason)
	return nil
}

func (c *receiverComponent) newReceiver() (*georeplicator.Receiver, error) {
	b, sl := c.b, c.sl
	cfg := b.Config()
	var res georeplicator.Resolver
	if sl.MasterAddress != "" {
		res = b.newestMasterResolver(sl.MasterAddress)
	} else {
		res = b.zkThenGossipResolver(cfg.System.BrokerID)
	}
	var mode georeplicator.Mode
	if sl.Compression != "" {
		m, err := georeplicator.ParseMode(sl.Compression)
		if err != nil {
			return nil, err
		}
		mode = m
	}
	id, err := b.identity()
	if err != nil {
		return nil, err
	}
	secrets, err := ReplicationSecrets(cfg)
	if err != nil {
		return nil, err
	}
	var secret []byte
	if len(secrets) > 0 {
		secret = secrets[0] // a slave proves with its current secret only
	}
	opts := georeplicator.ReceiverOptions{
		Identity:             id,
		OnPromote:            b.promoteOnHandover,
		Secret:               secret,
		Sink:                 b.Store,
		Resolver:             res,
		BrokerID:             cfg.System.BrokerID,
		SlaveID:              sl.SlaveID,
		Group:                sl.SlaveGroup,
		MaxDelay:             sl.SlaveMaxDelay,
		Compression:          mode,
		BandwidthBytesPerSec: sl.BandwidthBytesPerSec,
		CheckpointFile:       filepath.Join(cfg.System.DataPath, "replication", "slave.checkpoint"),
		Logger:               b.Logger(),
		Dial:                 b.opts.ReplicationDialer,
	}
	if sl.TLSCert != "" || sl.TLSCA != "" {
		tc, err := georeplicator.ClientTLS(sl.TLSCert, sl.TLSKey, sl.TLSCA, "")
		if err != nil {
			return nil, err
		}
		opts.TLS = tc
	}
	if sl.AutoSyncMasterConfig && !configSyncOwnsConfig(b) {
		opts.AutoSyncMasterConfig = true
		opts.OnMasterConfig = func(ctx context.Context, data []byte) error {
			return syncMasterConfig(ctx, b, data)
		}
	}
	return georeplicator.NewReceiver(opts)
}

// Receiver returns the running stream receiver (nil while the MetaQ method
// runs, before Start or after Close).
func (c *receiverComponent) Receiver() *georeplicator.Receiver {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r
}

// waiting reports whether no method runs because this receiver waits for
// a master to follow, and since when (a demoted former master whose new
// master has no replication address in this site's ZooKeeper, or no
// master node at all).
func (c *receiverComponent) waiting() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitSince, c.r == nil && c.p == nil && !c.waitSince.IsZero()
}

// linkStatus is what the dead-master rule (siterole.FenceDeadMaster) and a
// promotion know of this receiver's link to its master: the stream
// receiver's status; for a receiver that waits for a master to follow
// (waiting), a status that never heard from a master since it began
// waiting (Started), so that its silence counts from then as a stream
// receiver's that never heard from one does. ok is false while the MetaQ
// method runs (it knows no position in the master's log) or nothing runs
// for another reason.
func (c *receiverComponent) linkStatus() (st georeplicator.ReceiverStatus, ok bool) {
	if r := c.Receiver(); r != nil {
		return r.Status(), true
	}
	if since, ok := c.waiting(); ok {
		return georeplicator.ReceiverStatus{Started: since}, true
	}
	return georeplicator.ReceiverStatus{}, false
}

// Method returns the method in use ("" while none runs) and why.
func (c *receiverComponent) Method() (string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.method, c.reason
}

// Connected reports whether the running method currently reaches the master.
func (c *receiverComponent) Connected() bool {
	c.mu.Lock()
	r, p := c.r, c.p
	c.mu.Unlock()
	switch {
	case r != nil:
		return r.Status().Connected
	case p != nil:
		return p.Status().Connected
	}
	return false
}

func (c *receiverComponent) Close() error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.mu.Lock()
	r, p, b := c.r, c.p, c.b
	c.r, c.p = nil, nil
	c.method = ""
	c.mu.Unlock()
	if b != nil {
		b.slave.set(nil)
	}
	var err error
	if r != nil {
		err = r.Close()
	}
	if p != nil {
		err = errors.Join(err, p.Close())
	}
	if c.master != nil {
		c.master.wait()
	}
	return err
}

// SlaveReport is slave-status: the method in use, why, and that method's
// status (Stream or MetaQ). As JSON the status's fields are at the top
// level, next to Method and MethodReason.
type SlaveReport struct {
	Method       string
	MethodReason string
	Stream       *georeplicator.ReceiverStatus
	MetaQ        *georeplicator.MetaQStatus
}

// MarshalJSON flattens the running method's status into the report.
func (r SlaveReport) MarshalJSON() ([]byte, error) {
	var st any = map[string]any{"Running": false}
	switch {
	case r.Stream != nil:
		st = r.Stream
	case r.MetaQ != nil:
		st = r.MetaQ
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	m["Method"], m["MethodReason"] = r.Method, r.MethodReason
	return json.Marshal(m)
}

// SlaveStatus answers slave-status with a SlaveReport.
func (c *receiverComponent) SlaveStatus() any {
	c.mu.Lock()
	r, p := c.r, c.p
	rep := SlaveReport{Method: c.method, MethodReason: c.reason}
	c.mu.Unlock()
	switch {
	case r != nil:
		st := r.Status()
		rep.Stream = &st
		if moved := c.sl.MasterAddress; moved != "" && st.MasterAddr != "" && st.MasterAddr != moved {
			// The reason names the address the slave started with; after
			// a switchover or a promotion it follows the new master.
			rep.MethodReason += fmt.Sprintf("; the master has moved since: following %s, the current master", st.MasterAddr)
		}
	case p != nil:
		st := p.Status()
		rep.MetaQ = &st
	}
	return rep
}

// Status is the same report for /status.
func (c *receiverComponent) Status() any { return c.SlaveStatus() }

// zkThenGossipResolver reads the master's replication address from this
// site's ZooKeeper (zkMasterResolver) and, when that read fails (the
// ensemble is down or cut off, or the new master has not written its
// address there yet: with one ensemble per site it writes it in the
// ensembles it reaches), takes the replication address gossip names for
// the master of the newest generation, unless this site already knows a
// newer generation. A former master demoted at run time (a switchover, a
// promotion elsewhere) has no masterAddress and finds its master this way.
func (b *Bundle) zkThenGossipResolver(brokerID int) georeplicator.Resolver {
	zk := zkMasterResolver(b.Registry, brokerID)
	return georeplicator.ResolverFunc(func(ctx context.Context) (string, error) {
		addr, err := zk.MasterAddr(ctx)
		if err == nil {
			return addr, nil
		}
		tc := compOf[*topologyComponent](b)
		if tc == nil || tc.Topology() == nil {
			return "", err
		}
		m, ok := tc.Topology().Master(brokerID)
		if !ok || m.Meta.ReplAddr == "" {
			return "", err
		}
		if id, ierr := b.identity(); ierr == nil && m.Meta.Generation < id.Generation() {
			return "", err
		}
		return m.Meta.ReplAddr, nil
	})
}

// zkMasterResolver reads the master's replication address from ZooKeeper,
// ids/<id>/replication.
func zkMasterResolver(r *registry.Registry, brokerID int) georeplicator.Resolver {
	path := r.Paths().BrokerID(brokerID) + "/" + replicationNode
	return georeplicator.ResolverFunc(func(ctx context.Context) (string, error) {
		data, _, err := r.Get(ctx, path)
		if err != nil || len(data) == 0 {
			return "", fmt.Errorf("replication: the master of broker %d publishes no replication address at %s: %w", brokerID, path, err)
		}
		return string(data), nil
	})
}
