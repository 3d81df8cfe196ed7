package georeplicator

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/store"
	"metaq/internal/backoff"
	"metaq/internal/routines"
)

// DivergedError means the slave holds bytes for a partition that differ from
// the master's at the same offsets, or a gap the master cannot fill.
// Replication of that stream stops (and is retried with backoff) rather than
// writing anything inconsistent; an operator must resolve it.
type DivergedError struct {
	Topic     string
	Partition int
	Offset    int64
	Reason    string
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("georeplicator: partition %s-%d diverged from master at offset %d: %s", e.Topic, e.Partition, e.Offset, e.Reason)
}

// ReceiverStatus is the slave side's state (the slave-status item).
type ReceiverStatus struct {
	Running    bool
	Connected  bool
	MasterAddr string
	// AppliedPos is the master log position applied here; DurablePos the one
	// checkpointed (both -1 before the first entry). MasterPos is the master's
	// durable end as last reported.
	AppliedPos, DurablePos, MasterPos int64
	// Partitions is the number of partitions in the local store (all replicated).
	Partitions int
	// Counters since start.
	Frames, Entries, WireBytes, RawBytes int64
	Corrupt                              int64 // frames dropped for a bad checksum or undecodable payload
	Rewinds                              int64 // in-band re-requests sent
	Reconnects                           int64
	Skipped                              int64 // entries already present (verified identical) after a restart
	Truncated                            bool  // the master had removed our position; streaming restarted at its first entry
	// DialFailures counts the attempts in a row, since the last connection,
	// that could not reach the master's address at all (nothing listens, no
	// route, no answer to the TCP connect); a refused handshake is not one.
	DialFailures int
	Unreplicated int64 // records cut and saved aside: held here, never on the new master (see TailDir)
	// Diverged lists the partitions whose replication stopped because the
	// local bytes do not line up with the master's (one line each); the
	// other partitions go on replicating.
	Diverged []string
	// Skips counts ranges the master lost to disk damage that this replica
	// did not hold either: it continues past them at the master's offsets.
	Skips int64
	Codec string
	// Times that have not happened yet are left out of the JSON
	// (slave-status -json), not printed as Go's zero time.
	LastApply time.Time `json:",omitzero"`
	// Started is when the receiver started; LinkUp is when a link to a
	// master was last up (the end of the last session that reached one,
	// or now while connected is true; zero while none ever did).
	Started     time.Time `json:",omitzero"`
	LinkUp      time.Time `json:",omitzero"`
	LastError   string
	LastErrorAt time.Time `json:",omitzero"`
}

// Receiver is the slave side: it connects to the master, applies the shipped
// log to the local store and keeps a durable cursor. Start, then Close.
type Receiver struct {
	opts   ReceiverOptions
	log    *slog.Logger
	causes *causeLog

	closing  atomic.Bool
	started  atomic.Bool
	routines routines.Group
	ctx      context.Context
	cancel   context.CancelFunc
	// redial wakes run from its backoff (Redial).
	redial chan struct{}

	mu   sync.Mutex // guards the fields below
	conn net.Conn
	// attempt abandons the connection attempt under way (dial, TLS
	// handshake, hello and welcome), nil outside one (Redial).
	attempt context.CancelFunc
	tried   string // the address of the last connection attempt
	st      ReceiverStatus
	applied int64
	durable int64
	// masterLog is the master log applied and durable are positions in.
	masterLog string
	// logSwitched: masterLog changed since the last checkpoint.
	logSwitched bool
	synced      int64 // fsynced in the store (>= durable): see ack.Synced
	// link is the established connection (nil between them); lastLag the
	// master's last lag report (control.go).
	link    *link
	lastLag *LagReport
	// rewindErr: st.LastError is a rewind's cause, cleared by the next
	// batch applied.
	rewindErr bool

	// Partition ends as applied in this session. Written by the apply
	// goroutines of one frame (one per partition), hence endMu.
	endMu   sync.Mutex
	ends    map[pkey]int64
	changed map[pkey]int64
	// diverged partitions are no longer applied (see apply); kept across
	// sessions until the receiver restarts.
	divMu    sync.Mutex
	diverged map[pkey]*DivergedError
	dec      *decoder // owned by the session goroutine

	warned sync.Map // master address -> true: insecure link warning logged
}

// NewReceiver validates opts and reads the checkpoint.
func NewReceiver(opts ReceiverOptions) (*Receiver, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	pos, masterLog, err := loadCheckpoint(opts.CheckpointFile)
	if err != nil {
		return nil, err
	}
	d, err := newDecoder()
	if err != nil {
		return nil, err
	}
	r := &Receiver{opts: opts, applied: pos, durable: pos, synced: pos, masterLog: masterLog, dec: d, redial: make(chan struct{}, 1),
		log: opts.Logger.With("component", "georeplicator", "role", "slave", "slave", fmt.Sprintf("SLAVE(%s/%d)", opts.Group, opts.SlaveID))}
	r.causes = newCauseLog(r.log)
	r.st.AppliedPos, r.st.DurablePos, r.st.MasterPos = pos, pos, -1
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Start begins replicating in the background.
func (r *Receiver) Start() error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("georeplicator: receiver already started")
	}
	r.mu.Lock()
	r.st.Running = true
	r.st.Started = r.opts.Clock.Now()
	r.mu.Unlock()
	r.routines.Go(r.run)
	r.routines.Go(r.checkpointLoop)
	return nil
}

