package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Log entry framing; see doc.go.
const (
	entryMagic     = 0x4D514C47 // "MQLG"
	entryHeaderLen = 36
	// maxEntryPayload bounds one entry so a corrupt length cannot make
	// recovery allocate gigabytes.
	maxEntryPayload = 64 << 20

	entryData   byte = 1
	entryDefine byte = 2
	entryDelete byte = 3
	// entryUnit starts a unit (AppendUnitAsync, AppendRawUnit): "partition
	// offset" is the length of the entries that follow it and form the
	// unit; no pid, no payload.
	entryUnit byte = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type entryHeader struct {
	typ    byte
	length uint32 // payload bytes
	pid    uint32
	off    int64 // partition offset
	ms     int64 // append time, unix ms
}

// appendEntry frames payload as one entry at the end of dst.
func appendEntry(dst []byte, h entryHeader, payload []byte) []byte {
	start := len(dst)
	var hb [entryHeaderLen]byte
	binary.BigEndian.PutUint32(hb[0:], entryMagic)
	binary.BigEndian.PutUint32(hb[4:], uint32(len(payload)))
	hb[12] = h.typ
	binary.BigEndian.PutUint32(hb[16:], h.pid)
	binary.BigEndian.PutUint64(hb[20:], uint64(h.off))
	binary.BigEndian.PutUint64(hb[28:], uint64(h.ms))
	dst = append(dst, hb[:]...)
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start+8:], crc32.Checksum(dst[start+12:], castagnoli))
	return dst
}

// parseEntryHeader checks the fixed part of a header (magic, type, reserved
// bytes, length bound). The crc needs the payload; see checkEntry.
func parseEntryHeader(b []byte) (entryHeader, error) {
	if len(b) < entryHeaderLen {
		return entryHeader{}, fmt.Errorf("%w: short entry header", ErrCorrupt)
	}
	if binary.BigEndian.Uint32(b[0:]) != entryMagic {
		return entryHeader{}, fmt.Errorf("%w: bad entry magic", ErrCorrupt)
	}
	h := entryHeader{
		typ:    b[12],
		length: binary.BigEndian.Uint32(b[4:]),
		pid:    binary.BigEndian.Uint32(b[16:]),
		off:    int64(binary.BigEndian.Uint64(b[20:])),
		ms:     int64(binary.BigEndian.Uint64(b[28:])),
	}
	if h.typ < entryData || h.typ > entryUnit || b[13] != 0 || b[14] != 0 || b[15] != 0 {
		return entryHeader{}, fmt.Errorf("%w: bad entry type", ErrCorrupt)
	}
	if h.length > maxEntryPayload || h.off < 0 {
		return entryHeader{}, fmt.Errorf("%w: bad entry length or offset", ErrCorrupt)
	}
	return h, nil
}

// checkEntry verifies the crc of a whole entry (header + payload).
func checkEntry(b []byte) error {
	want := binary.BigEndian.Uint32(b[8:])
	if got := crc32.Checksum(b[12:], castagnoli); got != want {
		return fmt.Errorf("%w: entry crc %08x, computed %08x", ErrCorrupt, want, got)
	}
	return nil
}

// checkChunk verifies the entry e that the index says holds n bytes of
// partition pid from offset off: the framing the crc does not cover (magic,
// length), that it is a data entry of that partition at that offset, and
// the crc. It is parseEntryHeader, checkEntry and the comparison with the
// index in one pass, without building a header: Read runs it for every
// chunk it serves, thousands per get when messages are small.
func checkChunk(e []byte, pid uint32, off int64, n uint32) error {
	if len(e) != entryHeaderLen+int(n) || binary.BigEndian.Uint32(e[0:]) != entryMagic ||
		binary.BigEndian.Uint32(e[4:]) != n {
		return fmt.Errorf("%w: entry framing does not match the index", ErrCorrupt)
	}
	if e[12] != entryData || e[13]|e[14]|e[15] != 0 || binary.BigEndian.Uint32(e[16:]) != pid ||
		int64(binary.BigEndian.Uint64(e[20:])) != off {
		return fmt.Errorf("%w: entry does not match the index", ErrCorrupt)
	}
	return checkEntry(e)
}

// decodeEntry parses and verifies the entry at the start of b (which may
// hold more). It returns the header, the payload and the entry's length.
func decodeEntry(b []byte) (entryHeader, []byte, int, error) {
	h, err := parseEntryHeader(b)
	if err != nil {
		return h, nil, 0, err
	}
	n := entryHeaderLen + int(h.length)
	if len(b) < n {
		return h, nil, 0, fmt.Errorf("%w: entry needs %d bytes, have %d", ErrCorrupt, n, len(b))
	}
	if err := checkEntry(b[:n]); err != nil {
		return h, nil, 0, err
	}
	if h.typ == entryData {
		if _, err := VerifyRecords(b[entryHeaderLen:n]); err != nil {
			return h, nil, 0, err
		}
	}
	return h, b[entryHeaderLen:n], n, nil
}

// patchUnit sets the length of the unit whose entry starts at b[at:] to
// end-at-entryHeaderLen (the entries written after it, up to end) and
// recomputes the entry's crc: the writer frames a unit's entry before it
// knows the unit's length.
func patchUnit(b []byte, at, end int) {
	binary.BigEndian.PutUint64(b[at+20:], uint64(end-at-entryHeaderLen))
	binary.BigEndian.PutUint32(b[at+8:], crc32.Checksum(b[at+12:at+entryHeaderLen], castagnoli))
}

func encodeDefine(topic string, partition int) []byte {
	b := make([]byte, 2+len(topic)+4)
	binary.BigEndian.PutUint16(b, uint16(len(topic)))
	copy(b[2:], topic)
	binary.BigEndian.PutUint32(b[2+len(topic):], uint32(int32(partition)))
	return b
}

func decodeDefine(b []byte) (string, int, error) {
	if len(b) < 2 {
		return "", 0, fmt.Errorf("%w: short define entry", ErrCorrupt)
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) != 2+n+4 {
		return "", 0, fmt.Errorf("%w: bad define entry length", ErrCorrupt)
	}
	return string(b[2 : 2+n]), int(int32(binary.BigEndian.Uint32(b[2+n:]))), nil
}
