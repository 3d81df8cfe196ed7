package wire

import (
	"errors"
	"io"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder. It must never panic, and
// whatever it accepts must re-encode to a frame that decodes to a command
// encoding the same way (encoding is a fixed point after one round).
func FuzzDecode(f *testing.F) {
	for _, vc := range loadVectors(f) {
		if len(vc.C) > 0 {
			f.Add(vc.C)
		}
	}
	for _, s := range []string{"stats  0\r\n", "version\t5\r\n", "put t 0 -1 0 1\r\n", "transaction TX:a:1 s BEGIN  1\r\n", "value 5 1\r\nhello", "result 200 0 1\r\n", "syncunit 2 39 1\r\nsync t 0 1 0 5 6 7\r\nxsync u 1 0 0 5 6\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rest := data
		for i := 0; i < 16 && len(rest) > 0; i++ {
			cmd, used, err := DecodeBytes(rest)
			if err != nil {
				var fe *FatalError
				if !errors.As(err, &fe) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				return
			}
			if used <= 0 || used > len(rest) {
				t.Fatalf("consumed %d of %d", used, len(rest))
			}
			e1 := cmd.AppendTo(nil)
			cmd2, used2, err := DecodeBytes(e1)
			if err != nil {
				t.Fatalf("re-encoded %q does not decode: %v (from %q)", e1, err, rest[:used])
			}
			if used2 != len(e1) {
				t.Fatalf("re-encoded %q: consumed %d of %d", e1, used2, len(e1))
			}
			if e2 := cmd2.AppendTo(nil); string(e2) != string(e1) {
				t.Fatalf("encoding not stable: %q then %q", e1, e2)
			}
			rest = rest[used:]
		}
	})
}