// Close stops replication, waits for its goroutines and writes a final
// checkpoint. Idempotent.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if !r.closing.CompareAndSwap(false, true) {
		r.mu.Unlock()
		return nil
	}
	r.routines.Stop()
	if r.conn != nil {
		r.conn.Close()
	}
	r.st.Running = false
	r.mu.Unlock()
	r.cancel()
	r.routines.Wait()
	err := r.checkpointNow()
	r.dec.Close()
	return err
}

// Status returns a snapshot of the slave's state.
func (r *Receiver) Status() ReceiverStatus {
	r.mu.Lock()
	st := r.st
	r.mu.Unlock()
	if st.Connected {
		st.LinkUp = r.opts.Clock.Now()
	}
	r.divMu.Lock()
	for _, d := range r.diverged {
		st.Diverged = append(st.Diverged, d.Error())
	}
	r.divMu.Unlock()
	slices.Sort(st.Diverged)
	st.Partitions = len(r.opts.Sink.Partitions())
	return st
}

// StatsLines renders Status for the broker's `stats slave` item on a slave,
// one "name value" per line as MetaQ's stats items are.
func (r *Receiver) StatsLines() []string {
	st := r.Status()
	le := st.LastError
	if le == "" {
		le = "-"
	}
	return []string{
		fmt.Sprintf("slave_group %s", r.opts.Group),
		fmt.Sprintf("slave_id %d", r.opts.SlaveID),
		fmt.Sprintf("running %t", st.Running),
		fmt.Sprintf("connected %t", st.Connected),
		fmt.Sprintf("master %s", orDash(st.MasterAddr)),
		fmt.Sprintf("partitions %d", st.Partitions),
		fmt.Sprintf("applied %d", st.AppliedPos),
		fmt.Sprintf("durable %d", st.DurablePos),
		fmt.Sprintf("master_durable %d", st.MasterPos),
		fmt.Sprintf("lag_bytes %d", max(0, st.MasterPos-st.AppliedPos)),
		fmt.Sprintf("frames %d", st.Frames),
		fmt.Sprintf("wire_bytes %d", st.WireBytes),
		fmt.Sprintf("raw_bytes %d", st.RawBytes),
		fmt.Sprintf("corrupt_frames %d", st.Corrupt),
		fmt.Sprintf("reconnects %d", st.Reconnects),
		fmt.Sprintf("diverged_partitions %d", len(st.Diverged)),
		fmt.Sprintf("last_error %s", le),
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Redial makes a receiver waiting to reconnect try again now, with its
// backoff reset: the master's address changed (a promoted site published
// its own), and the failures to reach the old one say nothing about the
// new one. Without it a slave site could wait out up to BackoffMax before
// following a new master, and a synchronous topic there stays refused
// until a slave site follows. It also abandons an attempt under way that is
// not yet welcomed: the address it went to may be the old master's, and a
// paused master accepts the connection (its kernel does) and never answers
// the handshake, which would hold the receiver for DialTimeout. A call
// while connected is kept for the next wait.
func (r *Receiver) Redial() {
	select {
	case r.redial <- struct{}{}:
	default:
	}
	r.mu.Lock()
	abort, addr := r.attempt, r.tried
	r.mu.Unlock()
	if abort != nil {
		r.log.Info("REPLICATION: the master's address may have changed: abandoning the connection attempt under way", "addr", addr)
		abort()
	}
}

// Tried returns the address the last connection attempt went to.
func (r *Receiver) Tried() string { return r.lastAddr() }

// lastAddr is the address the last connection attempt went to.
func (r *Receiver) lastAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tried
}

// clearErrLocked forgets the last error once the link works again, so
// that Status and `stats slave` do not show a recovered slave as failing.
func (r *Receiver) clearErrLocked() {
	r.st.LastError, r.st.LastErrorAt, r.rewindErr = "", time.Time{}, false
}

// linked clears the last error when a connection to the master is
// established, unless a partition diverged: that error stands while the
// partition is not replicated.
func (r *Receiver) linked() {
	r.divMu.Lock()
	diverged := len(r.diverged) > 0
	r.divMu.Unlock()
	if diverged {
		return
	}
	r.mu.Lock()
	r.clearErrLocked()
	r.mu.Unlock()
}

func (r *Receiver) setErr(err error) {
	r.mu.Lock()
	r.rewindErr = false
	r.st.LastError = err.Error()
	r.st.LastErrorAt = r.opts.Clock.Now()
	r.mu.Unlock()
}

// run connects, streams and reconnects with exponential backoff and
// jitter until Close.
func (r *Receiver) run() {
	// Half fixed, half random: spreads reconnects of many slaves after a
	// master restart while keeping a floor.
	wait := backoff.Backoff{Min: r.opts.BackoffMin, Max: r.opts.BackoffMax, Jitter: true}
	for !r.closing.Load() {
		progressed, err := r.session()
		if r.closing.Load() {
			return
		}
		if err != nil {
			r.setErr(err)
			r.causes.report("link", r.lastAddr(), err, "")
		}
		r.mu.Lock()
		if r.st.Connected {
			r.st.LinkUp = r.opts.Clock.Now() // the link was up until now
		}
		r.st.Connected = false
		r.st.Reconnects++
		r.mu.Unlock()
		if progressed {
			wait.Reset()
		}
		select {
		case <-r.ctx.Done():
			return
		case <-r.opts.Clock.After(wait.Next()):
		case <-r.redial:
			wait.Reset()
		}
	}
}

func (r *Receiver) dial(ctx context.Context) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	defer cancel()
	addr, err := r.opts.Resolver.MasterAddr(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("georeplicator: %w: %w", errResolve, err)
	}
	r.mu.Lock()
	r.tried = addr
	r.mu.Unlock()
	dial := r.opts.Dial
	if dial == nil {
		d := net.Dialer{KeepAlive: 15 * time.Second}
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, addr, fmt.Errorf("georeplicator: dial master %s: %w", addr, err)
	}
	r.warnInsecureLink(addr)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true) // acks are small and latency-sensitive
	}
	if r.opts.TLS != nil {
		cfg := r.opts.TLS.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, addr, fmt.Errorf("georeplicator: tls handshake with %s: %w", addr, err)
		}
		c = tc
	}
	return c, addr, nil
}

