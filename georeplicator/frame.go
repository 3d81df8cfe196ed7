package georeplicator

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame header layout (big endian), 32 bytes:
//
//	0      1      2      3      4             8                   16
//	+------+------+------+------+-------------+-------------------+
//	|magic | type |codec |flags |   epoch     |     sequence      |
//	+------+------+------+------+-------------+-------------------+
//	16            20            24            28            32
//	+-------------+-------------+-------------+-------------+
//	|   rawLen    |  wireLen    | payload CRC | header CRC  |
//	+-------------+-------------+-------------+-------------+
//
// flags (0 before synchronous topics; receivers that predate them ignore
// the byte): flagSyncNow asks the slave to fsync what it applied and report
// it in its next ack at once, because a put waits for it.
//
// payload CRC is CRC32C of the wireLen payload bytes as sent (compressed);
// header CRC is CRC32C of bytes 0..27. The header has its own checksum so a
// damaged length can never make the reader allocate or skip garbage.
const (
	headerLen  = 32
	frameMagic = 0xA7
	// maxFrameBytes bounds rawLen and wireLen; larger values mean corruption.
	maxFrameBytes = 64 << 20
)

// Message types.
const (
	typeHello     byte = 1 // slave → master: who I am, where I resume
	typeWelcome   byte = 2 // master → slave: where the stream starts
	typeData      byte = 3 // master → slave: log entries
	typeKeepalive byte = 4 // master → slave: idle tick with a timestamp
	typeAck       byte = 5 // slave → master: applied position
	typeRewind    byte = 6 // slave → master: restart the stream at a position
	typeConfig    byte = 7 // master → slave: server.ini bytes
	typeError     byte = 8 // master → slave: refusal, then close
)

