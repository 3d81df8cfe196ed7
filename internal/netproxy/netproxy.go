// Package netproxy is an in-process TCP proxy for tests: it forwards
// connections from a loopback listener to a target and can delay, throttle,
// cut and corrupt the byte streams, so WAN faults can be exercised without
// root or network namespaces.
package netproxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Direction names one half of a proxied connection.
type Direction int

const (
	// Upstream is client → target.
	Upstream Direction = iota
	// Downstream is target → client.
	Downstream
)

// chunk is the unit the proxy moves; small enough that a delay or a cut
// lands inside an application frame.
const chunk = 16 << 10

// Proxy forwards every accepted connection to a target address.
// All methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target atomic.Pointer[string]

	delay  atomic.Int64 // one-way delay in ns, both directions
	rateBp atomic.Int64 // bytes/s per direction per connection; 0 = unlimited
	refuse atomic.Bool  // close new connections at once
	stall  atomic.Bool  // hold all bytes without closing (a black hole)

	mu    sync.Mutex
	conns map[*pair]struct{}
	// one-shot faults, consumed by the next byte that reaches them
	flip [2]int64 // bytes still to pass before flipping one; -1 = none
	cut  [2]int64 // bytes still to pass before cutting; -1 = none

	flips, cuts atomic.Int64
	moved       [2]atomic.Int64 // bytes forwarded, by Direction
	accepted    atomic.Int64    // connections forwarded since New
	closed      atomic.Bool
	wg          sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	once           sync.Once
	hold           atomic.Bool // HoldOpen: hold this connection's bytes
}

func (p *pair) close() {
	p.once.Do(func() {
		p.client.Close()
		p.server.Close()
	})
}

// New listens on 127.0.0.1:0 and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, conns: map[*pair]struct{}{}}
	p.flip = [2]int64{-1, -1}
	p.cut = [2]int64{-1, -1}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go (for a restarted server on a new port).
func (p *Proxy) SetTarget(addr string) { p.target.Store(&addr) }

// SetDelay sets the one-way delay added in each direction.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// SetRate caps each direction of each connection at bytesPerSec (0 = unlimited).
// It applies to connections opened afterwards.
func (p *Proxy) SetRate(bytesPerSec int64) { p.rateBp.Store(bytesPerSec) }

// SetStall holds every byte in flight without closing anything while on: a
// link that went silent (a black hole), which only keepalives can detect.
func (p *Proxy) SetStall(on bool) { p.stall.Store(on) }

// HoldOpen holds every byte of the connections open now, in both
// directions, without closing anything (a path that stopped delivering
// for those connections only: new connections pass), until release is
// called; then what was held is delivered, in order, even to a peer whose
// other side closed meanwhile.
func (p *Proxy) HoldOpen() (release func()) {
	p.mu.Lock()
	held := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		pr.hold.Store(true)
		held = append(held, pr)
	}
	p.mu.Unlock()
	return func() {
		for _, pr := range held {
			pr.hold.Store(false)
		}
	}
}

// SetRefuse makes the proxy close new connections immediately (a down link).
func (p *Proxy) SetRefuse(on bool) { p.refuse.Store(on) }

// FlipAfter arranges for one byte to be inverted in direction d after n more
// bytes have passed in that direction (on whichever connection carries them).
func (p *Proxy) FlipAfter(d Direction, n int64) {
	p.mu.Lock()
	p.flip[d] = n
	p.mu.Unlock()
}

// CutAfter closes the connection that carries the byte n bytes from now in
// direction d, after forwarding the n bytes before it: a cut inside a frame.
func (p *Proxy) CutAfter(d Direction, n int64) {
	p.mu.Lock()
	p.cut[d] = n
	p.mu.Unlock()
}

// CutAll closes every open connection now.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.close()
		delete(p.conns, c)
	}
	p.cuts.Add(1)
}

// Flips and Cuts count the faults injected so far.
func (p *Proxy) Flips() int64 { return p.flips.Load() }

// Bytes is the number of bytes forwarded in direction d since New.
func (p *Proxy) Bytes(d Direction) int64 { return p.moved[d].Load() }

// Accepted is the number of connections forwarded since New.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Cuts counts connections cut by CutAfter or CutAll.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Conns is the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the listener, closes every connection and waits for the
// proxy's goroutines. Idempotent.
func (p *Proxy) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", *p.target.Load(), 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed.Load() {
			p.mu.Unlock()
			pr.close()
			return
		}
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		p.accepted.Add(1)
		p.wg.Add(2)
		go p.pipe(pr, Upstream, c, s)
		go p.pipe(pr, Downstream, s, c)
	}
}

type timed struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst through a delay line and a rate limiter.
func (p *Proxy) pipe(pr *pair, d Direction, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		pr.close()
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}()
	var lim *rate.Limiter
	if r := p.rateBp.Load(); r > 0 {
		lim = rate.NewLimiter(rate.Limit(r), chunk)
	}
	q := make(chan timed, 1024)
	done := make(chan struct{})
	go func() { // reader; owned by pipe, which waits on done
		defer close(done)
		defer close(q)
		for {
			buf := make([]byte, chunk)
			n, err := src.Read(buf)
			if n > 0 {
				q <- timed{at: time.Now().Add(time.Duration(p.delay.Load())), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		pr.close()
		for range q { // unblock the reader if the queue is full
		}
		<-done
	}()
	for t := range q {
		if w := time.Until(t.at); w > 0 {
			time.Sleep(w)
		}
		for p.stall.Load() || pr.hold.Load() {
			if p.closed.Load() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		data, cut := p.fault(d, t.data)
		if lim != nil {
			for rest := data; len(rest) > 0; {
				n := min(len(rest), chunk)
				if err := lim.WaitN(context.Background(), n); err != nil {
					return
				}
				if _, err := dst.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
			}
		} else if len(data) > 0 {
			if _, err := dst.Write(data); err != nil {
				return
			}
		}
		p.moved[d].Add(int64(len(data)))
		if cut {
			p.cuts.Add(1)
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			return
		}
	}
}

// fault applies pending flips and cuts to one chunk. It returns the bytes to
// forward and whether to cut the connection after them.
func (p *Proxy) fault(d Direction, data []byte) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(len(data))
	if f := p.flip[d]; f >= 0 {
		if f < n {
			data[f] ^= 0xff
			p.flip[d] = -1
			p.flips.Add(1)
		} else {
			p.flip[d] = f - n
		}
	}
	if c := p.cut[d]; c >= 0 {
		if c < n {
			p.cut[d] = -1
			return data[:c], true
		}
		p.cut[d] = c - n
	}
	return data, false
}