// session runs one connection. progressed reports whether any entry was applied.
func (r *Receiver) session() (progressed bool, err error) {
	attemptCtx, abort := context.WithCancel(r.ctx)
	defer abort()
	r.mu.Lock()
	r.attempt = abort
	r.mu.Unlock()
	welcomed := false
	defer func() {
		r.mu.Lock()
		r.attempt = nil
		r.mu.Unlock()
		if err != nil && !welcomed && r.ctx.Err() == nil && attemptCtx.Err() != nil && !errors.Is(err, errAttemptAbandoned) {
			err = fmt.Errorf("georeplicator: %w: %s (%v)", errAttemptAbandoned, r.lastAddr(), err)
		}
	}()
	conn, addr, err := r.dial(attemptCtx)
	if err != nil {
		if r.ctx.Err() == nil && attemptCtx.Err() != nil {
			return false, fmt.Errorf("georeplicator: %w: %s", errAttemptAbandoned, r.lastAddr())
		}
		if !errors.Is(err, errResolve) && !strings.Contains(err.Error(), "tls handshake") {
			r.mu.Lock()
			r.st.DialFailures++
			r.mu.Unlock()
		}
		return false, err
	}
	r.mu.Lock()
	if r.closing.Load() {
		r.mu.Unlock()
		conn.Close()
		return false, nil
	}
	r.conn = conn
	resume, masterLog := r.applied, r.masterLog
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.conn = nil
		r.mu.Unlock()
		conn.Close()
	}()
	r.ends = map[pkey]int64{}
	r.changed = map[pkey]int64{}

	h := hello{Version: protocolVersion, BrokerID: int32(r.opts.BrokerID), SlaveID: int32(r.opts.SlaveID),
		Group: r.opts.Group, Codec: r.opts.Compression, Resume: resume, Window: uint32(r.opts.Window),
		RateCap: r.opts.BandwidthBytesPerSec, MaxDelay: r.opts.MaxDelay, WantConf: r.opts.AutoSyncMasterConfig,
		MasterLog: masterLog, Features: slaveFeatures}
	if r.opts.Identity != nil {
		h.Generation = r.opts.Identity.Generation()
		h.HasLineage, h.Lineage = true, generations(r.opts.Identity.History())
	}
	if masterLog == "" && resume < 0 && r.opts.Identity != nil && len(r.opts.Sink.Partitions()) > 0 {
		// No checkpoint, but data (a former master rejoining as a slave):
		// our positions are in our own log, so the master resumes us by
		// partition ends, and tells us where its own history begins.
		h.MasterLog = r.opts.Identity.LogID()
	}
	if h.MasterLog != "" {
		// Should this master keep another log (a failover), it resumes us by
		// partition ends.
		for _, pi := range r.opts.Sink.Partitions() {
			h.Ends = append(h.Ends, partEnd{Topic: pi.Topic, Partition: pi.Partition, End: pi.Written})
		}
	}
	conn.SetDeadline(time.Now().Add(r.opts.DialTimeout)) // socket deadlines are the kernel's: real time
	// Redial until the welcome closes the connection: the handshake's
	// reads end at once.
	stopAbort := context.AfterFunc(attemptCtx, func() { conn.Close() })
	helloBytes := h.encode()
	if _, err := writeFrame(conn, header{typ: typeHello}, helloBytes, nil); err != nil {
		return false, fmt.Errorf("georeplicator: send hello: %w", err)
	}
	f, err := readHandshakeFrame(conn)
	if err != nil {
		return false, fmt.Errorf("georeplicator: %s: %w: read welcome: %w", addr, errNoHandshake, err)
	}
	f, macs, err := r.authenticateMaster(conn, addr, f, helloBytes)
	if err != nil {
		return false, err
	}
	if f.typ == typeError {
		return false, fmt.Errorf("georeplicator: %w: %s", errRefused, f.wire)
	}
	if f.typ != typeWelcome {
		return false, fmt.Errorf("georeplicator: %s: %w: %w: expected welcome, got type %d", addr, errNoHandshake, ErrProtocol, f.typ)
	}
	w, err := decodeWelcome(f.wire)
	if err != nil {
		return false, err
	}
	if id := r.opts.Identity; id != nil {
		if known := id.Generation(); w.Generation < known {
			return false, fmt.Errorf("georeplicator: master %s serves generation %d, older than %d known here: not following it", addr, w.Generation, known)
		}
		if _, err := id.Observe(w.Generation); err != nil {
			return false, err
		}
	}
	if w.ByEnds {
		// The master's cuts and this log's own (below) are applied together,
		// each partition at the lower of the two: where the logs forked. The
		// higher one may lie inside a record of this log (a generation the
		// master lacks wrote records of other sizes there), which cutting
		// there first would report as a divergence, for good.
		cuts, ownLower := r.forkCuts(w)
		if len(cuts) > 0 {
			if err := r.cutTail(cuts, w.Generation); err != nil {
				return false, err
			}
		}
		if ownLower {
			// The master, which does not know this log's own generations,
			// chose the stream's start above the cut: resume from the cut
			// on a new connection.
			return true, fmt.Errorf("georeplicator: cut the records of this site's own generations after generation %d, which master %s does not hold: resuming from the cut", w.Common, addr)
		}
	}
	if !stopAbort() {
		return false, fmt.Errorf("georeplicator: %w: %s", errAttemptAbandoned, addr)
	}
	welcomed = true
	r.mu.Lock()
	r.attempt = nil // welcomed: a Redial now waits for the next attempt
	r.mu.Unlock()
	conn.SetDeadline(time.Time{})
	applied := w.Start
	l := newLink(conn, addr, w.Features, macs)
	defer func() {
		r.mu.Lock()
		r.link = nil
		r.mu.Unlock()
		close(l.done)
	}()
	r.mu.Lock()
	r.link = l
	if w.LogID != "" && w.LogID != r.masterLog {
		r.masterLog, r.logSwitched = w.LogID, true
	}
	r.applied = applied
	r.st.AppliedPos = applied
	r.st.Connected, r.st.MasterAddr, r.st.MasterPos = true, addr, w.Durable
	r.st.LinkUp = r.opts.Clock.Now()
	r.st.DialFailures = 0
	if w.Truncated {
		r.st.Truncated = true
	}
	r.mu.Unlock()
	if w.Truncated {
		r.log.Warn("REPLICATION: master no longer has our position; continuing from its first retained entry",
			"requested", resume, "start", w.Start)
	}
	r.log.Info("REPLICATION: connected to master", "addr", addr, "start", w.Start, "masterDurable", w.Durable,
		"masterLog", w.LogID, "generation", w.Generation, "byPartitionEnds", w.ByEnds)
	r.causes.clear("link")
	r.linked()

	// The first ack tells the master every local partition end, so its lag
	// figures are right from the start.
	var (
		epoch   uint32
		lastSeq uint64
		echo    int64
		buf     []byte
		raw     []byte
		scratch []byte
	)
	for _, pi := range r.opts.Sink.Partitions() {
		r.changed[pkey{pi.Topic, pi.Partition}] = pi.Written
	}
	sendAck := func() error {
		r.mu.Lock()
		a := ack{Seq: lastSeq, Applied: applied, Durable: r.durable, Echo: echo, Synced: max(r.synced, r.durable)}
		r.mu.Unlock()
		r.endMu.Lock()
		for k, e := range r.changed {
			a.Parts = append(a.Parts, partEnd{Topic: k.Topic, Partition: k.Partition, End: e})
		}
		clear(r.changed)
		r.endMu.Unlock()
		var err error
		scratch, err = l.write(header{typ: typeAck, epoch: epoch}, a.encode(), scratch)
		return err
	}
	rewind := func(why error) error {
		r.log.Warn("REPLICATION: dropping frame and asking the master to resend", "from", applied, "err", why)
		r.setErr(why)
		r.mu.Lock()
		r.rewindErr = true
		r.mu.Unlock()
		epoch++
		lastSeq = 0
		r.mu.Lock()
		r.st.Rewinds++
		r.mu.Unlock()
		var e enc
		e.i64(applied)
		_, err := l.write(header{typ: typeRewind, epoch: epoch}, e.b, nil)
		return err
	}
	if err := sendAck(); err != nil {
		return false, err
	}
	idle := idleTimeout(w.Keepalive)
	for {
		conn.SetReadDeadline(time.Now().Add(idle)) // socket deadlines are the kernel's: real time
		f, err := readFrameMAC(conn, macs.recv, buf)
		if err != nil {
			if r.closing.Load() {
				return progressed, nil
			}
			if errors.Is(err, ErrCorruptFrame) {
				r.mu.Lock()
				r.st.Corrupt++
				r.mu.Unlock()
				if f.typ != 0 {
					// The header checked out, so the stream is still in step:
					// ask again on the same connection.
					buf = f.wire
					if err := rewind(err); err != nil {
						return progressed, err
					}
					continue
				}
			}
			return progressed, fmt.Errorf("georeplicator: read from master: %w", err)
		}
		buf = f.wire
		switch f.typ {
		case typeData:
			if f.epoch != epoch {
				continue // sent before our rewind: discard
			}
			r.mu.Lock()
			r.st.Frames++
			r.st.WireBytes += int64(headerLen + len(f.wire))
			r.st.Codec = f.codec.String()
			r.mu.Unlock()
			if f.seq != lastSeq+1 {
				if err := rewind(fmt.Errorf("%w: frame %d after %d", ErrProtocol, f.seq, lastSeq)); err != nil {
					return progressed, err
				}
				continue
			}
			raw, err = r.dec.decompress(f.codec, raw, f.wire, int(f.rawLen))
			var b batch
			if err == nil {
				b, err = decodeBatch(raw)
			}
			if err == nil && b.Start != applied {
				err = fmt.Errorf("%w: batch starts at %d, applied %d", ErrProtocol, b.Start, applied)
			}
			if err == nil {
				err = checkBatch(b)
			}
			if err != nil {
				r.mu.Lock()
				r.st.Corrupt++
				r.mu.Unlock()
				if err := rewind(err); err != nil {
					return progressed, err
				}
				continue
			}
			if err := r.applyBatch(r.ctx, b.Entries); err != nil {
				return progressed, err
			}
			progressed = true
			applied = b.End
			lastSeq = f.seq
			now := r.opts.Clock.Now()
			r.mu.Lock()
			r.applied = applied
			r.st.AppliedPos = applied
			r.st.Entries += int64(len(b.Entries))
			r.st.RawBytes += int64(len(raw))
			r.st.LastApply = now
			if r.rewindErr {
				r.clearErrLocked() // the stream is whole again
			}
			if applied > r.st.MasterPos {
				r.st.MasterPos = applied
			}
			r.mu.Unlock()
			if hook := r.opts.applyHook; hook != nil {
				for _, e := range b.Entries {
					hook(e, now)
				}
			}
			if f.flags&flagSyncNow != 0 {
				// A put on the master waits for this frame: fsync now
				// rather than at the next checkpoint.
				if err := r.opts.Sink.Flush(); err != nil {
					return progressed, fmt.Errorf("georeplicator: flush for a synchronous topic: %w", err)
				}
				r.mu.Lock()
				r.synced = max(r.synced, applied)
				r.mu.Unlock()
			}
			if err := sendAck(); err != nil {
				return progressed, err
			}
		case typeKeepalive:
			k, err := decodeKeepalive(f.wire)
			if err != nil {
				return progressed, err
			}
			echo = k.SentAt
			r.mu.Lock()
			r.st.MasterPos = k.Durable
			r.mu.Unlock()
			if err := sendAck(); err != nil {
				return progressed, err
			}
		case typeConfig:
			if len(f.wire) > 0 && r.opts.OnMasterConfig != nil {
				conf := bytes.Clone(f.wire)
				r.routines.Go(func() {
					if err := r.opts.OnMasterConfig(r.ctx, conf); err != nil {
						r.log.Warn("REPLICATION: applying the master's config failed", "err", err)
						r.setErr(err)
					}
				})
			}
		case typePromote:
			d := dec{b: f.wire}
			pos := d.i64()
			if d.err != nil {
				return progressed, d.err
			}
			if applied < pos || r.opts.OnPromote == nil {
				r.log.Error("REPLICATION: master handed mastership over, but this slave cannot take it",
					"applied", applied, "masterDurable", pos, "promotable", r.opts.OnPromote != nil)
				continue
			}
			if div := r.Status().Diverged; len(div) > 0 {
				// Its log position passed the master's end, but the
				// diverged partitions were skipped: they hold other records
				// than the master's and lack its later ones, which a
				// takeover would lose.
				err := fmt.Errorf("georeplicator: refused the mastership the master handed over at %d: %d partition(s) diverged from the master and lack its records (%s)",
					pos, len(div), strings.Join(div, "; "))
				r.log.Error("REPLICATION: master handed mastership over, but this slave cannot take it", "err", err)
				r.setErr(err)
				continue
			}
			if err := r.checkpointNow(); err != nil {
				return progressed, err
			}
			r.log.Warn("REPLICATION: master handed mastership over to this site", "at", pos)
			r.opts.OnPromote(pos)
		case typeControlReply:
			id, rep, err := decodeControlReply(f.wire)
			if err != nil {
				return progressed, err
			}
			l.deliver(id, rep)
		case typeHistory:
			// Cut where it forked (above), this log follows the master's
			// from here: the master's history is its own.
			d := dec{b: f.wire}
			h := decodeHistory(&d)
			if d.err != nil {
				return progressed, fmt.Errorf("georeplicator: history from master: %w", d.err)
			}
			if id := r.opts.Identity; id != nil {
				if err := id.Follow(h); err != nil {
					return progressed, err
				}
			}
		case typeLagReport:
			lr, err := decodeLagReport(f.wire)
			if err != nil {
				return progressed, err
			}
			lr.Received = r.opts.Clock.Now()
			r.mu.Lock()
			r.lastLag = &lr
			r.mu.Unlock()
		case typeError:
			return progressed, fmt.Errorf("georeplicator: master error: %s", f.wire)
		default:
			return progressed, fmt.Errorf("%w: unexpected message type %d from master", ErrProtocol, f.typ)
		}
	}
}