// Frame flags.
const (
	flagSyncNow byte = 1 << 0 // data: fsync after applying and ack the synced position
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors of the framing layer.
var (
	// ErrCorruptFrame: a frame failed its header or payload checksum, or its
	// payload did not decode. The frame is never applied.
	ErrCorruptFrame = errors.New("georeplicator: corrupt frame")
	// ErrProtocol: the peer sent a message that is not valid at this point.
	ErrProtocol = errors.New("georeplicator: protocol error")
)

// header is one decoded frame header.
type header struct {
	typ     byte
	codec   Codec
	flags   byte
	epoch   uint32
	seq     uint64
	rawLen  uint32
	wireLen uint32
	crc     uint32
}

func (h *header) put(b []byte) {
	b[0] = frameMagic
	b[1] = h.typ
	b[2] = byte(h.codec)
	b[3] = h.flags
	binary.BigEndian.PutUint32(b[4:], h.epoch)
	binary.BigEndian.PutUint64(b[8:], h.seq)
	binary.BigEndian.PutUint32(b[16:], h.rawLen)
	binary.BigEndian.PutUint32(b[20:], h.wireLen)
	binary.BigEndian.PutUint32(b[24:], h.crc)
	binary.BigEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

func parseHeader(b []byte) (header, error) {
	if b[0] != frameMagic {
		return header{}, fmt.Errorf("%w: bad magic %#x", ErrCorruptFrame, b[0])
	}
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.BigEndian.Uint32(b[28:]); got != want {
		return header{}, fmt.Errorf("%w: header checksum %08x != %08x", ErrCorruptFrame, got, want)
	}
	h := header{
		typ:     b[1],
		codec:   Codec(b[2]),
		flags:   b[3],
		epoch:   binary.BigEndian.Uint32(b[4:]),
		seq:     binary.BigEndian.Uint64(b[8:]),
		rawLen:  binary.BigEndian.Uint32(b[16:]),
		wireLen: binary.BigEndian.Uint32(b[20:]),
		crc:     binary.BigEndian.Uint32(b[24:]),
	}
	if h.rawLen > maxFrameBytes || h.wireLen > maxFrameBytes {
		return header{}, fmt.Errorf("%w: frame too large (%d/%d bytes)", ErrCorruptFrame, h.rawLen, h.wireLen)
	}
	return h, nil
}

// frame is a header plus its payload as sent on the wire.
type frame struct {
	header
	wire []byte
}

// readFrame reads one frame and checks both checksums. The payload is not
// decompressed. buf is reused when large enough.
func readFrame(r io.Reader, buf []byte) (frame, error) { return readFrameMAC(r, nil, buf) }

// readFrameMAC is readFrame on a link whose frames carry a MAC (m not nil,
// see framemac.go): the frame is returned only if its MAC is the next one
// of the link, and otherwise an error wrapping ErrAuth.
func readFrameMAC(r io.Reader, m *frameMAC, buf []byte) (frame, error) {
	var hb [headerLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return frame{}, err
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return frame{}, err
	}
	n := int(h.wireLen)
	if m != nil {
		n += macLen
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	buf = buf[:h.wireLen]
	if m != nil {
		no := m.n
		if !hmac.Equal(buf[h.wireLen:h.wireLen+macLen], m.next(hb[:], buf)) {
			return frame{}, fmt.Errorf("%w: frame %d of the link (type %d) does not carry the link's MAC: "+
				"inserted, replayed, reordered or altered on the path; dropping the link", ErrAuth, no, h.typ)
		}
	}
	if got := crc32.Checksum(buf, castagnoli); got != h.crc {
		return frame{header: h}, fmt.Errorf("%w: payload checksum %08x != %08x (type %d seq %d)", ErrCorruptFrame, got, h.crc, h.typ, h.seq)
	}
	return frame{header: h, wire: buf}, nil
}

// writeFrame writes header and payload in one call so a frame is one write.
// scratch is reused when large enough and returned.
func writeFrame(w io.Writer, h header, wire []byte, scratch []byte) ([]byte, error) {
	return writeFrameMAC(w, nil, h, wire, scratch)
}

// writeFrameMAC is writeFrame on a link whose frames carry a MAC (m not
// nil): the frame's MAC follows its payload, in the same write.
func writeFrameMAC(w io.Writer, m *frameMAC, h header, wire []byte, scratch []byte) ([]byte, error) {
	h.wireLen = uint32(len(wire))
	h.crc = crc32.Checksum(wire, castagnoli)
	n := headerLen + len(wire)
	if m != nil {
		n += macLen
	}
	if cap(scratch) < n {
		scratch = make([]byte, n)
	}
	scratch = scratch[:n]
	h.put(scratch)
	copy(scratch[headerLen:], wire)
	if m != nil {
		copy(scratch[headerLen+len(wire):], m.next(scratch[:headerLen], scratch[headerLen:headerLen+len(wire)]))
	}
	_, err := w.Write(scratch)
	return scratch, err
}

// enc is a tiny append-only big-endian encoder for message payloads.
type enc struct{ b []byte }

func (e *enc) u8(v byte)    { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }
func (e *enc) str(s string) { e.u16(uint16(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
}

// dec reads what enc wrote; the first short read sets err and every later
// read returns zero values, so callers check err once at the end.
type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: short payload", ErrProtocol)
		return false
	}
	return true
}

// take returns the next n bytes of the payload (no copy), or nil after a
// short read.
func (d *dec) take(n int) []byte {
	if !d.need(n) {
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *dec) i64() int64 { return int64(d.u64()) }

func (d *dec) str() string { return string(d.take(int(d.u16()))) }

// bytes returns a sub-slice of the payload (no copy).
func (d *dec) bytes() []byte { return d.take(int(d.u32())) }

// FirstBytes are the bytes a slave's connection may start with: the frame
// magic of its plain-text hello, or the record type of a TLS ClientHello.
// No MetaQ request starts with either, so a master can serve replication
// on its MetaQ port and tell the two apart by the first byte.
func FirstBytes() []byte { return []byte{frameMagic, tlsRecordHandshake} }
