package faultsched

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// rawConn is a MetaQ text-protocol client written from the protocol
// specification (put, get, offset), sharing no code with broker/client or
// broker/wire: the workload's second client, and the checker's reader.
// One request at a time; every call has a deadline.
type rawConn struct {
	c      net.Conn
	r      *bufio.Reader
	opaque int32
	to     time.Duration
}

// rawStatus is a non-200 result: the broker's code and text.
type rawStatus struct {
	Code int
	Text string
}

func (e *rawStatus) Error() string { return fmt.Sprintf("result %d: %s", e.Code, e.Text) }

func rawDial(addr string, timeout time.Duration) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, r: bufio.NewReader(c), opaque: -2147483648, to: timeout}, nil
}

func (rc *rawConn) Close() error { return rc.c.Close() }

func (rc *rawConn) next() int32 { rc.opaque++; return rc.opaque }

// send writes one request and reads the frame that answers it: a result
// (code, body) or a value (data).
func (rc *rawConn) send(req []byte, opaque int32) (kind string, code int, body []byte, err error) {
	if err := rc.c.SetDeadline(time.Now().Add(rc.to)); err != nil {
		return "", 0, nil, err
	}
	if _, err := rc.c.Write(req); err != nil {
		return "", 0, nil, err
	}
	for {
		line, err := rc.r.ReadString('\n')
		if err != nil {
			return "", 0, nil, err
		}
		if !strings.HasSuffix(line, "\r\n") {
			return "", 0, nil, fmt.Errorf("header without CRLF: %q", line)
		}
		f := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
		var n int
		var op int64
		switch {
		case f[0] == "result" && len(f) == 4:
			code, err = strconv.Atoi(f[1])
			if err == nil {
				n, err = strconv.Atoi(f[2])
			}
			if err == nil {
				op, err = strconv.ParseInt(f[3], 10, 32)
			}
		case f[0] == "value" && len(f) == 3:
			n, err = strconv.Atoi(f[1])
			if err == nil {
				op, err = strconv.ParseInt(f[2], 10, 32)
			}
		default:
			return "", 0, nil, fmt.Errorf("unexpected header %q", line)
		}
		if err != nil || n < 0 {
			return "", 0, nil, fmt.Errorf("bad header %q", line)
		}
		body = make([]byte, n)
		if _, err := io.ReadFull(rc.r, body); err != nil {
			return "", 0, nil, err
		}
		if int32(op) != opaque {
			continue // an answer to a request given up on
		}
		return f[0], code, body, nil
	}
}

// put stores payload in topic's partition; it returns the answer's
// partition and offset, a *rawStatus for a refusal, or another error when
// the outcome is unknown.
func (rc *rawConn) put(topic string, partition int, payload []byte) (int, int64, error) {
	op := rc.next()
	sum := crc32.ChecksumIEEE(payload) & 0x7FFFFFFF
	req := fmt.Appendf(nil, "put %s %d %d 0 %d %d\r\n", topic, partition, len(payload), sum, op)
	req = append(req, payload...)
	kind, code, body, err := rc.send(req, op)
	if err != nil {
		return 0, 0, err
	}
	if kind != "result" {
		return 0, 0, fmt.Errorf("put answered with %s", kind)
	}
	if code != 200 {
		return 0, 0, &rawStatus{Code: code, Text: string(body)}
	}
	f := strings.Split(string(body), " ")
	if len(f) != 3 {
		return 0, 0, fmt.Errorf("put answer %q", body)
	}
	p, err1 := strconv.Atoi(f[1])
	off, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("put answer %q", body)
	}
	return p, off, nil
}

// get reads up to max bytes of the partition from offset: the data, or
// nil at the end (404), or the error.
func (rc *rawConn) get(topic, group string, partition int, offset int64, max int) ([]byte, error) {
	op := rc.next()
	kind, code, body, err := rc.send(fmt.Appendf(nil, "get %s %s %d %d %d %d\r\n", topic, group, partition, offset, max, op), op)
	if err != nil {
		return nil, err
	}
	if kind == "value" {
		return body, nil
	}
	if code == 404 {
		return nil, nil
	}
	return nil, &rawStatus{Code: code, Text: string(body)}
}

