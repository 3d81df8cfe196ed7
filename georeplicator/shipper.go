package georeplicator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"metaq/broker/store"
	"metaq/internal/peek"
	"metaq/internal/routines"
)

// Shipper is the master side: it accepts slaves on the replication address
// and streams the durable commit log to each. Start, then Close.
type Shipper struct {
	opts ShipperOptions
	log  *slog.Logger

	ln       net.Listener
	closing  atomic.Bool
	quit     chan struct{}
	routines routines.Group
	ctx      context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	sessions map[slaveKey]*session // the current connection of each slave

	prog  *progress
	waits *siteWaits // synchronous topics' puts (syncsites.go)

	ccWarned atomic.Bool

	fenceMu sync.Mutex
	fence   Fence
}

// NewShipper validates opts and loads the progress state file.
func NewShipper(opts ShipperOptions) (*Shipper, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Shipper{opts: opts, log: opts.Logger.With("component", "georeplicator", "role", "master"),
		quit: make(chan struct{}), conns: map[net.Conn]struct{}{}, sessions: map[slaveKey]*session{},
		waits: newSiteWaits()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	p, err := loadProgress(opts.StateFile, opts.Clock)
	if err != nil {
		return nil, err
	}
	s.prog = p
	return s, nil
}

// Start opens the listener and begins serving slaves.
func (s *Shipper) Start() error {
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.opts.Listen); err != nil {
			return fmt.Errorf("georeplicator: listen %s: %w", s.opts.Listen, err)
		}
	}
	// TLS is chosen per connection from its first byte (serve), so that a
	// plain-text hello to a TLS master gets an answer it can read.
	s.ln = ln
	encrypted, authenticated := s.opts.security()
	s.log.Info("REPLICATION: replication listening", "addr", ln.Addr().String(), "compression", s.opts.Compression,
		"tls", encrypted, "authenticated", authenticated)
	s.warnInsecure(ln.Addr().String())
	s.warnUnauthenticatedControl()
	if authenticated {
		for _, k := range s.prog.forgetUnauthenticated() {
			s.log.Info("REPLICATION: forgetting a slave that last connected without authentication", "slave", fmt.Sprintf("SLAVE(%s/%d)", k.Group, k.SlaveID))
		}
	}
	s.routines.Go(s.acceptLoop)
	s.routines.Go(s.persistLoop)
	s.fenceAtStart()
	s.routines.Go(s.leaseLoop)
	return nil
}

// Addr is the listening address (after Start).
func (s *Shipper) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops accepting, disconnects every slave, saves progress and waits
// for all goroutines. Idempotent.
func (s *Shipper) Close() error {
	s.mu.Lock()
	if !s.closing.CompareAndSwap(false, true) {
		s.mu.Unlock()
		return nil
	}
	s.routines.Stop()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Closed without s.mu: a listener or connection handed over by the
	// broker's MetaQ port takes the broker's locks to give its port back.
	// Nothing is added once closing is set.
	if s.ln != nil {
		s.ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	close(s.quit)
	s.cancel()
	s.routines.Wait()
	s.waits.close()
	return s.prog.save()
}

func (s *Shipper) acceptLoop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return
			}
			s.log.Warn("REPLICATION: accept failed", "err", err)
			select {
			case <-s.quit:
				return
			case <-s.opts.Clock.After(50 * time.Millisecond):
			}
			continue
		}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		// Started under s.mu: Close stops the group under s.mu too.
		s.routines.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.serve(c); err != nil && !s.closing.Load() {
				s.log.Warn("REPLICATION: slave connection ended", "remote", c.RemoteAddr().String(), "err", err)
			}
		})
		s.mu.Unlock()
	}
}

func (s *Shipper) persistLoop() {
	t := s.opts.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C():
			if err := s.prog.saveIfDirty(); err != nil {
				s.log.Warn("REPLICATION: saving replication progress failed", "err", err)
			}
		}
	}
}

// sentFrame is a data frame the slave has not acknowledged yet.
type sentFrame struct {
	seq  uint64
	end  int64
	wire int
}

