package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// slaveStatusTopic is the internal topic a MetaQ sync slave accepts for
// the master's health probes (spec §5.3).
const slaveStatusTopic = "_metaq_slave_status_test"

// handleSync stores a record sent by a synchronous-replication master under
// the master's id (spec §1.14). On a broker that is not a sync receiver it
// answers 503 as a plain MetaQ broker does.
func (b *Broker) handleSync(c *conn, cmd *wire.Sync) {
	if !b.opts.SyncReceiver {
		c.sendResult(wire.StatusServiceUnavailable, txtNoProcessor, cmd.Opaque)
		return
	}
	b.stats.cmdPut.Add(1)
	code, body := b.syncStore(b.ctx, cmd)
	if code != wire.StatusOK {
		b.stats.putFailed.Add(1)
		b.stats.realtime(cmd.Topic, statPutFailed, 1)
	}
	c.sendResult(code, body, cmd.Opaque)
}

func (b *Broker) syncStore(ctx context.Context, cmd *wire.Sync) (int, string) {
	topic, p := cmd.Topic, cmd.Partition
	pid := strconv.Itoa(b.brokerID()) + "-" + strconv.Itoa(int(p))
	if b.isClosed(topic, int(p)) {
		return wire.StatusForbidden, b.putError(topic, p, "Partition["+pid+"] has been closed")
	}
	n := 0
	te := b.topicEntry(topic)
	tc, ok := te.tc, te.ok
	switch {
	case ok:
		n = tc.NumPartitions
	case topic == slaveStatusTopic:
		n = 1
	default:
		return wire.StatusInternalServerError, b.putError(topic, p, "The server do not accept topic "+topic)
	}
	if p < 0 || int(p) >= n {
		return wire.StatusInternalServerError, b.putError(topic, p, "wrong partition "+strconv.Itoa(int(p)))
	}
	if cmd.Checksum != wire.NoChecksum && wire.Checksum(cmd.Body) != cmd.Checksum {
		return wire.StatusInternalServerError, b.putError(topic, p, txtChecksum)
	}
	if ok {
		b.ensureTopic(ctx, topic, te)
	}
	as, err := b.store.Append(ctx, topic, int(p), []store.Message{{ID: cmd.MsgID, Flag: cmd.Flag, Body: cmd.Body}})
	if err != nil {
		b.log.Error("TOPIC("+topic+"): sync append failed", "partition", p, "err", err)
		return wire.StatusInternalServerError, b.putError(topic, p, err.Error())
	}
	b.stats.realtime(topic, statPut, 1)
	b.stats.realtime(topic, statMessageSize, int64(len(cmd.Body)))
	return wire.StatusOK, strconv.FormatInt(cmd.MsgID, 10) + " " + strconv.Itoa(int(p)) + " " + strconv.FormatInt(as[0].Offset, 10)
}

// syncClient is the master side of synchronous replication: one pipelined
// MetaQ-protocol connection to the slave, over which every put is sent as
// `sync` with the id the master chose. Puts to one partition are
// serialised (the id is taken, the record is sent to the slave and stored
// locally under the partition's lock) so ids and offsets rise in the same
// order on both sides.
type syncClient struct {
	b    *Broker
	addr string

	partMu sync.Mutex
	parts  map[string]*sync.Mutex

	failures atomic.Int64 // failed syncs in a row
	degraded atomic.Bool  // unregistered, probing the slave

	mu      sync.Mutex // guards the fields below
	nc      net.Conn
	pending map[int32]chan *wire.Result
	opaque  int32
	closed  bool
	wmu     sync.Mutex // serialises writes on nc
	readers sync.WaitGroup
}

func newSyncClient(b *Broker, addr string) *syncClient {
	return &syncClient{b: b, addr: addr, parts: make(map[string]*sync.Mutex), pending: make(map[int32]chan *wire.Result)}
}

func (s *syncClient) partLock(topic string, p int) *sync.Mutex {
	k := topic + "-" + strconv.Itoa(p)
	s.partMu.Lock()
	defer s.partMu.Unlock()
	m := s.parts[k]
	if m == nil {
		m = &sync.Mutex{}
		s.parts[k] = m
	}
	return m
}

// noteResult counts failed syncs in a row; at SyncFailureThreshold the
// master leaves ZooKeeper and starts probing the slave (spec §5.3).
func (s *syncClient) noteResult(ok bool) {
	if ok {
		s.failures.Store(0)
		return
	}
	if s.failures.Add(1) < int64(s.b.opts.SyncFailureThreshold) {
		return
	}
	if !s.degraded.CompareAndSwap(false, true) {
		return
	}
	s.b.log.Error("SYNC: slave keeps failing; unregistering from ZooKeeper until it answers again",
		"slave", s.addr, "failures", s.failures.Load())
	if !s.b.goFunc(s.probeLoop) {
		s.degraded.Store(false)
	}
}

