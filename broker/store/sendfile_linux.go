package store

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// sendSections sends head and then the sections to w without copying them
// through the process when w is a TCP socket (a syscall.Conn whose
// descriptor accepts it), head in the same packet as the first section;
// ok is false when it is not, and nothing was sent. With several sections
// (spliceMinSections) and a pipe free (see splicePipes) the sections are
// spliced into the pipe, one splice(2) per section, and from the pipe to
// the socket with as few as the pipe's size allows; otherwise each section
// is its own sendfile(2) (under TCP_CORK when there are several). The socket's write deadline applies: the
// runtime's poller waits for it to be writable and gives up at the
// deadline. A section the file cannot fill (it ended before) stops the
// send with io.ErrUnexpectedEOF after a correct prefix.
func sendSections(w io.Writer, head []byte, secs []section, progress func()) (sent int64, ok bool, err error) {
	sc, isConn := w.(syscall.Conn)
	if !isConn || !sendfileWriter(w) {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	if len(secs) >= spliceMinSections {
		// (With fewer, a sendfile each costs no more than two splices each.)
		if p := splicePipes.get(); p != nil {
			sent, err := spliceSections(rc, p, head, secs, progress)
			if err != nil || p.held > 0 {
				p.close() // it may hold bytes of this run: never lend it again
			} else {
				splicePipes.put(p)
			}
			return sent, true, err
		}
	}
	if len(secs) > 1 {
		// Several sections: let the kernel fill whole packets across
		// them instead of sending one (and waking the reader) per section.
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) })
		defer rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 0) })
	}
	sent, err = sendHead(rc, head, len(secs) > 0)
	if err != nil {
		return sent, true, err
	}
	for _, s := range secs {
		off, left := s.off, s.n
		in := int(s.f.Fd())
		var serr error
		werr := rc.Write(func(fd uintptr) bool {
			for left > 0 {
				n, e := unix.Sendfile(int(fd), in, &off, int(min(left, 1<<30)))
				if n > 0 {
					left -= int64(n)
					sent += int64(n)
					if progress != nil {
						progress()
					}
				}
				switch {
				case e == unix.EAGAIN:
					return false // wait until the socket is writable
				case e == unix.EINTR:
					continue
				case e != nil:
					serr = e
					return true
				case n == 0:
					serr = io.ErrUnexpectedEOF // the file ended before the section
					return true
				}
			}
			return true
		})
		if werr == nil {
			werr = serr
		}
		if werr != nil {
			return sent, true, fmt.Errorf("store: sendfile %s at %d: %w", s.f.Name(), off, werr)
		}
	}
	return sent, true, nil
}