// session is one connected slave.
type session struct {
	s      *Shipper
	conn   net.Conn
	h      hello
	key    slaveKey
	log    *slog.Logger
	mode   Mode
	window int
	lim    *rate.Limiter
	delay  time.Duration

	ackWake    chan struct{} // cap 1: an ack arrived (window may have room)
	rewindWake chan struct{} // cap 1: a rewind arrived (the builder restarts)
	urgentWake chan struct{} // cap 1: a synchronous put waits (the builder stops lingering)

	mu        sync.Mutex
	epoch     uint32
	rewindTo  int64 // >= 0: restart the stream here at epoch
	inflight  []sentFrame
	inflBytes int
	rtt       time.Duration
	lastEcho  int64

	lastAck     atomic.Int64 // unix ns of the last ack: the slave confirms this master (lease)
	connectedAt time.Time

	promoteWake chan struct{} // cap 1: Handover asks the stream to send promote
	promoteAt   atomic.Int64
	done        chan struct{} // closed when the session ends

	// features are the optional messages of this link (control.go).
	features uint32
	// wmu orders writes on conn: the stream's and control answers.
	wmu sync.Mutex
	// macs authenticate the frames after a secret handshake (framemac.go):
	// send is used under wmu, recv by readAcks.
	macs linkMACs

	chooser codecChooser
}

