package georeplicator

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame reader and the payload
// decoders: they must fail cleanly, never panic or allocate beyond the caps.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	raw := encodeBatch(nil, 1, 2, 3, sampleEntries(rand.New(rand.NewPCG(5, 6)), 3))
	wire, _ := compress(CodecZstd, nil, raw)
	writeFrame(&buf, header{typ: typeData, codec: CodecZstd, seq: 1, rawLen: uint32(len(raw))}, wire, nil)
	f.Add(buf.Bytes())
	buf.Reset()
	writeFrame(&buf, header{typ: typeAck}, ack{Seq: 1, Parts: []partEnd{{"t", 1, 2}}}.encode(), nil)
	f.Add(buf.Bytes())
	f.Add([]byte{frameMagic, typeHello})
	d, err := newDecoder()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(d.Close)
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := readFrame(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		switch fr.typ {
		case typeData:
			if out, err := d.decompress(fr.codec, nil, fr.wire, int(fr.rawLen)); err == nil {
				if bt, err := decodeBatch(out); err == nil {
					checkBatch(bt)
				}
			}
		case typeAck:
			decodeAck(fr.wire)
		case typeHello:
			decodeHello(fr.wire)
		case typeWelcome:
			decodeWelcome(fr.wire)
		case typeKeepalive:
			decodeKeepalive(fr.wire)
		}
		// Any byte string is also tried as a bare payload.
		decodeBatch(b)
		decodeAck(b)
		decodeHello(b)
	})
}