// offset asks for the nearest valid offset to off.
func (rc *rawConn) offset(topic, group string, partition int, off int64) (int64, error) {
	op := rc.next()
	kind, code, body, err := rc.send(fmt.Appendf(nil, "offset %s %s %d %d %d\r\n", topic, group, partition, off, op), op)
	if err != nil {
		return 0, err
	}
	if kind != "result" || code != 200 {
		return 0, &rawStatus{Code: code, Text: string(body)}
	}
	return strconv.ParseInt(string(body), 10, 64)
}

// record is one stored message: where it starts and its body.
type record struct {
	Offset int64
	Body   []byte
}

// decodeRecords splits stored bytes starting at base into records; a
// partial record at the end is left (its start is returned as next).
func decodeRecords(data []byte, base int64) (recs []record, next int64, err error) {
	pos := 0
	for len(data)-pos >= 20 {
		n := int(int32(uint32(data[pos])<<24 | uint32(data[pos+1])<<16 | uint32(data[pos+2])<<8 | uint32(data[pos+3])))
		if n < 0 || n > 32<<20 {
			return recs, base + int64(pos), fmt.Errorf("record at %d: length %d", base+int64(pos), n)
		}
		if len(data)-pos < 20+n {
			break
		}
		sum := uint32(data[pos+4])<<24 | uint32(data[pos+5])<<16 | uint32(data[pos+6])<<8 | uint32(data[pos+7])
		body := data[pos+20 : pos+20+n]
		if crc32.ChecksumIEEE(body)&0x7FFFFFFF != sum {
			return recs, base + int64(pos), fmt.Errorf("record at %d: checksum mismatch", base+int64(pos))
		}
		recs = append(recs, record{Offset: base + int64(pos), Body: body})
		pos += 20 + n
	}
	return recs, base + int64(pos), nil
}

// hole is a range of a partition a site skips (answers 301 past it): the
// records it lost to damage and has not repaired.
type hole struct{ From, To int64 }

// run is a stretch of a partition's records, from Off.
type run struct {
	Off  int64
	Data []byte
}

// readPartition reads the whole partition from the start (the offset the
// broker names as nearest to 0) to its readable end, as runs of records
// between the ranges the site skips (a get inside one answers 301 with an
// offset beyond it), which are returned as holes.
func readPartition(addr, topic string, partition int) (runs []run, holes []hole, err error) {
	rc, err := rawDial(addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	start, err := rc.offset(topic, "chaos-checker", partition, 0)
	var st *rawStatus
	if errors.As(err, &st) && st.Code == 404 {
		return nil, nil, nil // no store: nothing written
	}
	if err != nil {
		return nil, nil, err
	}
	cur := run{Off: start}
	flush := func() {
		if len(cur.Data) > 0 || len(runs) == 0 {
			runs = append(runs, cur)
		}
	}
	off := start
	for {
		b, err := rc.get(topic, "chaos-checker", partition, off, 1<<20)
		if errors.As(err, &st) && st.Code == 301 {
			next, perr := strconv.ParseInt(st.Text, 10, 64)
			if perr != nil || next <= off {
				flush()
				return runs, holes, err
			}
			holes = append(holes, hole{off, next})
			flush()
			cur, off = run{Off: next}, next
			continue
		}
		if err != nil || b == nil {
			flush()
			return runs, holes, err
		}
		// Keep whole records only: a run may end inside one.
		_, next, derr := decodeRecords(b, off)
		if derr != nil {
			flush()
			return runs, holes, derr
		}
		if next == off {
			flush()
			return runs, holes, fmt.Errorf("%s-%d at %d: a record larger than 1 MiB", topic, partition, off)
		}
		cur.Data = append(cur.Data, b[:next-off]...)
		off = next
	}
}
