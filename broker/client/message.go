package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// Partition names one partition of a topic: the MetaQ broker id that owns it
// and the partition number on that broker. Its string form "<brokerId>-<n>" is
// the one used in ZooKeeper owners and offsets nodes.
type Partition struct {
	BrokerID  int
	Partition int
}

// String returns "<brokerId>-<partition>".
func (p Partition) String() string {
	return strconv.Itoa(p.BrokerID) + "-" + strconv.Itoa(p.Partition)
}

// ParsePartition parses "<brokerId>-<partition>".
func ParsePartition(s string) (Partition, error) {
	i := strings.IndexByte(s, '-')
	if i <= 0 {
		return Partition{}, fmt.Errorf("client: bad partition %q", s)
	}
	b, err1 := strconv.Atoi(s[:i])
	n, err2 := strconv.Atoi(s[i+1:])
	if err1 != nil || err2 != nil {
		return Partition{}, fmt.Errorf("client: bad partition %q", s)
	}
	return Partition{BrokerID: b, Partition: n}, nil
}

// Message is one message to send or one message received.
type Message struct {
	// Topic is the message's topic.
	Topic string
	// Payload is the message body without the attribute section. In a
	// received message it shares the fetched answer's buffer with the
	// other messages of that fetch (one buffer per fetch, never reused by
	// the client): keeping one message keeps that buffer; copy the payload
	// to keep it alone.
	Payload []byte
	// Attribute is the optional string attribute; it is sent only when
	// HasAttribute is true (an empty attribute is allowed, as in MetaQ).
	Attribute    string
	HasAttribute bool
	// Key is used by the KeyHash and Ordered selectors only; it is not sent.
	Key []byte

	// Set on received messages (and ID/Partition/Offset on a send result).
	ID        int64
	Partition Partition
	// Offset is the byte offset where the message's record starts.
	Offset int64
	// NextOffset is the offset just past this record: the offset to commit
	// once the message is handled.
	NextOffset int64
	Flag       int32
}

// Time returns the wall-clock time encoded in the message id. It is only
// meaningful for ids made by this project's broker; Java brokers take the
// time from nanoTime (time since boot), see IDTime.
func (m *Message) Time() time.Time { return IDTime(m.ID) }

// idEpochMillis is the epoch of MetaQ's IdWorker (2011-04-27).
const idEpochMillis = 1303895660503

// IDTime decodes the time carried by a message id laid out as MetaQ's
// IdWorker does: ((ms - 1303895660503) << 22) | brokerId << 12 | sequence.
// This project's broker takes ms from the wall clock, so the result is when
// the message was stored. Ids from a Java 1.4.6 broker use nanoTime, so for
// them the result is not a wall-clock time.
func IDTime(id int64) time.Time {
	ms := (id >> 22) + idEpochMillis
	return time.UnixMilli(ms)
}

// IDForTime returns the smallest id a message stored at t could carry.
func IDForTime(t time.Time) int64 {
	return (t.UnixMilli() - idEpochMillis) << 22
}

// encodeBody builds a put body: the attribute section when present, then the
// payload; and the flag to send with it.
func encodeBody(m *Message) (body []byte, flag int32) {
	if !m.HasAttribute {
		return m.Payload, 0
	}
	body = make([]byte, 4+len(m.Attribute)+len(m.Payload))
	binary.BigEndian.PutUint32(body, uint32(len(m.Attribute)))
	copy(body[4:], m.Attribute)
	copy(body[4+len(m.Attribute):], m.Payload)
	return body, 1
}

// checksum is MetaQ's record checksum: CRC32 (IEEE) masked to 31 bits.
func checksum(b []byte) int32 { return int32(crc32.ChecksumIEEE(b) & 0x7FFFFFFF) }

const (
	recordHeaderLen = 20
	// maxRecordBody is the Java client's limit on one record's body.
	maxRecordBody = 2 << 20
)

// ErrCorrupt is returned when a fetched record fails its checksum or has an
// impossible length; the consumer then asks the broker for the nearest valid
// offset, as the Java client does.
var ErrCorrupt = errors.New("client: corrupt message record")

// decodeRecords parses complete records from data, fetched at offset base.
// It stops at the first incomplete record and returns the messages and the
// number of bytes they used. A record that fails its checksum gives
// ErrCorrupt together with the messages before it.
//
// The payloads alias data (a fetch's own buffer): a copy per message was an
// allocation and a copy of every delivered byte, for a buffer nobody else
// uses.
func decodeRecords(topic string, p Partition, base int64, data []byte) ([]Message, int, error) {
	out := make([]Message, 0, countRecords(data))
	pos := 0
	for len(data)-pos >= recordHeaderLen {
		h := data[pos:]
		n := int32(binary.BigEndian.Uint32(h))
		if n < 0 || n > maxRecordBody {
			return out, pos, fmt.Errorf("%w: length %d at offset %d", ErrCorrupt, n, base+int64(pos))
		}
		if len(h) < recordHeaderLen+int(n) {
			break
		}
		sum := int32(binary.BigEndian.Uint32(h[4:]))
		id := int64(binary.BigEndian.Uint64(h[8:]))
		flag := int32(binary.BigEndian.Uint32(h[16:]))
		body := h[recordHeaderLen : recordHeaderLen+int(n)]
		if checksum(body) != sum {
			return out, pos, fmt.Errorf("%w: checksum at offset %d", ErrCorrupt, base+int64(pos))
		}
		m := Message{Topic: topic, ID: id, Partition: p, Offset: base + int64(pos), Flag: flag,
			NextOffset: base + int64(pos) + recordHeaderLen + int64(n)}
		payload := body[:n:n] // a cap of its own: an append does not run into the next record
		if flag&1 != 0 {
			if n < 4 {
				return out, pos, fmt.Errorf("%w: attribute at offset %d", ErrCorrupt, m.Offset)
			}
			al := int(binary.BigEndian.Uint32(payload))
			if al < 0 || 4+al > int(n) {
				return out, pos, fmt.Errorf("%w: attribute length at offset %d", ErrCorrupt, m.Offset)
			}
			m.HasAttribute = true
			m.Attribute = string(payload[4 : 4+al])
			payload = payload[4+al:]
		}
		m.Payload = payload
		out = append(out, m)
		pos += recordHeaderLen + int(n)
	}
	return out, pos, nil
}

// countRecords counts the complete records at the start of data by their
// lengths alone (decodeRecords checks them), to size its list once.
func countRecords(data []byte) int {
	n := 0
	for len(data) >= recordHeaderLen {
		l := int32(binary.BigEndian.Uint32(data))
		if l < 0 || l > maxRecordBody || len(data) < recordHeaderLen+int(l) {
			break
		}
		data = data[recordHeaderLen+int(l):]
		n++
	}
	return n
}
