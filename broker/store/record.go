package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
)

// RecordHeaderLen is the size of a MetaQ record header (see Records in broker/wire/doc.go).
const RecordHeaderLen = 20

// MaxRecordBody is the largest body the Java client accepts (2 MiB); the
// store refuses larger ones so it never stores what no client can read.
const MaxRecordBody = 2 << 20

// Record is one decoded MetaQ record (see Records in broker/wire/doc.go).
type Record struct {
	ID   int64
	Flag int32
	Body []byte // aliases the decoded buffer
}

// RecordChecksum is the record checksum MetaQ uses: CRC32 (IEEE) of the body
// with the sign bit cleared.
func RecordChecksum(body []byte) uint32 { return crc32.ChecksumIEEE(body) & 0x7FFFFFFF }

// AppendRecord appends the encoded record to dst.
func AppendRecord(dst []byte, id int64, flag int32, body []byte) []byte {
	return appendRecordSum(dst, id, flag, RecordChecksum(body), body)
}

// appendRecordSum is AppendRecord with the body's checksum already known.
func appendRecordSum(dst []byte, id int64, flag int32, sum uint32, body []byte) []byte {
	var h [RecordHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[4:], sum)
	binary.BigEndian.PutUint64(h[8:], uint64(id))
	binary.BigEndian.PutUint32(h[16:], uint32(flag))
	dst = append(dst, h[:]...)
	return append(dst, body...)
}

// DecodeRecord decodes the record at the start of b and returns it with its
// encoded length. It checks the length and the checksum.
func DecodeRecord(b []byte) (Record, int, error) {
	if len(b) < RecordHeaderLen {
		return Record{}, 0, fmt.Errorf("%w: record header needs %d bytes, have %d", ErrCorrupt, RecordHeaderLen, len(b))
	}
	n := int32(binary.BigEndian.Uint32(b[0:]))
	if n < 0 || n > MaxRecordBody {
		return Record{}, 0, fmt.Errorf("%w: record length %d outside 0..%d", ErrCorrupt, n, MaxRecordBody)
	}
	end := RecordHeaderLen + int(n)
	if len(b) < end {
		return Record{}, 0, fmt.Errorf("%w: record needs %d bytes, have %d", ErrCorrupt, end, len(b))
	}
	body := b[RecordHeaderLen:end]
	if sum := binary.BigEndian.Uint32(b[4:]); sum != RecordChecksum(body) {
		return Record{}, 0, fmt.Errorf("%w: record checksum %08x, body has %08x", ErrCorrupt, sum, RecordChecksum(body))
	}
	return Record{
		ID:   int64(binary.BigEndian.Uint64(b[8:])),
		Flag: int32(binary.BigEndian.Uint32(b[16:])),
		Body: body,
	}, end, nil
}

// VerifyRecords checks that b is a run of whole, valid records and returns
// how many there are.
func VerifyRecords(b []byte) (int, error) {
	count := 0
	for off := 0; off < len(b); {
		_, n, err := DecodeRecord(b[off:])
		if err != nil {
			return count, fmt.Errorf("record %d at byte %d: %w", count, off, err)
		}
		off += n
		count++
	}
	return count, nil
}

// idEpoch is MetaQ's IdWorker epoch (ms).
const idEpoch = 1303895660503

// idGen makes MetaQ-layout ids (see Message ids in broker/wire/doc.go) from the wall clock: ms since the MetaQ epoch
// << 22 | brokerId << 12 | 12-bit sequence. It never goes backwards: when the
// clock steps back or the sequence overflows it borrows the next millisecond.
// The writer goroutine and NextID (transactional puts take their id when
// they arrive) share it, so it has its own small lock.
type idGen struct {
	mu     sync.Mutex
	broker int64
	lastMs int64
	seq    int64
}

func (g *idGen) next(nowMs int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := nowMs - idEpoch
	if ms < g.lastMs {
		ms = g.lastMs
	}
	if ms == g.lastMs {
		g.seq++
		if g.seq > 0xFFF {
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.lastMs = ms
	return ms<<22 | g.broker<<12 | g.seq
}
