// Package zktest holds ZooKeeper fault injection for tests: a dialer that
// learns a session's id and password and can cut its connections, and
// ExpireSession, which ends a session from outside the way the classic
// ZooKeeper test trick does. It speaks just enough of the ZooKeeper wire
// protocol for that and imports nothing from the project.
package zktest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Tap is a dialer for registry.Options.Dialer. It remembers the session id
// and password ZooKeeper hands out, by reading the connect response as it
// passes, and can cut every connection and refuse new ones.
type Tap struct {
	mu      sync.Mutex
	session int64
	passwd  []byte
	conns   []net.Conn
	blocked bool
	// loseReplyTo arms LoseReplyTo ("" when not armed); lost counts the
	// replies it dropped.
	loseReplyTo string
	blockAfter  bool
	lost        int
	// blockWriteAddr and blockWritePart arm BlockBeforeWrite ("" when not
	// armed).
	blockWriteAddr, blockWritePart string
}

// BlockBeforeWrite arms a one-shot fault: when the next write request
// (create, delete, setData or multi) whose frame holds pathPart is about
// to go to the ZooKeeper at addr, it is not sent: the tap blocks as Block
// does (every connection through it, to any ZooKeeper, is cut and new ones
// are refused until Unblock). The write is never applied; reads before it
// were answered. It relies on the client writing one request per Write.
func (z *Tap) BlockBeforeWrite(addr, pathPart string) {
	z.mu.Lock()
	z.blockWriteAddr, z.blockWritePart = addr, pathPart
	z.mu.Unlock()
}

// LoseReplyTo arms a one-shot fault: the next write request (create,
// delete, setData or multi) whose frame holds pathPart goes to ZooKeeper,
// and the connection is cut when its answer comes back, before the client
// reads it. ZooKeeper has applied the write; the client sees a lost
// connection and reconnects (its session lives on). It relies on the
// client writing one request per Write and reading a frame's length and
// body in separate reads, as go-zookeeper does.
func (z *Tap) LoseReplyTo(pathPart string) {
	z.mu.Lock()
	z.loseReplyTo, z.blockAfter = pathPart, false
	z.mu.Unlock()
}

// LoseReplyThenBlock is LoseReplyTo, and the tap then refuses new
// connections until Unblock (ZooKeeper stays away after the lost answer).
func (z *Tap) LoseReplyThenBlock(pathPart string) {
	z.mu.Lock()
	z.loseReplyTo, z.blockAfter = pathPart, true
	z.mu.Unlock()
}

// LostReplies counts the answers LoseReplyTo dropped.
func (z *Tap) LostReplies() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.lost
}

// Dial has the signature of registry.Options.Dialer.
func (z *Tap) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	z.mu.Lock()
	blocked := z.blocked
	z.mu.Unlock()
	if blocked {
		return nil, errors.New("zktest: dial blocked")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	z.mu.Lock()
	z.conns = append(z.conns, c)
	z.mu.Unlock()
	return &tapConn{Conn: c, tap: z}, nil
}

// Block cuts every connection and refuses new ones until Unblock, so the
// session expires on the server after its timeout.
func (z *Tap) Block() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.blocked = true
	for _, c := range z.conns {
		c.Close()
	}
	z.conns = nil
}

// Unblock lets the client connect again.
func (z *Tap) Unblock() {
	z.mu.Lock()
	z.blocked = false
	z.mu.Unlock()
}

// Blocked says whether the tap refuses connections now: after Block, or
// once an armed BlockBeforeWrite fired, until Unblock.
func (z *Tap) Blocked() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.blocked
}

// Credentials returns the last session id and password seen (0, nil before
// the first session).
func (z *Tap) Credentials() (int64, []byte) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.session, append([]byte(nil), z.passwd...)
}

type tapConn struct {
	net.Conn
	tap  *Tap
	buf  []byte
	done bool
	// drop is the xid of a request whose answer is to be lost (LoseReplyTo);
	// dropping says it is set.
	drop     atomic.Int32
	dropping atomic.Bool
}

// ZooKeeper's write opcodes: create, delete, setData, multi, create2.
var writeOps = map[int32]bool{1: true, 2: true, 5: true, 14: true, 15: true}

