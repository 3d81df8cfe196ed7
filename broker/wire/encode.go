package wire

import (
	"hash/crc32"
	"io"
	"strconv"
)

// Checksum is MetaQ's message checksum: CRC32 (IEEE) of the body AND
// 0x7FFFFFFF (see put and Records in the package doc).
func Checksum(body []byte) int32 {
	return int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)
}

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }

func appendSP(b []byte) []byte { return append(b, ' ') }

func appendCRLF(b []byte) []byte { return append(b, '\r', '\n') }

// AppendTo appends the put frame. See Put.Fields for the form chosen.
func (c *Put) AppendTo(b []byte) []byte {
	b = appendMessageHead(b, "put ", c.Topic, c.Partition, len(c.Body), c.Flag)
	switch {
	case c.Fields == 6:
	case c.Fields == 7 && c.TxKey != "":
		b = appendSP(b)
		b = append(b, c.TxKey...)
	default:
		b = appendSP(b)
		b = appendInt(b, int64(c.Checksum))
		if c.TxKey != "" {
			b = appendSP(b)
			b = append(b, c.TxKey...)
		}
	}
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	b = appendCRLF(b)
	return append(b, c.Body...)
}

// appendMessageHead appends "<verb>topic partition length flag", the head
// put and sync frames share.
func appendMessageHead(b []byte, verb, topic string, partition int32, length int, flag int32) []byte {
	b = append(b, verb...)
	b = append(b, topic...)
	b = appendSP(b)
	b = appendInt(b, int64(partition))
	b = appendSP(b)
	b = appendInt(b, int64(length))
	b = appendSP(b)
	return appendInt(b, int64(flag))
}

// AppendTo appends the get frame.
func (c *Get) AppendTo(b []byte) []byte {
	b = appendConsumerPosition(b, "get ", c.Topic, c.Group, c.Partition, c.Offset)
	b = appendSP(b)
	b = appendInt(b, int64(c.MaxSize))
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	return appendCRLF(b)
}

// AppendTo appends the offset frame.
func (c *Offset) AppendTo(b []byte) []byte {
	b = appendConsumerPosition(b, "offset ", c.Topic, c.Group, c.Partition, c.Offset)
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	return appendCRLF(b)
}

// appendConsumerPosition appends "<verb>topic group partition offset", the
// head get and offset frames share.
func appendConsumerPosition(b []byte, verb, topic, group string, partition int32, offset int64) []byte {
	b = append(b, verb...)
	b = append(b, topic...)
	b = appendSP(b)
	b = append(b, group...)
	b = appendSP(b)
	b = appendInt(b, int64(partition))
	b = appendSP(b)
	return appendInt(b, offset)
}

// AppendTo appends the version frame, with the opaque unless HasOpaque is
// false and Opaque is NoOpaque.
func (c *Version) AppendTo(b []byte) []byte {
	b = append(b, "version"...)
	if c.HasOpaque || c.Opaque != NoOpaque {
		b = appendSP(b)
		b = appendInt(b, int64(c.Opaque))
	}
	return appendCRLF(b)
}

// AppendTo appends the stats frame as the Java client does ("stats item
// opaque", two spaces for a blank item), or "stats" alone when neither an
// item nor an opaque is set.
func (c *Stats) AppendTo(b []byte) []byte {
	b = append(b, "stats"...)
	if c.HasOpaque || c.Opaque != NoOpaque || c.HasItem || c.Item != "" {
		b = appendSP(b)
		b = append(b, c.Item...)
		b = appendSP(b)
		b = appendInt(b, int64(c.Opaque))
	}
	return appendCRLF(b)
}

// AppendTo appends "quit\r\n".
func (*Quit) AppendTo(b []byte) []byte { return append(b, "quit\r\n"...) }

// AppendTo appends the transaction frame; Timeout and UniqueQualifier are
// sent only when set, as the Java client does.
func (c *Transaction) AppendTo(b []byte) []byte {
	b = append(b, "transaction "...)
	key := c.TxKey
	if key == "" {
		key = c.Tx.String()
	}
	b = append(b, key...)
	b = appendSP(b)
	b = append(b, c.SessionID...)
	b = appendSP(b)
	b = append(b, c.Type...)
	if c.Timeout > 0 {
		b = appendSP(b)
		b = appendInt(b, int64(c.Timeout))
	}
	if c.UniqueQualifier != "" {
		b = appendSP(b)
		b = append(b, c.UniqueQualifier...)
	}
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	return appendCRLF(b)
}

// AppendTo appends the sync frame (8 fields unless Fields is 7).
func (c *Sync) AppendTo(b []byte) []byte {
	b = appendMessageHead(b, "sync ", c.Topic, c.Partition, len(c.Body), c.Flag)
	b = appendSP(b)
	b = appendInt(b, c.MsgID)
	if c.Fields != 7 {
		b = appendSP(b)
		b = appendInt(b, int64(c.Checksum))
	}
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	b = appendCRLF(b)
	return append(b, c.Body...)
}

// AppendTo appends the syncunit frame: its header, then each sync frame.
func (c *SyncUnit) AppendTo(b []byte) []byte {
	n := c.BodyLen()
	b = append(b, "syncunit "...)
	b = appendInt(b, int64(len(c.Syncs)))
	b = appendSP(b)
	b = appendInt(b, int64(n))
	b = appendSP(b)
	b = appendInt(b, int64(c.Opaque))
	b = appendCRLF(b)
	for i := range c.Syncs {
		b = c.Syncs[i].AppendTo(b)
	}
	return b
}

// BodyLen is the length of the unit's body: its sync frames.
func (c *SyncUnit) BodyLen() int {
	n := 0
	for i := range c.Syncs {
		n += c.Syncs[i].frameLen()
	}
	return n
}

// frameLen is the length of the frame AppendTo appends.
func (c *Sync) frameLen() int {
	var scratch [96]byte
	h := appendMessageHead(scratch[:0], "sync ", c.Topic, c.Partition, len(c.Body), c.Flag)
	h = appendSP(h)
	h = appendInt(h, c.MsgID)
	if c.Fields != 7 {
		h = appendSP(h)
		h = appendInt(h, int64(c.Checksum))
	}
	h = appendSP(h)
	h = appendInt(h, int64(c.Opaque))
	return len(h) + 2 + len(c.Body)
}

// AppendTo appends the result frame.
func (c *Result) AppendTo(b []byte) []byte { return AppendResult(b, c.Code, c.Body, c.Opaque) }

// AppendResult appends a result frame with a text body, without building a
// Result.
func AppendResult[T string | []byte](b []byte, code int, body T, opaque int32) []byte {
	b = append(b, "result "...)
	b = appendInt(b, int64(code))
	b = appendSP(b)
	b = appendInt(b, int64(len(body)))
	b = appendSP(b)
	b = appendInt(b, int64(opaque))
	b = appendCRLF(b)
	return append(b, body...)
}

// AppendTo appends the value frame.
func (c *Value) AppendTo(b []byte) []byte {
	b = AppendValueHeader(b, len(c.Data), c.Opaque)
	return append(b, c.Data...)
}

// AppendValueHeader appends "value <n> <opaque>\r\n", so that a server can
// write the data from its own buffer without copying it.
func AppendValueHeader(b []byte, n int, opaque int32) []byte {
	b = append(b, "value "...)
	b = appendInt(b, int64(n))
	b = appendSP(b)
	b = appendInt(b, int64(opaque))
	return appendCRLF(b)
}

// Write encodes c and writes it to w in one call.
func Write(w io.Writer, c Command) error {
	_, err := w.Write(c.AppendTo(nil))
	return err
}