// checkBatch verifies that every entry holds whole records whose
// checksums match, so nothing corrupt reaches the replica: a bad record
// makes the receiver ask the master again.
func checkBatch(b batch) error {
	for _, e := range b.Entries {
		if _, err := store.VerifyRecords(e.Records); err != nil {
			return fmt.Errorf("%w: entry %s-%d@%d: %v", ErrCorruptFrame, e.Topic, e.Partition, e.Offset, err)
		}
	}
	return nil
}

// applyBatch applies a frame's entries (see applyEntries); a unit of the
// master's log among them (a transaction's commit, LogEntry.Unit) is
// applied whole in its place (applyUnit). The applied position moves only
// after all of them succeeded.
func (r *Receiver) applyBatch(ctx context.Context, entries []store.LogEntry) error {
	for i := 0; i < len(entries); {
		j := i
		for j < len(entries) && entries[j].Unit < 2 {
			j++
		}
		if err := r.applyEntries(ctx, entries[i:j]); err != nil {
			return err
		}
		if j == len(entries) {
			break
		}
		n := min(entries[j].Unit, len(entries)-j)
		if err := r.applyUnit(ctx, entries[j:j+n]); err != nil {
			return err
		}
		i = j + n
	}
	return nil
}

// UnitSink is implemented by a LogSink that stores the records of several
// partitions as one unit (*store.Store does, AppendRawUnit): a Receiver
// applies a unit its master shipped (a transaction's commit) with it, so
// that this store keeps it one unit and, once promoted, ships it whole to
// slaves of its own. Nothing is stored when one part does not start at
// its partition's end (store.ErrOffsetMismatch).
type UnitSink interface {
	AppendRawUnit(ctx context.Context, appends []store.RawAppend) ([]int64, error)
}

