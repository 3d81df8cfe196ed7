package registry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// zkTap is a Dialer that remembers the session id and password ZooKeeper
// hands out (by reading the connect response as it passes), can cut every
// connection and refuse new ones.
type zkTap struct {
	mu      sync.Mutex
	session int64
	passwd  []byte
	conns   []net.Conn
	blocked bool
}

func (z *zkTap) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	z.mu.Lock()
	blocked := z.blocked
	z.mu.Unlock()
	if blocked {
		return nil, errors.New("zkTap: blocked")
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

// Block cuts every connection and refuses new ones until Unblock.
func (z *zkTap) Block() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.blocked = true
	for _, c := range z.conns {
		c.Close()
	}
	z.conns = nil
}

func (z *zkTap) Unblock() {
	z.mu.Lock()
	z.blocked = false
	z.mu.Unlock()
}

func (z *zkTap) credentials() (int64, []byte) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.session, append([]byte(nil), z.passwd...)
}

type tapConn struct {
	net.Conn
	tap  *zkTap
	buf  []byte
	done bool
}

// Read passes bytes through and parses the first frame, the connect
// response: len, protocolVersion int32, timeOut int32, sessionId int64,
// passwd (int32 length + bytes).
func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
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

// expireSession ends a session from outside: it attaches to the session with
// its id and password on a second connection and closes it there (the
// classic trick). The server deletes the session's ephemeral nodes, and the
// original client learns on reconnect that its session expired.
func expireSession(t *testing.T, zkAddr string, session int64, passwd []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", zkAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("expireSession: dial: %v", err)
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
		t.Fatalf("expireSession: connect: %v", err)
	}
	resp, err := readFrame(c)
	if err != nil {
		t.Fatalf("expireSession: connect response: %v", err)
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != session {
		t.Fatalf("expireSession: server gave session 0x%x, want 0x%x", got, session)
	}
	// closeSession: len, xid, opcode -11.
	closeReq := binary.BigEndian.AppendUint32(nil, 8)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if _, err := c.Write(closeReq); err != nil {
		t.Fatalf("expireSession: close: %v", err)
	}
	if _, err := readFrame(c); err != nil && !errors.Is(err, io.EOF) {
		t.Logf("expireSession: close reply: %v", err)
	}
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