// sendHead sends head to the socket; with more, it waits in the socket
// (MSG_MORE) for what follows, which pushes both out together.
func sendHead(rc syscall.RawConn, head []byte, more bool) (int64, error) {
	if len(head) == 0 {
		return 0, nil
	}
	flags := unix.MSG_NOSIGNAL
	if more {
		flags |= unix.MSG_MORE
	}
	var sent int64
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		for len(head) > 0 {
			n, e := unix.SendmsgN(int(fd), head, nil, nil, flags)
			if n > 0 {
				head = head[n:]
				sent += int64(n)
			}
			switch {
			case e == unix.EAGAIN:
				return false
			case e == unix.EINTR:
				continue
			case e != nil:
				serr = e
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = serr
	}
	if werr != nil {
		return sent, fmt.Errorf("store: send answer header: %w", werr)
	}
	return sent, nil
}

// spliceSections sends head and the sections through p: each section is
// spliced from its file into the pipe (the page cache's pages, not
// copies), and the pipe into the socket whenever it is full and at the
// end. The socket sees one send per pipeful instead of one per section,
// all but the last with SPLICE_F_MORE (so no TCP_CORK either); a get of a
// shared log's interleaved chunks costs about a third less CPU than a
// sendfile per chunk (BENCH.md). p.held says how many bytes are left in
// the pipe on return (0 unless err is set).
func spliceSections(rc syscall.RawConn, p *splicePipe, head []byte, secs []section, progress func()) (int64, error) {
	sent, err := sendHead(rc, head, len(secs) > 0)
	if err != nil {
		return sent, err
	}
	ps := pipeSend{rc: rc, p: p, sent: sent, progress: progress}
	if err := ps.sections(secs); err != nil {
		return ps.sent, err
	}
	return ps.sent, ps.pump(true)
}

// sendBatch is SendBatch on Linux: every piece goes through one pipe (its
// bytes written into it, a run's sections spliced into it from the page
// cache) and the pipe into the socket once per pipeful, so a batch of
// answers costs the socket one send, not one per answer (and one more per
// answer's header). ok is false, and nothing was sent, when w is not a
// plain TCP socket or no pipe is free.
func sendBatch(w io.Writer, pieces []Piece, progress func()) (sent int64, ok bool, err error) {
	sc, isConn := w.(syscall.Conn)
	if !isConn || !sendfileWriter(w) {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	p := splicePipes.get()
	if p == nil {
		return 0, false, nil
	}
	ps := pipeSend{rc: rc, p: p, progress: progress}
	err = ps.pieces(pieces)
	if err != nil || p.held > 0 {
		p.close() // it may hold bytes of this batch: never lend it again
	} else {
		splicePipes.put(p)
	}
	return ps.sent, true, err
}

// pipeSend fills a pipe and empties it into a socket (spliceSections,
// sendBatch), counting the bytes that reached the socket.
type pipeSend struct {
	rc       syscall.RawConn
	p        *splicePipe
	sent     int64
	progress func()
}

// pieces sends each piece in order, then empties the pipe. On a section
// the file cannot fill, what the pipe holds (a correct prefix) is sent
// before the error is returned.
func (ps *pipeSend) pieces(pieces []Piece) error {
	for _, pc := range pieces {
		if len(pc.Bytes) > 0 {
			if err := ps.write(pc.Bytes); err != nil {
				return err
			}
		}
		if pc.Run != nil {
			if err := ps.sections(pc.Run.secs); err != nil {
				return err
			}
		}
	}
	return ps.pump(true)
}

// write copies b into the pipe, emptying it into the socket when full.
func (ps *pipeSend) write(b []byte) error {
	p := ps.p
	for len(b) > 0 {
		n, e := unix.Write(p.w, b)
		if n > 0 {
			b = b[n:]
			p.held += n
			continue
		}
		switch {
		case e == unix.EAGAIN:
			if err := ps.pump(false); err != nil {
				return err
			}
		case e == unix.EINTR:
		default:
			if e == nil {
				e = io.ErrShortWrite
			}
			return fmt.Errorf("store: write to pipe: %w", e)
		}
	}
	return nil
}

// sections splices secs into the pipe, emptying it into the socket when
// full. A section the file cannot fill sends what the pipe holds (a
// correct prefix) and returns the error.
func (ps *pipeSend) sections(secs []section) error {
	p := ps.p
	for _, s := range secs {
		off, left := s.off, s.n
		in := int(s.f.Fd())
		for left > 0 {
			n, e := unix.Splice(in, &off, p.w, nil, int(min(left, int64(p.size))), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if n > 0 {
				left -= n
				p.held += int(n)
				continue
			}
			switch {
			case e == unix.EAGAIN:
				// The pipe is full: empty it into the socket.
				if err := ps.pump(false); err != nil {
					return err
				}
			case e == unix.EINTR:
			default:
				if e == nil {
					e = io.ErrUnexpectedEOF // the file ended before the section
				}
				// What is in the pipe is a correct prefix: send it, then stop.
				if err := ps.pump(true); err != nil {
					return err
				}
				return fmt.Errorf("store: splice %s at %d: %w", s.f.Name(), off, e)
			}
		}
	}
	return nil
}

// pump empties the pipe into the socket; unless last, with SPLICE_F_MORE
// (more follows: the kernel may hold a partial packet back).
func (ps *pipeSend) pump(last bool) error {
	p := ps.p
	var serr error
	werr := ps.rc.Write(func(fd uintptr) bool {
		for p.held > 0 {
			fl := unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
			if !last {
				fl |= unix.SPLICE_F_MORE
			}
			n, e := unix.Splice(p.r, nil, int(fd), nil, p.held, fl)
			if n > 0 {
				p.held -= int(n)
				ps.sent += n
				if ps.progress != nil {
					ps.progress()
				}
			}
			switch {
			case e == unix.EAGAIN:
				return false // wait until the socket is writable
			case e == unix.EINTR:
				continue
			case e != nil:
				serr = e
				return true
			case n == 0:
				serr = io.ErrUnexpectedEOF // the pipe gave nothing: never expected
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = serr
	}
	if werr != nil {
		return fmt.Errorf("store: splice to socket: %w", werr)
	}
	return nil
}

// spliceLikely reports whether a run of sections would be spliced through
// a pipe if it were sent now: it has spliceMinSections and a pipe is free.
func spliceLikely(sections int) bool {
	return sections >= spliceMinSections && splicePipes.likelyFree()
}

// spliceMinSections is the fewest sections a run is spliced through a pipe
// for: below it each section's own sendfile costs no more (BENCH.md).
const spliceMinSections = 3

// splicePipe is a pipe a run is sent through (spliceSections).
type splicePipe struct {
	r, w int
	size int // its capacity in bytes
	held int // bytes in it now
	pool *pipePool
}

// maxSplicePipes bounds the pipes in existence at once (two descriptors
// each): a send that finds none free uses sendfile instead. Writers that
// send at the same moment are few (one per connection sending an answer).
// Under a low open-file limit there are fewer (pipeBound), so the pipes
// never take the descriptors segment files and connections need.
const maxSplicePipes = 16

// pipeBound is the number of pipes allowed under an open-file limit of
// limit (0: unknown): one pipe per 128 descriptors, at most maxSplicePipes.
func pipeBound(limit uint64) int {
	if limit == 0 {
		return maxSplicePipes
	}
	return int(min(limit/128, maxSplicePipes))
}

// openFileLimit is the process's soft RLIMIT_NOFILE, 0 when unknown or
// unlimited.
func openFileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return rl.Cur
}

// splicePipeSize is the capacity asked of each pipe: most answers
// (maxTransferSize, 1 MiB by default) fit in one, so they reach the socket
// in one splice. A system that allows less keeps what it gives.
const splicePipeSize = 1 << 20

// pipePool lends pipes: at most max exist, free ones wait in free.
type pipePool struct {
	free chan *splicePipe
	n    atomic.Int32 // pipes in existence
	max  int32
}

// splicePipes is the process's pool, sized when first used: a process
// lowers its open-file limit at start (or Go raises it) before any get.
var splicePipes = &lazyPipePool{}

// lazyPipePool makes its pool on first use.
type lazyPipePool struct {
	once sync.Once
	pool *pipePool
	// off makes get lend nothing: every run is sent with sendfile (tests
	// compare the two ways).
	off atomic.Bool
}

// made returns the pool, made on first use.
func (l *lazyPipePool) made() *pipePool {
	l.once.Do(func() { l.pool = newPipePool(pipeBound(openFileLimit())) })
	return l.pool
}

func (l *lazyPipePool) get() *splicePipe {
	if l.off.Load() {
		return nil
	}
	return l.made().get()
}

func (l *lazyPipePool) put(p *splicePipe) { l.pool.put(p) }

// likelyFree reports whether get would lend a pipe now (another sender
// may take it first).
func (l *lazyPipePool) likelyFree() bool {
	if l.off.Load() {
		return false
	}
	pp := l.made()
	return len(pp.free) > 0 || pp.n.Load() < pp.max
}

// inUse returns the pipes in existence.
func (l *lazyPipePool) inUse() int32 { return l.made().n.Load() }

func newPipePool(max int) *pipePool {
	return &pipePool{free: make(chan *splicePipe, max), max: int32(max)}
}

// get returns a free pipe, a new one, or nil when max exist (or a pipe
// cannot be made: out of descriptors, say).
func (pp *pipePool) get() *splicePipe {
	select {
	case p := <-pp.free:
		return p
	default:
	}
	if pp.n.Add(1) > pp.max {
		pp.n.Add(-1)
		return nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		pp.n.Add(-1)
		return nil
	}
	p := &splicePipe{r: fds[0], w: fds[1], pool: pp}
	size, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, splicePipeSize)
	if err != nil {
		size, err = unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0)
	}
	if err != nil || size <= 0 {
		size = 64 << 10 // Linux's default
	}
	p.size = size
	return p
}

// put gives back an empty pipe.
func (pp *pipePool) put(p *splicePipe) {
	select {
	case pp.free <- p:
	default:
		p.close()
	}
}

// close closes the pipe (and whatever it holds) and uncounts it.
func (p *splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
	p.pool.n.Add(-1)
}

// sendfileWriter reports whether w is a plain TCP socket (a TLS connection
// is not: its bytes must be encrypted in the process).
func sendfileWriter(w io.Writer) bool {
	_, ok := w.(*net.TCPConn)
	return ok
}