// applyUnit applies the entries of a unit of the master's log. When every
// entry continues its partition where it ends here (the usual case), the
// unit is stored in one piece (UnitSink); otherwise (bytes this replica
// already holds, a partition to recreate, a diverged one, a sink without
// units) entry by entry, as any entries.
func (r *Receiver) applyUnit(ctx context.Context, ents []store.LogEntry) error {
	us, ok := r.opts.Sink.(UnitSink)
	var raws []store.RawAppend
	if ok {
		raws, ok = r.unitAppends(ents)
	}
	if !ok {
		return r.applyEntries(ctx, ents)
	}
	// Not cancelled by Close, as AppendRaw (applyEntry).
	ends, err := us.AppendRawUnit(context.WithoutCancel(ctx), raws)
	if err != nil {
		r.endMu.Lock()
		for _, e := range ents {
			delete(r.ends, pkey{e.Topic, e.Partition})
		}
		r.endMu.Unlock()
		if errors.Is(err, store.ErrOffsetMismatch) {
			// An end moved since it was read: the entries' own checks
			// sort out what is there.
			return r.applyEntries(ctx, ents)
		}
		return fmt.Errorf("georeplicator: append a unit of %d entries from %s-%d at %d: %w", len(ents), ents[0].Topic, ents[0].Partition, ents[0].Offset, err)
	}
	r.endMu.Lock()
	for i, e := range ents {
		k := pkey{e.Topic, e.Partition}
		r.ends[k] = ends[i]
		r.changed[k] = ends[i]
	}
	r.endMu.Unlock()
	return nil
}

