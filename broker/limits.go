package broker

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"metaq/broker/wire"
)

// connLimits admits connections: at most max open in all and perAddr from
// one IP address (0 = no limit). It also keeps one byte budget per address
// with open connections (Options.MaxAddressBufferedBytes), between the
// connections' budgets and the broker's: whatever the connections of one
// address declare, they never hold more than that share, and while they
// wait for it they wait in their address's queue, not in the broker's, so
// clients at other addresses are not queued behind them.
type connLimits struct {
	max, perAddr int
	share        int64       // each address's byte budget
	mem          *byteBudget // the broker's, which addresses draw from
	onWait       func()      // set on each address's budget (see byteBudget.onWait)
	recheck      time.Duration

	mu      sync.Mutex
	open    int
	byAddr  map[netip.Addr]int
	budgets map[netip.Addr]*byteBudget // of addresses with open connections
}

// Why a connection was refused, as logged and counted.
const (
	refusedTotal   = "maxConnections"
	refusedAddress = "maxConnectionsPerAddress"
)

// admit counts a new connection from ip and returns the byte budget of its
// address, or returns why it is refused.
func (l *connLimits) admit(ip netip.Addr) (*byteBudget, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open >= l.max {
		return nil, refusedTotal
	}
	if l.perAddr > 0 && l.byAddr[ip] >= l.perAddr {
		return nil, refusedAddress
	}
	if l.byAddr == nil {
		l.byAddr = make(map[netip.Addr]int)
		l.budgets = make(map[netip.Addr]*byteBudget)
	}
	l.open++
	l.byAddr[ip]++
	bb := l.budgets[ip]
	if bb == nil {
		bb = newByteBudget(l.share, l.mem)
		bb.onWait, bb.recheck = l.onWait, l.recheck
		l.budgets[ip] = bb
	}
	return bb, ""
}

// done uncounts a connection admit let in.
func (l *connLimits) done(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.byAddr[ip] - 1; n > 0 {
		l.byAddr[ip] = n
	} else {
		// Its last connection has detached its budget: the address holds
		// nothing now.
		delete(l.byAddr, ip)
		delete(l.budgets, ip)
	}
}

// addressUsed returns the bytes the connections from ip hold now.
func (l *connLimits) addressUsed(ip netip.Addr) int64 {
	l.mu.Lock()
	bb := l.budgets[ip]
	l.mu.Unlock()
	if bb == nil {
		return 0
	}
	return bb.used()
}

