package georeplicator

import (
	"fmt"
	"strings"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Codec is the compression of one frame's payload. Every frame names its
// own codec, so the master may switch codecs between frames (mode auto) and
// the slave decodes whatever arrives.
type Codec byte

const (
	// CodecNone sends payloads as they are.
	CodecNone Codec = 0
	// CodecZstd is zstd at SpeedFastest with a capped window: the WAN default.
	CodecZstd Codec = 1
	// CodecS2 is s2 block compression: cheap on CPU, for LAN or fast links.
	CodecS2 Codec = 2
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecS2:
		return "s2"
	}
	return fmt.Sprintf("codec(%d)", byte(c))
}

// Mode is the configured compression choice: a codec or "auto".
type Mode string

// Compression modes as written in the config (compression=...).
const (
	ModeZstd Mode = "zstd"
	ModeS2   Mode = "s2"
	ModeNone Mode = "none"
	ModeAuto Mode = "auto"
)

// ParseMode parses a compression setting; "" means zstd.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeZstd, nil
	case ModeZstd, ModeS2, ModeNone, ModeAuto:
		return m, nil
	}
	return "", fmt.Errorf("georeplicator: unknown compression %q (want zstd, s2, none or auto)", s)
}

// zstdWindow caps the encoder's window; frames are compressed one by one,
// so a window larger than a frame buys nothing and costs slave memory.
const zstdWindow = 1 << 20

var zstdEncoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(zstdWindow),
		zstd.WithEncoderCRC(false)) // the frame CRC32C already covers the payload
	if err != nil {
		panic(err) // only invalid static options can fail
	}
	return e
}}

// decoder decompresses frame payloads. It is owned by one goroutine and
// must be closed, which releases the zstd decoder's buffers.
type decoder struct{ z *zstd.Decoder }

func newDecoder() (*decoder, error) {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(8<<20),         // above zstdWindow, far below a hostile frame's claim
		zstd.WithDecoderMaxMemory(maxFrameBytes)) // never more than a frame may hold
	if err != nil {
		return nil, fmt.Errorf("georeplicator: zstd decoder: %w", err)
	}
	return &decoder{z: d}, nil
}

// Close releases the decoder.
func (d *decoder) Close() { d.z.Close() }

// compress appends the encoding of src to dst[:0] and returns it.
// Pooled encoders are reused across frames and connections.
func compress(c Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst[:0], src...), nil
	case CodecZstd:
		e := zstdEncoders.Get().(*zstd.Encoder)
		out := e.EncodeAll(src, dst[:0])
		zstdEncoders.Put(e)
		return out, nil
	case CodecS2:
		return s2.Encode(dst[:cap(dst)], src), nil
	}
	return nil, fmt.Errorf("georeplicator: cannot compress with %v", c)
}

// decompress decodes src (rawLen bytes when decoded) into dst[:0].
// Any failure is ErrCorruptFrame: the payload CRC matched, so the sender
// produced bad data, and it must not be applied.
func (d *decoder) decompress(c Codec, dst, src []byte, rawLen int) ([]byte, error) {
	var out []byte
	var err error
	switch c {
	case CodecNone:
		out = append(dst[:0], src...)
	case CodecZstd:
		if cap(dst) < rawLen {
			dst = make([]byte, 0, rawLen)
		}
		out, err = d.z.DecodeAll(src, dst[:0])
	case CodecS2:
		var n int
		if n, err = s2.DecodedLen(src); err == nil {
			if n != rawLen {
				err = fmt.Errorf("decoded length %d, header says %d", n, rawLen)
			} else {
				if cap(dst) < n {
					dst = make([]byte, n)
				}
				out, err = s2.Decode(dst[:n], src)
			}
		}
	default:
		err = fmt.Errorf("unknown codec %d", byte(c))
	}
	if err == nil && len(out) != rawLen {
		err = fmt.Errorf("decoded %d bytes, header says %d", len(out), rawLen)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %v", ErrCorruptFrame, c, err)
	}
	return out, nil
}