// probeLoop unregisters the broker, then sends a probe sync every
// SyncProbeInterval until the slave stores one, and registers again.
func (s *syncClient) probeLoop() {
	b := s.b
	if r := b.opts.Registry; r != nil {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		if err := r.UnregisterAll(ctx); err != nil {
			b.log.Warn("SYNC: unregister failed", "err", err)
		}
		cancel()
		b.forgetRegistrations()
	}
	body := []byte("test")
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(b.opts.SyncProbeInterval):
		}
		err := s.send(b.ctx, &wire.Sync{Topic: slaveStatusTopic, Partition: 0, MsgID: b.ids.next(), Checksum: wire.Checksum(body), Body: body})
		if err != nil {
			continue
		}
		b.log.Info("SYNC: slave answers again; registering", "slave", s.addr)
		s.failures.Store(0)
		if r := b.opts.Registry; r != nil {
			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			if err := r.RegisterBroker(ctx); err != nil {
				b.log.Warn("SYNC: register failed", "err", err)
			}
			b.registerConfiguredTopics(ctx, b.cfg.Load())
			cancel()
		}
		s.degraded.Store(false)
		return
	}
}

// errSlaveDisconnected is MetaQ's text, trailing space included.
var errSlaveDisconnected = errors.New("Slave is disconnected ")

// putReplicated stores a message locally and on the slave. slaveErr tells
// whether err is the slave's failure (its text is then the answer body).
func (s *syncClient) putReplicated(ctx context.Context, topic string, p int, flag int32, body []byte) (store.Appended, bool, error) {
	mu := s.partLock(topic, p)
	mu.Lock()
	defer mu.Unlock()
	id := s.b.ids.next()
	slaveDone := make(chan error, 1)
	go func() {
		slaveDone <- s.send(ctx, &wire.Sync{Topic: topic, Partition: int32(p), Flag: flag, MsgID: id, Checksum: wire.Checksum(body), Body: body})
	}()
	as, lerr := s.b.store.Append(ctx, topic, p, []store.Message{{ID: id, Flag: flag, Body: body}})
	serr := <-slaveDone
	s.noteResult(serr == nil)
	if serr != nil {
		s.b.log.Warn("SYNC: slave did not store the message", "slave", s.addr, "topic", topic, "partition", p, "err", serr)
		if errors.Is(serr, errSlaveDisconnected) {
			return store.Appended{}, true, serr
		}
		return store.Appended{}, true, fmt.Errorf("Put message to [slave 'meta://%s'] [partition '%s-%d'] failed", s.addr, topic, p)
	}
	if lerr != nil {
		return store.Appended{}, false, lerr
	}
	return as[0], false, nil
}

// send sends one sync and waits for the slave's 200.
func (s *syncClient) send(ctx context.Context, cmd *wire.Sync) error {
	ch := make(chan *wire.Result, 1)
	nc, err := s.register(cmd, ch)
	if err != nil {
		return err
	}
	defer s.unregister(cmd.Opaque)
	timeout := s.b.opts.SyncTimeout
	s.wmu.Lock()
	nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err = nc.Write(cmd.AppendTo(nil))
	s.wmu.Unlock()
	if err != nil {
		s.drop(nc, err)
		return fmt.Errorf("broker: sync to %s: %w", s.addr, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r == nil {
			return errSlaveDisconnected
		}
		if !r.OK() {
			return fmt.Errorf("broker: slave answered %d %s", r.Code, r.Body)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("broker: sync to %s timed out after %v", s.addr, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// register takes an opaque for cmd and returns the connection, dialling it
// if needed.
func (s *syncClient) register(cmd *wire.Sync, ch chan *wire.Result) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errSlaveDisconnected
	}
	if s.nc == nil {
		nc, err := net.DialTimeout("tcp", s.addr, s.b.opts.SyncTimeout)
		if err != nil {
			s.b.log.Warn("SYNC: cannot connect to slave", "slave", s.addr, "err", err)
			return nil, errSlaveDisconnected
		}
		s.b.log.Info("SYNC: connected to slave", "slave", s.addr)
		s.nc = nc
		s.readers.Add(1)
		go s.readLoop(nc)
	}
	s.opaque++
	cmd.Opaque = s.opaque
	s.pending[cmd.Opaque] = ch
	return s.nc, nil
}

func (s *syncClient) unregister(op int32) {
	s.mu.Lock()
	delete(s.pending, op)
	s.mu.Unlock()
}

func (s *syncClient) readLoop(nc net.Conn) {
	defer s.readers.Done()
	d := wire.NewDecoder(bufio.NewReader(nc))
	for {
		cmd, err := d.Decode()
		if err != nil {
			s.drop(nc, err)
			return
		}
		r, ok := cmd.(*wire.Result)
		if !ok {
			continue
		}
		s.mu.Lock()
		ch := s.pending[r.Opaque]
		delete(s.pending, r.Opaque)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// drop forgets a broken connection and fails every request pending on it.
func (s *syncClient) drop(nc net.Conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nc {
		return
	}
	if !s.closed {
		s.b.log.Warn("SYNC: lost connection to slave", "slave", s.addr, "err", err)
	}
	nc.Close()
	s.nc = nil
	for op, ch := range s.pending {
		ch <- nil
		delete(s.pending, op)
	}
}

func (s *syncClient) close() {
	s.mu.Lock()
	s.closed = true
	nc := s.nc
	s.mu.Unlock()
	if nc != nil {
		s.drop(nc, errors.New("closed"))
	}
	s.readers.Wait()
}
