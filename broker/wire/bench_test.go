package wire

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func benchDecodePut(b *testing.B, size int) {
	body := []byte(strings.Repeat("x", size))
	frame := (&Put{Topic: "test", Partition: 1, Checksum: Checksum(body), Body: body, Opaque: -2147483648}).AppendTo(nil)
	const perRound = 64
	stream := bytes.Repeat(frame, perRound)
	rd := bytes.NewReader(stream)
	br := bufio.NewReaderSize(rd, 64<<10)
	d := NewDecoder(br)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%perRound == 0 {
			rd.Reset(stream)
			br.Reset(rd)
		}
		if _, err := d.Decode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePut100(b *testing.B) { benchDecodePut(b, 100) }
func BenchmarkDecodePut1k(b *testing.B)  { benchDecodePut(b, 1024) }
func BenchmarkDecodePut64k(b *testing.B) { benchDecodePut(b, 64<<10) }

func BenchmarkEncodePut1k(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	p := &Put{Topic: "test", Partition: 1, Checksum: Checksum(body), Body: body, Opaque: -2147483648}
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(p.AppendTo(nil))))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = p.AppendTo(buf[:0])
	}
}

func BenchmarkAppendResult(b *testing.B) {
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendResult(buf[:0], 200, "-5468924126146068480 0 1048576", -2147483648)
	}
}