// unitAppends turns a unit's entries into one AppendRawUnit, or reports
// that some entry needs applyEntry's care: it holds no records, its
// partition diverged, or it does not start at its partition's end here (a
// missing partition is created where the entry starts, as AppendRaw does).
func (r *Receiver) unitAppends(ents []store.LogEntry) ([]store.RawAppend, bool) {
	raws := make([]store.RawAppend, 0, len(ents))
	next := make(map[pkey]int64, len(ents)) // a partition's end after the unit's earlier entries
	for _, e := range ents {
		k := pkey{e.Topic, e.Partition}
		if len(e.Records) == 0 {
			return nil, false
		}
		r.divMu.Lock()
		div := r.diverged[k] != nil
		r.divMu.Unlock()
		if div {
			return nil, false
		}
		end, ok := next[k]
		if !ok {
			r.endMu.Lock()
			end, ok = r.ends[k]
			r.endMu.Unlock()
		}
		if !ok {
			info, err := r.opts.Sink.Partition(e.Topic, e.Partition)
			switch {
			case errors.Is(err, store.ErrNoPartition):
				end = e.Offset
			case err != nil:
				return nil, false
			default:
				end = info.Written
			}
		}
		if end != e.Offset {
			return nil, false
		}
		next[k] = e.Offset + int64(len(e.Records))
		raws = append(raws, store.RawAppend{Topic: e.Topic, Partition: e.Partition, At: e.Offset, Records: e.Records})
	}
	return raws, true
}

