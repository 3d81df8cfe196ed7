package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Default limits of a Decoder.
const (
	// DefaultMaxBodySize is the largest body a Decoder accepts by default.
	DefaultMaxBodySize = 16 << 20
	// DefaultMaxLineSize is the longest header line (without CRLF) accepted by
	// default. Java clients send topics and groups of a few dozen bytes.
	DefaultMaxLineSize = 16 << 10
)

// Decoder reads frames from a bufio.Reader. It is not safe for concurrent use.
type Decoder struct {
	r *bufio.Reader
	// MaxBodySize bounds the body of put, sync, result and value frames; a
	// larger declared length is a FatalError and the body is not read.
	MaxBodySize int
	// MaxLineSize bounds the header line.
	MaxLineSize int
	// Alloc, when set, provides the buffer for a body of n bytes (it must
	// return a slice of length n). A broker uses it to recycle put bodies;
	// nil allocates a new slice.
	Alloc func(n int) []byte
	// Reuse, when set, makes Decode return the plain puts and results of
	// its fast path (see fastpath.go) in a Put or Result the Decoder owns,
	// overwritten by the next Decode: the caller copies what it keeps
	// (the body is its own either way). A broker's producer connection
	// decodes hundreds of thousands of puts a second, each otherwise a
	// garbage object.
	Reuse bool

	put    Put      // returned for a plain put when Reuse is set
	result Result   // returned for a plain result when Reuse is set
	line   []byte   // scratch for the header line
	fields []string // scratch for the split header; the strings are not reused
	topic  string   // the last topic of a plain put, reused while it repeats
}

// NewDecoder returns a Decoder with the default limits.
func NewDecoder(r *bufio.Reader) *Decoder {
	return &Decoder{r: r, MaxBodySize: DefaultMaxBodySize, MaxLineSize: DefaultMaxLineSize}
}

// Decode reads the next frame. It returns io.EOF when the stream ends
// cleanly between frames, io.ErrUnexpectedEOF when it ends inside one, a
// *FatalError for malformed input (the connection must be closed, as MetaQ
// does), or another error from the reader.
func (d *Decoder) Decode() (Command, error) {
	line, err := d.readLine()
	if err != nil {
		return nil, err
	}
	if c, ok, err := d.decodePlainPut(line); ok {
		return c, err
	}
	if c, ok, err := d.decodePlainResult(line); ok {
		return c, err
	}
	return d.decodeLine(string(line))
}

