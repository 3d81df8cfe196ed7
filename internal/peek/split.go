package peek

import (
	"net"
	"sync"
	"time"
)

// Split serves two protocols from one listener of its own: a connection
// whose first byte is the one given goes to Matched's Accept, any other to
// Rest's. (The MetaQ port does the same inside the broker, which also
// knows MetaQ's requests; Split is for a listener that is not the MetaQ
// port, such as a separate [replication] listen.)
//
// Closing either listener closes the listener underneath and both: they
// share one port, and its owner (whoever serves Rest) decides when it ends.
type Split struct {
	ln      net.Listener
	first   byte
	sniff   time.Duration
	matched *splitListener
	rest    *splitListener

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and the sniffers

	mu      sync.Mutex
	pending map[net.Conn]struct{} // being sniffed; closed by Close
}

// NewSplit starts accepting on ln. A connection that sends nothing within
// sniff is closed.
func NewSplit(ln net.Listener, first byte, sniff time.Duration) *Split {
	s := &Split{ln: ln, first: first, sniff: sniff, done: make(chan struct{}), pending: map[net.Conn]struct{}{}}
	s.matched = &splitListener{s: s, conns: make(chan net.Conn)}
	s.rest = &splitListener{s: s, conns: make(chan net.Conn)}
	s.wg.Add(1)
	go s.acceptLoop() // ended by close, which waits for it
	return s
}

// Matched is the listener of the connections that start with the byte.
func (s *Split) Matched() net.Listener { return s.matched }

// Rest is the listener of every other connection.
func (s *Split) Rest() net.Listener { return s.rest }

func (s *Split) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			// The listener is closed (by close, or under it): end both.
			s.shutdown()
			return
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.pending[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.route(c) // counted in wg, closed by close through pending
	}
}

// route reads c's first byte and hands c to the listener it belongs to.
func (s *Split) route(c net.Conn) {
	defer s.wg.Done()
	b, pc, err := First(c, time.Now().Add(s.sniff))
	s.mu.Lock()
	delete(s.pending, c)
	s.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	to := s.rest
	if b == s.first {
		to = s.matched
	}
	select {
	case to.conns <- pc:
	case <-s.done:
		pc.Close()
	}
}

// close stops accepting, closes the connections not handed over yet and
// waits for the goroutines.
func (s *Split) close() {
	s.shutdown()
	s.wg.Wait()
}

// shutdown is close without the wait (the accept loop calls it).
func (s *Split) shutdown() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.pending {
			c.Close()
		}
		s.mu.Unlock()
		s.ln.Close()
	})
}

type splitListener struct {
	s     *Split
	conns chan net.Conn
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.s.done:
		return nil, net.ErrClosed
	}
}

// Close closes the shared listener and both halves.
func (l *splitListener) Close() error {
	l.s.close()
	return nil
}

func (l *splitListener) Addr() net.Addr { return l.s.ln.Addr() }