// writeScratch is write reusing scratch, as writeFrame does.
func (ss *session) writeScratch(h header, p, scratch []byte) ([]byte, error) {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	return writeFrameMAC(ss.conn, ss.macs.send, h, p, scratch)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// tlsRecordHandshake is the first byte of a TLS ClientHello (a handshake
// record); a slave's plain-text hello starts with frameMagic instead.
const tlsRecordHandshake = 0x16

// socketOf unwraps c (tls.Conn, or a connection handed over by a shared
// port, through NetConn) down to its TCP socket, nil when there is none.
func socketOf(c net.Conn) *net.TCPConn {
	for range 8 {
		switch x := c.(type) {
		case *net.TCPConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// serve runs the handshake and then the stream for one slave.
func (s *Shipper) serve(c net.Conn) error {
	// Each frame is one write; do not hold the tail of a frame back (NoDelay).
	if tc := socketOf(c); tc != nil {
		tc.SetNoDelay(true)
		setNotSentLowat(tc) // best effort: only latency suffers without it
		if err := setCongestion(tc, s.opts.CongestionControl); err != nil && s.ccWarned.CompareAndSwap(false, true) {
			s.log.Warn("REPLICATION: cannot select TCP congestion control; using the host default",
				"algorithm", s.opts.CongestionControl, "err", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second) // socket deadlines are the kernel's: real time
	lead, pc, err := peek.First(c, deadline)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	c = pc
	c.SetDeadline(deadline)
	switch {
	case lead == tlsRecordHandshake && s.opts.TLS == nil:
		return fmt.Errorf("%w: a TLS client, but this master serves replication in plain text (no [replication] tlsCert)", ErrProtocol)
	case lead != tlsRecordHandshake && s.opts.TLS != nil:
		msg := "this master serves replication over TLS only: set [replication] tlsCert, tlsKey and tlsCA on the slave too"
		writeFrame(c, header{typ: typeError}, []byte(msg), nil)
		return fmt.Errorf("%w: refused a plain-text slave: %s", ErrProtocol, msg)
	case s.opts.TLS != nil:
		tc := tls.Server(c, s.opts.TLS)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	f, err := readHandshakeFrame(c)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if f.typ != typeHello || f.codec != CodecNone {
		return fmt.Errorf("%w: expected hello, got type %d", ErrProtocol, f.typ)
	}
	h, err := decodeHello(f.wire)
	if err != nil {
		return fmt.Errorf("decode hello: %w", err)
	}
	// Authentication comes first: a peer without the secret learns nothing
	// (not even whether its brokerId is right) and is never registered.
	macs, err := s.authenticateSlave(c, f.wire, h.Features)
	if err != nil {
		return err
	}
	refuse := func(msg string) error {
		writeFrameMAC(c, macs.send, header{typ: typeError}, []byte(msg), nil)
		return fmt.Errorf("%w: refused slave: %s", ErrProtocol, msg)
	}
	if h.Version != protocolVersion {
		return refuse(fmt.Sprintf("protocol version %d not supported (want %d)", h.Version, protocolVersion))
	}
	if h.BrokerID >= 0 && int(h.BrokerID) != s.opts.BrokerID {
		return refuse(fmt.Sprintf("slave brokerId %d differs from master brokerId %d", h.BrokerID, s.opts.BrokerID))
	}
	mode := s.opts.Compression
	if h.Codec != "" {
		if mode, err = ParseMode(string(h.Codec)); err != nil {
			return refuse(err.Error())
		}
	}
	if h.Generation > s.opts.Generation {
		s.ObserveGeneration(h.Generation, "slave "+c.RemoteAddr().String())
		return refuse(fmt.Sprintf("master generation %d is older than the slave's %d", s.opts.Generation, h.Generation))
	}
	first, durable := s.opts.Source.LogBounds()
	start, truncated := h.Resume, false
	byEnds := h.MasterLog != "" && s.opts.LogID != "" &&
		(h.MasterLog != s.opts.LogID || (h.HasLineage && !slices.Equal(h.Lineage, generations(s.history()))))
	var (
		cuts      map[string]int64
		common    uint64
		hasCommon bool
	)
	if !byEnds && h.MasterLog != "" && h.MasterLog == s.opts.LogID && h.HasLineage {
		// The slave followed this log before, but this site may have
		// followed another master since (cutting its own tail and taking
		// that master's records at the same offsets) and been promoted
		// again: a log position then no longer means the same records.
		// Whatever the slave holds beyond where a generation it lacks
		// began is resumed by partition ends, cut and saved aside.
		if c, cm, ok := s.cutEnds(h); len(c) > 0 {
			byEnds, cuts, common, hasCommon = true, c, cm, ok
		}
	}
	if byEnds {
		// The slave's position is in another master's log (a failover):
		// only partition offsets mean the same here, up to where the two
		// logs forked.
		if cuts == nil {
			cuts, common, hasCommon = s.cutEnds(h)
		}
		if start, truncated, err = s.startForEnds(h.Ends, cuts); err != nil {
			return refuse(err.Error())
		}
	} else if start < first {
		truncated = h.Resume >= 0 // -1 is an empty slave asking for everything
		start = first
	}
	if start > durable {
		// The slave claims more than the master has: the master lost data it
		// had shipped (or the slave belongs to another master). Never rewind
		// the slave silently.
		return refuse(fmt.Sprintf("slave position %d is beyond the master's durable log end %d", start, durable))
	}
	window := int(h.Window)
	if window < minWindow {
		window = minWindow
	}
	bw := s.opts.BandwidthBytesPerSec
	if h.RateCap > 0 && (bw == 0 || h.RateCap < bw) {
		bw = h.RateCap
	}
	delay := h.MaxDelay
	if delay <= 0 {
		delay = s.opts.DefaultMaxDelay
	}
	key := slaveKey{Group: h.Group, SlaveID: int(h.SlaveID)}
	ss := &session{s: s, conn: c, h: h, key: key, mode: mode, window: window, delay: delay,
		ackWake: make(chan struct{}, 1), rewindWake: make(chan struct{}, 1), urgentWake: make(chan struct{}, 1), rewindTo: -1, connectedAt: s.opts.Clock.Now(),
		promoteWake: make(chan struct{}, 1), done: make(chan struct{}), macs: macs,
		log: s.log.With("slave", fmt.Sprintf("SLAVE(%s/%d)", h.Group, h.SlaveID), "remote", c.RemoteAddr().String())}
	if bw > 0 {
		burst := s.opts.FrameBytes + headerLen + 4096
		ss.lim = rate.NewLimiter(rate.Limit(bw), burst)
	}
	if s.opts.OnControl != nil {
		ss.features |= featureControl
	}
	ss.features |= h.Features & (featureLagReport | featureUnits)
	ss.chooser.init(mode, bw)
	ss.chooser.lanRTT = s.opts.AutoLANRTT

	w := welcome{Version: protocolVersion, BrokerID: int32(s.opts.BrokerID), Start: start, First: first,
		Durable: durable, Truncated: truncated, Keepalive: s.opts.Keepalive,
		LogID: s.opts.LogID, Generation: s.opts.Generation, ByEnds: byEnds, Features: ss.features,
		HasCommon: hasCommon, Common: common}
	if byEnds {
		w.PromotionEnds = endsList(cuts)
	}
	if err := ss.write(header{typ: typeWelcome}, w.encode()); err != nil {
		return fmt.Errorf("write welcome: %w", err)
	}
	if h.Features&featureHistory != 0 {
		var e enc
		encodeHistory(&e, s.history())
		if err := ss.write(header{typ: typeHistory}, e.b); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	if h.WantConf {
		if s.opts.ConfigBytes == nil {
			ss.write(header{typ: typeConfig}, nil) // empty: master offers no config
		} else if conf, err := s.opts.ConfigBytes(); err != nil {
			ss.log.Warn("REPLICATION: reading config for slave failed", "err", err)
			ss.write(header{typ: typeConfig}, nil)
		} else if err := ss.write(header{typ: typeConfig}, conf); err != nil {
			return fmt.Errorf("write config: %w", err)
		}
	}
	c.SetDeadline(time.Time{})
	// A slave has one stream: a new connection replaces one the master has
	// not yet noticed is dead (the slave reconnected after a cut).
	s.mu.Lock()
	old := s.sessions[key]
	s.sessions[key] = ss
	s.mu.Unlock()
	if old != nil {
		old.log.Info("REPLICATION: slave reconnected; closing its previous connection")
		old.conn.Close() // without s.mu, as Close does
	}
	defer close(ss.done)
	defer func() {
		s.mu.Lock()
		if s.sessions[key] == ss {
			delete(s.sessions, key)
		}
		s.mu.Unlock()
	}()
	connNo := s.prog.connect(key, c.RemoteAddr().String(), start, truncated, mode)
	s.prog.setAuth(key, s.authMethod(c))
	defer s.prog.disconnect(key, connNo)
	ss.log.Info("REPLICATION: slave connected", "start", start, "byPartitionEnds", byEnds, "truncated", truncated, "codec", mode,
		"window", window, "bandwidth", bw, "maxDelay", delay)
	if truncated {
		ss.log.Warn("REPLICATION: slave position removed by retention; streaming from the first retained entry",
			"requested", h.Resume, "first", first)
	}

	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { // ends when conn closes; waited on below
		err := ss.readAcks(ctx)
		cancel() // a silent or broken slave ends the stream too
		errc <- err
	}()
	err = ss.stream(ctx, start)
	c.Close()
	cancel()
	if rerr := <-errc; err == nil && !s.closing.Load() {
		err = rerr
	}
	return err
}

// readAcks reads the slave's acks and rewinds until the connection ends.
func (ss *session) readAcks(ctx context.Context) error {
	var buf []byte
	idle := idleTimeout(ss.s.opts.Keepalive)
	for {
		ss.conn.SetReadDeadline(time.Now().Add(idle)) // socket deadlines are the kernel's: real time
		f, err := readFrameMAC(ss.conn, ss.macs.recv, buf)
		if err != nil {
			return fmt.Errorf("read from slave: %w", err)
		}
		buf = f.wire
		switch f.typ {
		case typeAck:
			a, err := decodeAck(f.wire)
			if err != nil {
				return err
			}
			now := ss.s.opts.Clock.Now()
			ss.mu.Lock()
			if a.Echo != 0 && a.Echo != ss.lastEcho {
				ss.lastEcho = a.Echo
				if rtt := now.Sub(time.Unix(0, a.Echo)); rtt >= 0 {
					if ss.rtt == 0 {
						ss.rtt = rtt
					} else {
						ss.rtt = (ss.rtt*7 + rtt) / 8
					}
				}
			}
			if f.epoch == ss.epoch {
				for len(ss.inflight) > 0 && ss.inflight[0].seq <= a.Seq {
					ss.inflBytes -= ss.inflight[0].wire
					ss.inflight = ss.inflight[1:]
				}
			}
			rtt := ss.rtt
			ss.mu.Unlock()
			ss.s.prog.ack(ss.key, a, rtt)
			ss.lastAck.Store(now.UnixNano())
			ss.s.waits.ack(ss.key, a.Synced)
			signal(ss.ackWake)
		case typeError:
			return fmt.Errorf("%w: slave closed the link: %s", ErrProtocol, f.wire)
		case typeControl:
			if err := ss.handleControl(f.wire); err != nil {
				return err
			}
		case typeRewind:
			d := dec{b: f.wire}
			pos := d.i64()
			if d.err != nil {
				return d.err
			}
			ss.mu.Lock()
			ss.epoch = f.epoch
			ss.rewindTo = pos
			ss.inflight, ss.inflBytes = nil, 0
			ss.mu.Unlock()
			ss.s.prog.corrupt(ss.key)
			ss.log.Warn("REPLICATION: slave asked to resend", "from", pos, "epoch", f.epoch)
			signal(ss.rewindWake)
			signal(ss.ackWake)
		default:
			return fmt.Errorf("%w: unexpected message type %d from slave", ErrProtocol, f.typ)
		}
		select {
		case <-ctx.Done():
			return nil
		default:
		}
	}
}

// minFrameBytes: a frame smaller than this waits (up to the linger time) for
// more data, so a trickle of small commits still compresses well.
const minFrameBytes = 64 << 10

// outFrame is a data frame built ahead of its write.
type outFrame struct {
	h    header
	wire []byte
	raw  int
	end  int64
}

// stream sends the durable log from pos until ctx ends or a write fails.
// A builder goroutine reads and compresses the next frames while this one
// writes, so compression overlaps the time a write waits for the link.
func (ss *session) stream(ctx context.Context, pos int64) error {
	s := ss.s
	frames := make(chan *outFrame, 2)
	bctx, bcancel := context.WithCancel(ctx)
	berr := make(chan error, 1)
	go func() { berr <- ss.build(bctx, pos, frames) }() // waited on below
	defer func() {
		bcancel()
		<-berr
	}()
	var (
		scratch []byte
		lastKA  time.Time
	)
	sendKA := func() error {
		ss.mu.Lock()
		epoch := ss.epoch
		ss.mu.Unlock()
		_, durable := s.opts.Source.LogBounds()
		k := keepalive{SentAt: s.opts.Clock.Now().UnixNano(), Durable: durable}
		var err error
		scratch, err = ss.writeScratch(header{typ: typeKeepalive, epoch: epoch}, k.encode(), scratch)
		lastKA = s.opts.Clock.Now()
		if err == nil && ss.features&featureLagReport != 0 {
			err = ss.sendLagReport()
		}
		return err
	}
	if err := sendKA(); err != nil { // first RTT sample before any data
		return err
	}
	tick := s.opts.Clock.NewTicker(s.opts.Keepalive / 2)
	defer tick.Stop()
	for {
		// At least one keepalive per interval, also while streaming: each
		// one is an RTT sample.
		if s.opts.Clock.Since(lastKA) >= s.opts.Keepalive {
			if err := sendKA(); err != nil {
				return err
			}
		}
		var f *outFrame
		select {
		case <-ctx.Done():
			return nil
		case err := <-berr:
			berr <- err // for the deferred wait
			if err != nil {
				ss.write(header{typ: typeError}, []byte(err.Error()))
			}
			return err
		case <-tick.C():
			continue
		case <-ss.promoteWake:
			var e enc
			e.i64(ss.promoteAt.Load())
			var err error
			if scratch, err = ss.writeScratch(header{typ: typePromote}, e.b, scratch); err != nil {
				return err
			}
			ss.log.Warn("REPLICATION: handed mastership over to this slave", "durable", ss.promoteAt.Load())
			continue
		case f = <-frames:
		}
		// Window: wait for acks while too much is unacknowledged.
		stale := false
		for {
			ss.mu.Lock()
			stale = f.h.epoch != ss.epoch // built before a rewind
			full := ss.inflBytes >= ss.window
			ss.mu.Unlock()
			if stale || !full {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-ss.ackWake:
			case <-tick.C():
				if s.opts.Clock.Since(lastKA) >= s.opts.Keepalive {
					if err := sendKA(); err != nil {
						return err
					}
				}
			}
		}
		if stale {
			continue
		}
		n := headerLen + len(f.wire)
		if ss.lim != nil {
			if err := waitTokens(ctx, ss.lim, n); err != nil {
				return nil
			}
		}
		ss.mu.Lock()
		if f.h.epoch != ss.epoch {
			ss.mu.Unlock()
			continue
		}
		ss.inflight = append(ss.inflight, sentFrame{seq: f.h.seq, end: f.end, wire: n})
		ss.inflBytes += n
		ss.mu.Unlock()
		var err error
		if scratch, err = ss.writeScratch(f.h, f.wire, scratch); err != nil {
			return fmt.Errorf("georeplicator: write frame: %w", err)
		}
		s.prog.sent(ss.key, f.end, f.raw, n, f.h.codec)
	}
}

// build reads the durable log from pos and turns it into frames until ctx
// ends. It restarts at the slave's position when a rewind arrives.
func (ss *session) build(ctx context.Context, pos int64, out chan<- *outFrame) error {
	s := ss.s
	var (
		seq        uint64
		epoch      uint32
		frameStart = pos // end of the last frame built: where the next batch must start
		raw        []byte
		// flagged is the end of the last frame built with flagSyncNow:
		// while a synchronous put waits beyond it, frames carry the flag,
		// and an idle stream sends an empty one (the put's record went out
		// in a frame built before its wait began).
		flagged = pos
	)
	// Linger bounds how long a small frame waits for company: a tenth of
	// slaveMaxDelayInMills, at most 20 ms, keeps the promise "flushed at
	// least every slaveMaxDelayInMills" with room for the link, and keeps
	// the added latency small.
	linger := min(ss.delay/10, 20*time.Millisecond)
	for ctx.Err() == nil {
		ss.mu.Lock()
		if ss.rewindTo >= 0 {
			pos, epoch, seq = ss.rewindTo, ss.epoch, 0
			frameStart, flagged = pos, pos
			ss.rewindTo = -1
		}
		ss.mu.Unlock()
		entries, next, err := s.opts.Source.ReadLog(pos, s.opts.FrameBytes)
		if errors.Is(err, store.ErrLogTruncated) {
			return fmt.Errorf("georeplicator: log position %d removed by retention", pos)
		}
		if err != nil {
			return fmt.Errorf("georeplicator: read log at %d: %w", pos, err)
		}
		if len(entries) == 0 && next > pos {
			// ReadLog passed over entries without records (partition
			// definitions, deletions); the next frame covers that range.
			pos = next
			continue
		}
		if len(entries) == 0 && frameStart < pos {
			// Idle, but the slave does not know about the skipped range yet:
			// an empty batch moves its position (and the lag) to the end.
			next = pos
		} else if len(entries) == 0 && s.waits.urgent.Load() <= flagged {
			ss.waitData(ctx, pos, s.opts.Keepalive)
			continue
		}
		// Linger for more when the frame is small and more may come soon,
		// unless a synchronous put waits for what is there.
		size := entriesSize(entries)
		deadline := s.opts.Clock.Now().Add(linger)
		for len(entries) > 0 && size < minFrameBytes && linger > 0 && deadline.After(s.opts.Clock.Now()) && s.waits.urgent.Load() <= flagged {
			if ss.waitData(ctx, next, deadline.Sub(s.opts.Clock.Now())) != nil {
				break
			}
			more, n2, err := s.opts.Source.ReadLog(next, s.opts.FrameBytes-size)
			if err != nil || len(more) == 0 {
				break
			}
			entries = append(entries, more...)
			next = n2
			size = entriesSize(entries)
		}
		seq++
		if ss.features&featureUnits == 0 {
			// An older slave reads no list of units after the entries.
			for i := range entries {
				entries[i].Unit = 0
			}
		}
		raw = encodeBatch(raw, frameStart, next, s.opts.Clock.Now().UnixNano(), entries)
		codec := ss.chooser.pick(ss.currentRTT())
		wire, err := compress(codec, nil, raw)
		if err != nil {
			return err
		}
		if codec != CodecNone && len(wire) >= len(raw) {
			// Incompressible: send raw rather than a larger payload.
			codec, wire = CodecNone, append(wire[:0], raw...)
		}
		ss.chooser.observe(codec, len(raw), len(wire))
		var flags byte
		if u := s.waits.urgent.Load(); u > flagged {
			flags, flagged = flagSyncNow, next // a put waits for a record up to here
			if len(entries) == 0 {
				// Nothing readable up to u here: one empty flagged frame,
				// not one per turn of this loop.
				flagged = max(next, u)
			}
		}
		f := &outFrame{h: header{typ: typeData, codec: codec, flags: flags, epoch: epoch, seq: seq, rawLen: uint32(len(raw))},
			wire: wire, raw: len(raw), end: next}
		select {
		case <-ctx.Done():
			return nil
		case out <- f:
		}
		pos, frameStart = next, next
	}
	return nil
}

func (ss *session) currentRTT() time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.rtt
}

// waitData waits until the log is durable beyond pos, a rewind or a
// synchronous put arrives, or d passes. It returns an error only when ctx ended.
func (ss *session) waitData(ctx context.Context, pos int64, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	timeout := ss.s.opts.Clock.After(d)
	go func() { // ended by cancel below at the latest
		defer close(done)
		select {
		case <-ss.rewindWake:
			cancel()
		case <-ss.urgentWake:
			cancel()
		case <-timeout:
			cancel()
		case <-wctx.Done():
		}
	}()
	ss.s.opts.Source.WaitDurable(wctx, pos)
	cancel()
	<-done
	return ctx.Err()
}

func waitTokens(ctx context.Context, lim *rate.Limiter, n int) error {
	for n > 0 {
		k := min(n, lim.Burst())
		if err := lim.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func entriesSize(es []store.LogEntry) int {
	n := 0
	for _, e := range es {
		n += len(e.Records) + len(e.Topic) + 30
	}
	return n
}

// idleTimeout is how long a silent peer is tolerated: four keepalives, but
// never under 2s so a briefly starved process (GC, a busy shared core) is
// not mistaken for a dead link.
func idleTimeout(keepalive time.Duration) time.Duration {
	return max(4*keepalive, 2*time.Second)
}