// remoteIP is the address connLimits counts a connection under.
func remoteIP(nc net.Conn) netip.Addr {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// logEvery is the most often one kind of refused or closed connection is
// logged; the counters in `stats` count every one.
const logEvery = 10 * time.Second

// limitLogs rate-limits the logs of refused and closed connections, one
// limiter per cause: a flood of one kind is said once per logEvery.
type limitLogs struct {
	refusedTotal, refusedAddress rate.Sometimes
	idle, slowRequest, stalled   rate.Sometimes
	silentBody                   rate.Sometimes
}

func newLimitLogs() *limitLogs {
	return &limitLogs{
		refusedTotal:   rate.Sometimes{Interval: logEvery},
		refusedAddress: rate.Sometimes{Interval: logEvery},
		idle:           rate.Sometimes{Interval: logEvery},
		slowRequest:    rate.Sometimes{Interval: logEvery},
		stalled:        rate.Sometimes{Interval: logEvery},
		silentBody:     rate.Sometimes{Interval: logEvery},
	}
}

// refuse closes a connection the limits do not admit.
func (b *Broker) refuse(nc net.Conn, cause string) {
	defer nc.Close()
	switch cause {
	case refusedTotal:
		n := b.stats.connRefusedTotal.Add(1)
		b.limitLog.refusedTotal.Do(func() {
			b.log.Warn("BROKER: connection refused, too many connections", "remote", nc.RemoteAddr().String(),
				"limit", b.opts.MaxConnections, "key", "[limits] maxConnections", "refused_so_far", n)
		})
	case refusedAddress:
		n := b.stats.connRefusedAddress.Add(1)
		b.limitLog.refusedAddress.Do(func() {
			b.log.Warn("BROKER: connection refused, too many connections from one address", "remote", nc.RemoteAddr().String(),
				"limit", b.opts.MaxConnectionsPerAddress, "key", "[limits] maxConnectionsPerAddress", "refused_so_far", n)
		})
	}
}

// frameClock times the request a connection's reader is receiving. Only
// the time spent waiting for the client's bytes counts: waits of the
// broker's own (an in-flight slot, the byte budget, the store's queue) do
// not, so back-pressure never makes a client look slow.
type frameClock struct {
	started bool          // some bytes of the request have arrived
	waited  time.Duration // time spent in socket reads since
	armed   time.Time     // the read deadline set last
}

// next starts timing the next request; started says its first bytes are
// already buffered.
func (f *frameClock) next(started bool) {
	f.started = started
	f.waited = 0
}

// readSocket reads from the connection with the deadline that applies:
// IdleTimeout between requests, what is left of ReadTimeout inside one. An
// idle timeout while the client still awaits answers is not idleness: the
// read goes on. A synchronous master's link (which sends no heartbeats) is
// never idle.
func (c *conn) readSocket(p []byte, f *frameClock) (int, error) {
	idle, slow := c.b.opts.IdleTimeout, c.b.opts.ReadTimeout
	if c.syncPeer {
		idle = 0
	}
	for {
		start := time.Now()
		var deadline time.Time
		switch {
		case !f.started && idle > 0:
			deadline = start.Add(idle)
		case f.started && slow > 0:
			deadline = start.Add(slow - f.waited)
		}
		if !deadline.Equal(f.armed) {
			c.nc.SetReadDeadline(deadline)
			f.armed = deadline
			if c.stopRead.Load() {
				// Broker.Close stopped reading meanwhile; keep it stopped.
				c.nc.SetReadDeadline(time.Unix(1, 0))
			}
		}
		n, err := c.nc.Read(p)
		if f.started {
			f.waited += time.Since(start)
		}
		if n > 0 {
			f.started = true
			if c.bodySince.Load() != 0 {
				c.bodySince.Store(time.Now().UnixNano())
			}
			return n, err
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.stopRead.Load() {
			if !f.started {
				if len(c.slots) > 1 || len(c.fwdSlots) > 0 {
					continue // answers still owed: the client is waiting for us
				}
				c.timedOut = idleTimedOut
			} else {
				c.timedOut = requestTimedOut
			}
		}
		return n, err
	}
}

// stopReading makes the reader's next (or current) socket read fail at
// once; it is how Close stops reading requests.
func (c *conn) stopReading() {
	c.stopRead.Store(true)
	c.nc.SetReadDeadline(time.Unix(1, 0))
	c.stopReader()
}

// timedOutRead logs and counts a connection closed by a read timeout.
func (c *conn) timedOutRead() {
	b := c.b
	switch c.timedOut {
	case idleTimedOut:
		b.stats.connClosedIdle.Add(1)
		c.log.Debug("CONN: idle, closing connection", "idle_timeout", b.opts.IdleTimeout)
		b.limitLog.idle.Do(func() {
			b.log.Info("BROKER: closing idle connections", "remote", c.remote, "idle_timeout", b.opts.IdleTimeout,
				"key", "[limits] idleTimeoutMs", "closed_so_far", b.stats.connClosedIdle.Load())
		})
	case requestTimedOut:
		b.stats.connClosedSlow.Add(1)
		c.log.Debug("CONN: request not received in time, closing connection", "read_timeout", b.opts.ReadTimeout)
		b.limitLog.slowRequest.Do(func() {
			b.log.Warn("BROKER: closing connections that do not send a whole request in time", "remote", c.remote,
				"read_timeout", b.opts.ReadTimeout, "key", "[limits] readTimeoutMs", "closed_so_far", b.stats.connClosedSlow.Load())
		})
	}
}

// bodyLen is the bytes a request's body holds in the connection's budget.
func bodyLen(cmd wire.Command) int64 {
	switch x := cmd.(type) {
	case *wire.Put:
		return int64(len(x.Body))
	case *wire.Sync:
		return int64(len(x.Body))
	case *wire.SyncUnit:
		n := 0
		for i := range x.Syncs {
			n += len(x.Syncs[i].Body)
		}
		return int64(n)
	case *wire.Result:
		return int64(len(x.Body))
	case *wire.Value:
		return int64(len(x.Data))
	}
	return 0
}

// bodyStarted is conn.bodySince while a body is being read and its time
// was not taken yet: relievePressure takes it when it first sees it.
const bodyStarted = 1

// relievePressure runs while requests wait for the broker's byte budget or
// an address's: a connection that holds some of it and whose client has
// taken none of its answers for StallTimeout is closed, and what it held is
// given back. A client that does not read would otherwise keep its share
// until WriteTimeout, and a few of them could keep every other client
// waiting. So is a connection whose body, reserved by its declared length,
// has brought no byte for StallTimeout: a header alone must not hold bytes
// others wait for until ReadTimeout.
func (b *Broker) relievePressure() {
	now := time.Now()
	b.mu.Lock()
	var stalled, silent []*conn
	for c := range b.conns {
		since := c.writingSince.Load()
		if since != 0 && now.Sub(time.Unix(0, since)) >= b.opts.StallTimeout {
			stalled = append(stalled, c)
		}
		switch since := c.bodySince.Load(); {
		case since == bodyStarted:
			// Its time starts now (or at its next socket read).
			c.bodySince.CompareAndSwap(bodyStarted, now.UnixNano())
		case since != 0 && now.Sub(time.Unix(0, since)) >= b.opts.StallTimeout:
			silent = append(silent, c)
		}
	}
	b.mu.Unlock()
	for _, c := range silent {
		if c.closing() || c.bytes.used() == 0 {
			continue
		}
		n := b.stats.connClosedSilentBody.Add(1)
		c.log.Debug("CONN: declared body not sent while buffers are full, closing connection",
			"held_bytes", c.bytes.used(), "stall_timeout", b.opts.StallTimeout)
		b.limitLog.silentBody.Do(func() {
			b.log.Warn("BROKER: buffers full; closing connections that reserved a put body and send none of it", "remote", c.remote,
				"held_bytes", c.bytes.used(), "stall_timeout", b.opts.StallTimeout, "closed_so_far", n)
		})
		c.close()
	}
	for _, c := range stalled {
		if c.closing() || c.bytes.used() == 0 {
			continue
		}
		n := b.stats.connClosedStalled.Add(1)
		c.log.Debug("CONN: client takes no answers while the broker's buffers are full, closing connection",
			"held_bytes", c.bytes.used(), "stall_timeout", b.opts.StallTimeout)
		b.limitLog.stalled.Do(func() {
			b.log.Warn("BROKER: buffers full; closing connections whose clients do not read their answers", "remote", c.remote,
				"held_bytes", c.bytes.used(), "stall_timeout", b.opts.StallTimeout,
				"limit", b.opts.MaxBufferedBytes, "key", "[limits] maxBufferedBytes", "closed_so_far", n)
		})
		c.close()
	}
}

// Resources reports the connection limits at work and the byte budget in
// use (Broker.Resources). Counters count since start. MetaQ's `stats` has no
// such lines, and its answer stays exactly MetaQ's, so these are exported
// as metrics by the server's dashboard instead.
type Resources struct {
	Connections              int64 // open now
	MaxConnections           int   // 0 = no limit
	MaxConnectionsPerAddress int   // 0 = no limit
	RefusedMaxConnections    int64 // refused: maxConnections reached
	RefusedPerAddress        int64 // refused: maxConnectionsPerAddress reached
	ClosedIdle               int64 // closed by idleTimeout
	ClosedReadTimeout        int64 // closed by readTimeout (a request not sent in time)
	ClosedStalled            int64 // closed for not reading answers while the budget was used up
	ClosedSilentBody         int64 // closed for sending none of a reserved body while the budget was used up
	BufferedBytes            int64 // get answers and put bodies held now
	BufferedBytesPeak        int64 // the most held at once since start
	MaxBufferedBytes         int64 // the bound
	GetsSent                 int64 // get answers sent from the log files with sendfile (not copied)
}

// Resources returns the connection and memory counters.
func (b *Broker) Resources() Resources {
	return Resources{
		Connections:              b.stats.connections.Load(),
		MaxConnections:           b.opts.MaxConnections,
		MaxConnectionsPerAddress: b.opts.MaxConnectionsPerAddress,
		RefusedMaxConnections:    b.stats.connRefusedTotal.Load(),
		RefusedPerAddress:        b.stats.connRefusedAddress.Load(),
		ClosedIdle:               b.stats.connClosedIdle.Load(),
		ClosedReadTimeout:        b.stats.connClosedSlow.Load(),
		ClosedStalled:            b.stats.connClosedStalled.Load(),
		ClosedSilentBody:         b.stats.connClosedSilentBody.Load(),
		BufferedBytes:            b.mem.used(),
		BufferedBytesPeak:        b.mem.peakUsed(),
		MaxBufferedBytes:         b.opts.MaxBufferedBytes,
		GetsSent:                 b.stats.getsSent.Load(),
	}
}