// readLine returns the header line without CRLF, in the Decoder's scratch
// buffer (valid until the next call). Only CRLF ends a line: a lone LF stays
// in the line (MetaQ's LINE_MATCHER searches for "\r\n").
func (d *Decoder) readLine() ([]byte, error) {
	d.line = d.line[:0]
	for {
		chunk, err := d.r.ReadSlice('\n')
		if err == nil {
			d.line = append(d.line, chunk...)
			if n := len(d.line); n >= 2 && d.line[n-2] == '\r' {
				if n-2 > d.MaxLineSize {
					return nil, fatalf(nil, "header line of %d bytes exceeds %d", n-2, d.MaxLineSize)
				}
				return d.line[:n-2], nil
			}
			if len(d.line) > d.MaxLineSize+1 {
				return nil, fatalf(nil, "header line exceeds %d bytes", d.MaxLineSize)
			}
			continue
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			d.line = append(d.line, chunk...)
			if len(d.line) > d.MaxLineSize+1 {
				return nil, fatalf(nil, "header line exceeds %d bytes", d.MaxLineSize)
			}
			continue
		}
		d.line = append(d.line, chunk...)
		if errors.Is(err, io.EOF) {
			if len(d.line) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// Split splits a header line as Java's Pattern.compile(" ").split does: on
// every single space, keeping empty fields in the middle and at the start,
// dropping empty fields at the end. An empty line gives one empty field.
func Split(line string) []string {
	return javaSplit(line, ' ')
}

func javaSplit(s string, sep byte) []string {
	if r := javaSplitInto(nil, s, sep); len(r) > 0 {
		return r
	}
	return nil
}

// javaSplitInto is javaSplit appending to dst[:0], so that a Decoder can
// reuse one slice for every header line.
func javaSplitInto(dst []string, s string, sep byte) []string {
	dst = dst[:0]
	if s == "" {
		return append(dst, "")
	}
	for {
		i := strings.IndexByte(s, sep)
		if i < 0 {
			dst = append(dst, s)
			break
		}
		dst = append(dst, s[:i])
		s = s[i+1:]
	}
	n := len(dst)
	for n > 0 && dst[n-1] == "" {
		n--
	}
	// Java: a string made only of separators splits to an empty array.
	return dst[:n]
}

func (d *Decoder) decodeLine(line string) (Command, error) {
	if !utf8.ValidString(line) {
		// Java decodes with replacement characters; nothing valid can come of
		// it for the fields that matter, and names would be mangled.
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	d.fields = javaSplitInto(d.fields, line, ' ')
	sa := d.fields
	if len(sa) == 0 {
		return nil, fatalf(nil, "blank command line")
	}
	if sa[0] == "" {
		return nil, fatalf(nil, "unknown command %q", line)
	}
	switch firstByte(sa[0]) {
	case 'p':
		return d.decodePut(sa)
	case 'g':
		return decodeGet(sa)
	case 't':
		return decodeTransaction(sa)
	case 'r':
		return d.decodeResult(sa)
	case 'v':
		if sa[0] == "value" {
			return d.decodeValue(sa)
		}
		return decodeVersion(sa)
	case 's':
		if sa[0] == "stats" {
			return decodeStats(sa)
		}
		if sa[0] == "syncunit" {
			return d.decodeSyncUnit(sa)
		}
		return d.decodeSync(sa)
	case 'o':
		return decodeOffset(sa)
	case 'q':
		return &Quit{}, nil
	}
	return nil, fatalf(nil, "unknown command %q", line)
}

// firstByte mimics Java's (byte) s.charAt(0): the low byte of the first
// UTF-16 unit, so that non-ASCII first characters select commands exactly as
// MetaQ does (and then fail the whole-word check, except for 'v' and 'q').
func firstByte(s string) byte {
	r, _ := utf8.DecodeRuneInString(s)
	if r > 0xFFFF {
		r1, _ := utf16.EncodeRune(r)
		r = r1
	}
	return byte(r)
}

func expect(sa []string, word string, min int) error {
	if sa[0] != word {
		return fatalf(nil, "expect %s, but was %q", word, sa[0])
	}
	if len(sa) < min {
		return fatalf(nil, "%s: %d fields, need %d", word, len(sa), min)
	}
	return nil
}

// parseInt32 parses like Java Integer.parseInt (optional sign, decimal).
func parseInt32(s string) (int32, error) {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, err
	}
	return int32(v), nil
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

// fields parses several numeric fields, stopping at the first error.
type fieldParser struct {
	sa  []string
	cmd string
	err error
}

func (p *fieldParser) i32(i int) int32 {
	if p.err != nil {
		return 0
	}
	v, err := parseInt32(p.sa[i])
	if err != nil {
		p.err = fatalf(err, "%s: field %d %q is not an int", p.cmd, i, p.sa[i])
	}
	return v
}

func (p *fieldParser) i64(i int) int64 {
	if p.err != nil {
		return 0
	}
	v, err := parseInt64(p.sa[i])
	if err != nil {
		p.err = fatalf(err, "%s: field %d %q is not a long", p.cmd, i, p.sa[i])
	}
	return v
}

// readBody reads a body of the declared length. The length is checked
// before anything is read so that an absurd size costs nothing.
func (d *Decoder) readBody(cmd, lenField string) ([]byte, error) {
	n, err := parseInt32(lenField)
	if err != nil {
		return nil, fatalf(err, "%s: body length %q is not an int", cmd, lenField)
	}
	if n < 0 {
		return nil, fatalf(nil, "%s: negative body length %d", cmd, n)
	}
	return d.readBodyN(cmd, n)
}

// readBodyN reads a body of n bytes, n >= 0, after checking it against
// MaxBodySize.
func (d *Decoder) readBodyN(cmd string, n int32) ([]byte, error) {
	if int(n) > d.MaxBodySize {
		return nil, &FatalError{Msg: fmt.Sprintf("%s: body length %d exceeds the limit %d", cmd, n, d.MaxBodySize), TooLarge: true}
	}
	if n == 0 {
		return nil, nil
	}
	var body []byte
	if d.Alloc != nil {
		body = d.Alloc(int(n))[:n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(d.r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// put topic partition bodyLen flag [checksum|txKey] [txKey] opaque\r\nbody.
// Like MetaQ, the body is read before the field count is judged, but only
// after the length is known to be sane.
func (d *Decoder) decodePut(sa []string) (Command, error) {
	if err := expect(sa, "put", 4); err != nil {
		return nil, err
	}
	body, err := d.readBody("put", sa[3])
	if err != nil {
		return nil, err
	}
	p := fieldParser{sa: sa, cmd: "put"}
	c := &Put{Topic: sa[1], Body: body, Checksum: NoChecksum, Fields: len(sa)}
	switch len(sa) {
	case 6:
		c.Partition = p.i32(2)
		c.Flag = p.i32(4)
		c.Opaque = p.i32(5)
	case 7:
		c.Partition = p.i32(2)
		c.Flag = p.i32(4)
		slot := sa[5]
		if slot != "" && (slot[0] == '-' || (slot[0] >= '0' && slot[0] <= '9')) {
			c.Checksum = p.i32(5)
		} else {
			if slot == "" {
				// Java: slot.charAt(0) throws on an empty field.
				return nil, fatalf(nil, "put: empty checksum/transaction field")
			}
			c.TxKey = slot
		}
		c.Opaque = p.i32(6)
	case 8:
		c.Partition = p.i32(2)
		c.Flag = p.i32(4)
		c.Checksum = p.i32(5)
		c.TxKey = sa[6]
		c.Opaque = p.i32(7)
	default:
		return nil, fatalf(nil, "put: invalid field count %d", len(sa))
	}
	if p.err != nil {
		return nil, p.err
	}
	if c.TxKey != "" {
		tx, err := ParseTxKey(c.TxKey)
		if err != nil {
			return nil, fatalf(err, "put: bad transaction key")
		}
		c.Tx = tx
	}
	return c, nil
}

// get topic group partition offset maxSize opaque.
func decodeGet(sa []string) (Command, error) {
	if err := expect(sa, "get", 7); err != nil {
		return nil, err
	}
	p := fieldParser{sa: sa, cmd: "get"}
	c := &Get{Topic: sa[1], Group: sa[2], Partition: p.i32(3), Offset: p.i64(4), MaxSize: p.i32(5), Opaque: p.i32(6)}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// offset topic group partition offset opaque.
func decodeOffset(sa []string) (Command, error) {
	if err := expect(sa, "offset", 6); err != nil {
		return nil, err
	}
	p := fieldParser{sa: sa, cmd: "offset"}
	c := &Offset{Topic: sa[1], Group: sa[2], Partition: p.i32(3), Offset: p.i64(4), Opaque: p.i32(5)}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// version [opaque]: any word starting with 'v' other than "value".
func decodeVersion(sa []string) (Command, error) {
	c := &Version{Opaque: NoOpaque}
	if len(sa) >= 2 {
		p := fieldParser{sa: sa, cmd: "version"}
		c.Opaque = p.i32(1)
		if p.err != nil {
			return nil, p.err
		}
		c.HasOpaque = true
	}
	return c, nil
}

// stats [item] [opaque].
func decodeStats(sa []string) (Command, error) {
	c := &Stats{Opaque: NoOpaque}
	if len(sa) >= 3 {
		p := fieldParser{sa: sa, cmd: "stats"}
		c.Opaque = p.i32(2)
		if p.err != nil {
			return nil, p.err
		}
		c.HasOpaque = true
	}
	if len(sa) >= 2 {
		c.Item = sa[1]
		c.HasItem = true
	}
	return c, nil
}

// transaction txKey sessionId type [timeout] [uniqueQualifier] opaque.
func decodeTransaction(sa []string) (Command, error) {
	if err := expect(sa, "transaction", 4); err != nil {
		return nil, err
	}
	tx, err := ParseTxKey(sa[1])
	if err != nil {
		return nil, fatalf(err, "transaction: bad transaction key")
	}
	typ := TxType(sa[3])
	if !typ.Valid() {
		return nil, fatalf(nil, "transaction: unknown type %q", sa[3])
	}
	c := &Transaction{TxKey: sa[1], Tx: tx, SessionID: sa[2], Type: typ}
	p := fieldParser{sa: sa, cmd: "transaction"}
	switch len(sa) {
	case 7:
		c.Timeout = p.i32(4)
		c.UniqueQualifier = sa[5]
		c.Opaque = p.i32(6)
	case 6:
		// commons-lang 2 StringUtils.isNumeric: digits only, and "" counts as
		// numeric (then Integer.valueOf("") fails and the connection closes).
		if isNumeric(sa[4]) {
			c.Timeout = p.i32(4)
		} else {
			c.UniqueQualifier = sa[4]
		}
		c.Opaque = p.i32(5)
	case 5:
		c.Opaque = p.i32(4)
	default:
		return nil, fatalf(nil, "transaction: invalid field count %d", len(sa))
	}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

func isNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sync topic partition bodyLen flag msgId [checksum] opaque\r\nbody.
func (d *Decoder) decodeSync(sa []string) (Command, error) {
	if err := expect(sa, "sync", 4); err != nil {
		return nil, err
	}
	body, err := d.readBody("sync", sa[3])
	if err != nil {
		return nil, err
	}
	return syncOf(sa, body)
}

// syncOf parses a sync header's fields, its body already read.
func syncOf(sa []string, body []byte) (*Sync, error) {
	p := fieldParser{sa: sa, cmd: "sync"}
	c := &Sync{Topic: sa[1], Body: body, Checksum: NoChecksum, Fields: len(sa)}
	switch len(sa) {
	case 7:
		c.Partition = p.i32(2)
		c.Flag = p.i32(4)
		c.MsgID = p.i64(5)
		c.Opaque = p.i32(6)
	case 8:
		c.Partition = p.i32(2)
		c.Flag = p.i32(4)
		c.MsgID = p.i64(5)
		c.Checksum = p.i32(6)
		c.Opaque = p.i32(7)
	default:
		return nil, fatalf(nil, "sync: invalid field count %d", len(sa))
	}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// syncunit count bodyLen opaque\r\nbody, the body count sync frames. The
// syncs' bodies are cut from the unit's body, not copied.
func (d *Decoder) decodeSyncUnit(sa []string) (Command, error) {
	if err := expect(sa, "syncunit", 4); err != nil {
		return nil, err
	}
	if len(sa) != 4 {
		return nil, fatalf(nil, "syncunit: invalid field count %d", len(sa))
	}
	p := fieldParser{sa: sa, cmd: "syncunit"}
	count := p.i32(1)
	opaque := p.i32(3)
	if p.err != nil {
		return nil, p.err
	}
	if count <= 0 {
		return nil, fatalf(nil, "syncunit: %d syncs", count)
	}
	body, err := d.readBody("syncunit", sa[2])
	if err != nil {
		return nil, err
	}
	// Each sync frame takes at least its CRLF: a count above that is a lie
	// that must not size an allocation.
	if int(count) > len(body)/2 {
		return nil, fatalf(nil, "syncunit: %d syncs in %d bytes", count, len(body))
	}
	u := &SyncUnit{Opaque: opaque, Syncs: make([]Sync, 0, count)}
	rest := body
	for i := range int(count) {
		end := bytes.Index(rest, []byte("\r\n"))
		if end < 0 {
			return nil, fatalf(nil, "syncunit: sync %d has no header line", i)
		}
		line := string(rest[:end])
		rest = rest[end+2:]
		if !utf8.ValidString(line) {
			line = strings.ToValidUTF8(line, "\uFFFD")
		}
		f := javaSplit(line, ' ')
		if len(f) == 0 {
			return nil, fatalf(nil, "syncunit: sync %d: blank header line", i)
		}
		if err := expect(f, "sync", 4); err != nil {
			return nil, fatalf(err, "syncunit: sync %d", i)
		}
		n, err := parseInt32(f[3])
		if err != nil || n < 0 || int(n) > len(rest) {
			return nil, fatalf(err, "syncunit: sync %d: body length %q does not fit the unit's %d bytes left", i, f[3], len(rest))
		}
		s, err := syncOf(f, rest[:n:n])
		if err != nil {
			return nil, fatalf(err, "syncunit: sync %d", i)
		}
		rest = rest[n:]
		u.Syncs = append(u.Syncs, *s)
	}
	if len(rest) > 0 {
		return nil, fatalf(nil, "syncunit: %d bytes after its %d syncs", len(rest), count)
	}
	return u, nil
}

// result code bodyLen opaque\r\nbody.
func (d *Decoder) decodeResult(sa []string) (Command, error) {
	if err := expect(sa, "result", 4); err != nil {
		return nil, err
	}
	p := fieldParser{sa: sa, cmd: "result"}
	code := p.i32(1)
	if p.err != nil {
		return nil, p.err
	}
	body, err := d.readBody("result", sa[2])
	if err != nil {
		return nil, err
	}
	c := &Result{Code: int(code), Body: body, Opaque: p.i32(3)}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// value len opaque\r\ndata.
func (d *Decoder) decodeValue(sa []string) (Command, error) {
	if err := expect(sa, "value", 3); err != nil {
		return nil, err
	}
	data, err := d.readBody("value", sa[1])
	if err != nil {
		return nil, err
	}
	p := fieldParser{sa: sa, cmd: "value"}
	c := &Value{Data: data, Opaque: p.i32(2)}
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// DecodeBytes decodes exactly one frame from b, for tests and fuzzing. It
// returns the number of bytes consumed.
func DecodeBytes(b []byte) (Command, int, error) {
	br := bytes.NewReader(b)
	r := bufio.NewReader(br)
	c, err := NewDecoder(r).Decode()
	consumed := len(b) - br.Len() - r.Buffered()
	return c, consumed, err
}