// applyEntries applies entries that are not a unit: in order within each
// partition, and the partitions concurrently, so the store can commit them
// with one fsync instead of one per entry.
func (r *Receiver) applyEntries(ctx context.Context, entries []store.LogEntry) error {
	var order []pkey
	groups := map[pkey][]store.LogEntry{}
	for _, e := range entries {
		k := pkey{e.Topic, e.Partition}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	if len(order) <= 1 {
		for _, e := range entries {
			if err := r.apply(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, k := range order {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			for _, e := range groups[k] {
				if errs[i] = r.apply(ctx, e); errs[i] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// apply writes one entry at its master offset. Bytes the partition already
// holds (after a slave restart the local store can be ahead of the
// checkpoint) are compared with the shipped ones and skipped, so there is no
// duplicate; anything else that does not line up is a DivergedError.
func (r *Receiver) apply(ctx context.Context, e store.LogEntry) error {
	k := pkey{e.Topic, e.Partition}
	r.divMu.Lock()
	skip := r.diverged[k] != nil
	r.divMu.Unlock()
	if skip {
		return nil
	}
	err := r.applyEntry(ctx, k, e)
	var de *DivergedError
	if !errors.As(err, &de) {
		return err
	}
	// Only this partition stops: the others keep replicating.
	r.divMu.Lock()
	if r.diverged == nil {
		r.diverged = map[pkey]*DivergedError{}
	}
	r.diverged[k] = de
	r.divMu.Unlock()
	r.endMu.Lock()
	delete(r.ends, k)
	r.endMu.Unlock()
	r.log.Error("REPLICATION: partition diverged from the master; it is no longer replicated, the others are", "err", de)
	r.setErr(de)
	return nil
}

// Repairer is implemented by a LogSink that can fill a range it skipped
// (see Skipper) once the master repaired it (*store.Store does).
type Repairer interface {
	Repair(ctx context.Context, topic string, partition int, off int64, records []byte) error
}

// errLocalHole: the local partition has no records at an offset (it
// skipped records its master had lost).
var errLocalHole = errors.New("georeplicator: local records lost there")

// Skipper is implemented by a LogSink that can continue a partition past
// records its master lost (*store.Store does).
type Skipper interface {
	SkipTo(ctx context.Context, topic string, partition int, at int64) error
}

// applyEntry writes one entry (see apply).
func (r *Receiver) applyEntry(ctx context.Context, k pkey, e store.LogEntry) error {
	sink := r.opts.Sink
	r.endMu.Lock()
	end, ok := r.ends[k]
	r.endMu.Unlock()
	empty := false
	if !ok {
		info, err := sink.Partition(e.Topic, e.Partition)
		switch {
		case errors.Is(err, store.ErrNoPartition):
			end = -1
		case err != nil:
			return fmt.Errorf("georeplicator: partition %s-%d: %w", e.Topic, e.Partition, err)
		default:
			// AppendRaw appends at the written end, which can be ahead of the
			// durable Max on a slave whose topic does not use group commit.
			end, empty = info.Written, info.Written == info.Min
		}
	}
	recs, off := e.Records, e.Offset
	if len(recs) == 0 {
		// A hole marker: the master lost the records before off to disk
		// damage. A replica that holds them keeps them (a repair can
		// fetch them from here); one that does not continues at off.
		if end >= off {
			return nil
		}
		sk, ok := sink.(Skipper)
		if !ok {
			return &DivergedError{e.Topic, e.Partition, end, fmt.Sprintf("the master lost records before %d and this store cannot skip them", off)}
		}
		if err := sk.SkipTo(context.WithoutCancel(ctx), e.Topic, e.Partition, off); err != nil {
			r.endMu.Lock()
			delete(r.ends, k)
			r.endMu.Unlock()
			return fmt.Errorf("georeplicator: skip %s-%d to %d: %w", e.Topic, e.Partition, off, err)
		}
		r.log.Warn("REPLICATION: continuing past records the master lost", "partition", fmt.Sprintf("%s-%d", e.Topic, e.Partition), "from", end, "to", off)
		r.mu.Lock()
		r.st.Skips++
		r.mu.Unlock()
		r.endMu.Lock()
		r.ends[k] = off
		r.changed[k] = off
		r.endMu.Unlock()
		return nil
	}
	if end >= 0 && off < end {
		overlap := min(end, off+int64(len(recs))) - off
		if err := r.verify(e.Topic, e.Partition, off, recs[:overlap]); err != nil {
			// The master repaired records this replica had skipped (lost
			// on the master before we got them): take them too.
			if !errors.Is(err, errLocalHole) {
				return err
			}
			rp, ok := sink.(Repairer)
			if !ok || overlap != int64(len(recs)) {
				return &DivergedError{e.Topic, e.Partition, off, err.Error()}
			}
			if rerr := rp.Repair(context.WithoutCancel(ctx), e.Topic, e.Partition, off, recs); rerr != nil {
				return &DivergedError{e.Topic, e.Partition, off, fmt.Sprintf("cannot fill the local damaged range with the master's repaired records: %v", rerr)}
			}
			r.log.Warn("REPLICATION: filled a damaged range with records the master repaired", "partition", fmt.Sprintf("%s-%d", e.Topic, e.Partition),
				"from", off, "to", off+int64(len(recs)))
			return nil
		}
		if overlap == int64(len(recs)) {
			r.endMu.Lock()
			r.ends[k] = end
			r.endMu.Unlock()
			r.mu.Lock()
			r.st.Skipped++
			r.mu.Unlock()
			return nil
		}
		if !recordBoundary(recs, int(overlap)) {
			return &DivergedError{e.Topic, e.Partition, end, "local end is inside a shipped record"}
		}
		recs, off = recs[overlap:], end
	}
	if end >= 0 && off > end {
		if !empty {
			return &DivergedError{e.Topic, e.Partition, end, fmt.Sprintf("gap: master continues at %d", off)}
		}
		// An empty local partition (created by the slave's broker at start-up)
		// is recreated at the master's offset so offsets match the master.
		if err := sink.DeletePartition(e.Topic, e.Partition); err != nil {
			return fmt.Errorf("georeplicator: recreate empty partition %s-%d: %w", e.Topic, e.Partition, err)
		}
	}
	// Not cancelled by Close: an append the store has queued completes anyway,
	// and abandoning it would leave our cached end unknown.
	newEnd, err := sink.AppendRaw(context.WithoutCancel(ctx), e.Topic, e.Partition, off, recs)
	r.endMu.Lock()
	defer r.endMu.Unlock()
	if err != nil {
		delete(r.ends, k)
		return fmt.Errorf("georeplicator: append %s-%d at %d: %w", e.Topic, e.Partition, off, err)
	}
	r.ends[k] = newEnd
	r.changed[k] = newEnd
	return nil
}

// verify compares local bytes at [off, off+len(want)) with want.
func (r *Receiver) verify(topic string, part int, off int64, want []byte) error {
	for len(want) > 0 {
		got, err := r.opts.Sink.Read(topic, part, off, len(want))
		var re *store.RangeError
		if errors.As(err, &re) && off >= re.Max {
			// Written but not yet fsynced here (a rewind inside one run):
			// reads stop at the durable end, so flush and look again.
			if ferr := r.opts.Sink.Flush(); ferr != nil {
				return fmt.Errorf("georeplicator: flush before verify: %w", ferr)
			}
			got, err = r.opts.Sink.Read(topic, part, off, len(want))
		}
		var de *store.DamagedError
		if errors.As(err, &de) && de.Offset == off {
			return fmt.Errorf("%w: %s-%d at %d", errLocalHole, topic, part, off)
		}
		if err != nil {
			return &DivergedError{topic, part, off, fmt.Sprintf("cannot read local bytes: %v", err)}
		}
		n := min(len(got), len(want))
		if n == 0 {
			return &DivergedError{topic, part, off, "local read returned nothing"}
		}
		if !bytes.Equal(got[:n], want[:n]) {
			return &DivergedError{topic, part, off, "local bytes differ from the master's"}
		}
		want, off = want[n:], off+int64(n)
	}
	return nil
}

func (r *Receiver) checkpointLoop() {
	t := r.opts.Clock.NewTicker(r.opts.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C():
			if err := r.checkpointNow(); err != nil {
				r.log.Warn("REPLICATION: checkpoint failed", "err", err)
				r.setErr(err)
			}
		}
	}
}

// checkpointNow makes the applied position durable: snapshot it, flush the
// store (which covers everything appended before the snapshot), then write it.
func (r *Receiver) checkpointNow() error {
	r.mu.Lock()
	pos, durable, masterLog, switched := r.applied, r.durable, r.masterLog, r.logSwitched
	r.logSwitched = false
	r.mu.Unlock()
	if pos == durable && !switched {
		return nil
	}
	if err := r.opts.Sink.Flush(); err != nil {
		return fmt.Errorf("georeplicator: flush before checkpoint: %w", err)
	}
	if err := saveCheckpoint(r.opts.CheckpointFile, pos, masterLog, r.opts.Clock.Now()); err != nil {
		if switched {
			r.mu.Lock()
			r.logSwitched = true
			r.mu.Unlock()
		}
		return err
	}
	r.mu.Lock()
	r.durable = pos
	r.synced = max(r.synced, pos)
	r.st.DurablePos = pos
	r.mu.Unlock()
	return nil
}