// Write passes a request on; an armed LoseReplyTo picks the request whose
// answer is to be lost: length, xid int32, opcode int32, body.
func (c *tapConn) Write(p []byte) (int, error) {
	c.tap.mu.Lock()
	if bp := c.tap.blockWritePart; bp != "" && c.done && len(p) >= 12 && c.RemoteAddr().String() == c.tap.blockWriteAddr &&
		writeOps[int32(binary.BigEndian.Uint32(p[8:12]))] && bytes.Contains(p[12:], []byte(bp)) {
		c.tap.blockWriteAddr, c.tap.blockWritePart = "", ""
		c.tap.blocked = true
		for _, o := range c.tap.conns {
			o.Close()
		}
		c.tap.conns = nil
		c.tap.mu.Unlock()
		return 0, errors.New("zktest: write blocked (BlockBeforeWrite)")
	}
	part := c.tap.loseReplyTo
	if part != "" && c.done && len(p) >= 12 && writeOps[int32(binary.BigEndian.Uint32(p[8:12]))] && bytes.Contains(p[12:], []byte(part)) {
		c.tap.loseReplyTo = ""
		c.drop.Store(int32(binary.BigEndian.Uint32(p[4:8])))
		c.dropping.Store(true)
	}
	c.tap.mu.Unlock()
	return c.Conn.Write(p)
}

// Read passes bytes through and parses the first frame, the connect
// response: length, protocolVersion int32, timeOut int32, sessionId int64,
// passwd (int32 length + bytes).
func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	// A reply's body starts with its xid (a length read is 4 bytes long).
	if c.dropping.Load() && n > 4 && int32(binary.BigEndian.Uint32(p[:4])) == c.drop.Load() {
		c.tap.mu.Lock()
		c.tap.lost++
		if c.tap.blockAfter {
			c.tap.blocked = true
		}
		c.tap.mu.Unlock()
		c.Conn.Close()
		return 0, errors.New("zktest: reply lost (LoseReplyTo)")
	}
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			flen := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) >= 4+flen && flen >= 20 {
				body := c.buf[4 : 4+flen]
				sid := int64(binary.BigEndian.Uint64(body[8:16]))
				plen := int(binary.BigEndian.Uint32(body[16:20]))
				if sid != 0 && 20+plen <= len(body) {
					c.tap.mu.Lock()
					c.tap.session = sid
					c.tap.passwd = append([]byte(nil), body[20:20+plen]...)
					c.tap.mu.Unlock()
				}
				c.done = true
				c.buf = nil
			}
		}
	}
	return n, err
}

// ErrSessionGone is ExpireSession's error when the server no longer knows
// the session (already expired, or a wrong password).
var ErrSessionGone = errors.New("wrong password or already expired")

// ExpireSession ends a session from outside: it attaches to the session with
// its id and password on a second connection and closes it there. The server
// deletes the session's ephemeral nodes at once, and the original client
// learns on its next reconnect that the session expired.
func ExpireSession(zkAddr string, session int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", zkAddr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("zktest: dial: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := make([]byte, 0, 64)
	req = binary.BigEndian.AppendUint32(req, 0)               // length, patched below
	req = binary.BigEndian.AppendUint32(req, 0)               // protocolVersion
	req = binary.BigEndian.AppendUint64(req, 0)               // lastZxidSeen
	req = binary.BigEndian.AppendUint32(req, 10000)           // timeOut
	req = binary.BigEndian.AppendUint64(req, uint64(session)) // sessionId
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("zktest: connect: %w", err)
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("zktest: connect response: %w", err)
	}
	if len(resp) < 16 {
		return fmt.Errorf("zktest: short connect response")
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != session {
		return fmt.Errorf("zktest: server gave session 0x%x, want 0x%x (%w)", got, session, ErrSessionGone)
	}
	// closeSession: length 8, xid 1, opcode -11.
	closeReq := binary.BigEndian.AppendUint32(nil, 8)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if _, err := c.Write(closeReq); err != nil {
		return fmt.Errorf("zktest: close: %w", err)
	}
	if _, err := readFrame(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("zktest: close reply: %w", err)
	}
	return nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}
