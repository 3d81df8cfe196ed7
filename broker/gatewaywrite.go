package broker

import (
	"fmt"
	"sync"
	"time"
)

// linkWriter writes the gateway's forwarded batches to its connection to
// the master on a goroutine of its own. post appends a batch's frames
// under Gateway.qmu (so they are queued in the order of sends) and
// returns; the write itself (the link's compression, encryption and the
// socket), the longest part of a send, runs outside Gateway.qmu, and the
// frames queued meanwhile go out in one write.
type linkWriter struct {
	mu       sync.Mutex // a leaf: taken under Gateway.qmu by post
	buf      []byte     // frames queued, oldest first
	spare    []byte     // the last written buffer, reused
	deadline time.Time  // the write deadline of the oldest frames in buf
	wake     chan struct{}
	stop     chan struct{} // closed by fwdConn.fail
	stopOnce sync.Once
}

func newLinkWriter() *linkWriter {
	return &linkWriter{wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// queue appends frames, to be written by deadline at the latest.
func (w *linkWriter) queue(frames []byte, deadline time.Time) {
	w.mu.Lock()
	if len(w.buf) == 0 {
		w.deadline = deadline
	}
	w.buf = append(w.buf, frames...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *linkWriter) close() { w.stopOnce.Do(func() { close(w.stop) }) }

// loop writes what is queued on c until c fails. A failed write fails c:
// the puts awaiting answers on it are answered unknown, as when the write
// was the sender's own.
func (w *linkWriter) loop(c *fwdConn) {
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			return
		}
		for {
			w.mu.Lock()
			buf, deadline := w.buf, w.deadline
			if len(buf) == 0 {
				w.mu.Unlock()
				break
			}
			w.buf, w.spare = w.spare[:0], nil
			w.mu.Unlock()
			c.wmu.Lock()
			c.nc.SetWriteDeadline(deadline)
			_, err := c.nc.Write(buf)
			c.wmu.Unlock()
			if err != nil {
				c.fail(fmt.Errorf("write to the master %s: %w", c.addr, err))
				return
			}
			if cap(buf) <= 4<<20 {
				w.mu.Lock()
				w.spare = buf[:0]
				w.mu.Unlock()
			}
		}
	}
}
