package wire

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectorDir holds a copy of the spec's conformance vectors.
const vectorDir = "../testdata/vectors"

type vectorCase struct {
	File, Name string
	C          []byte
	S          string // hex with "??" wildcards
	Regex      string
	Action     string
}

// loadVectors parses every *.txt vector file (format in its README.md).
func loadVectors(t testing.TB) []vectorCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s: %v", vectorDir, err)
	}
	var out []vectorCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *vectorCase
		var chex strings.Builder
		flush := func() {
			if cur == nil {
				return
			}
			b, err := hex.DecodeString(chex.String())
			if err != nil {
				t.Fatalf("%s %s: bad c: hex: %v", f, cur.Name, err)
			}
			cur.C = b
			out = append(out, *cur)
			chex.Reset()
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "=== "):
				flush()
				cur = &vectorCase{File: filepath.Base(f), Name: strings.TrimPrefix(line, "=== ")}
			case cur == nil:
			case strings.HasPrefix(line, "c:"):
				chex.WriteString(strings.TrimSpace(line[2:]))
			case strings.HasPrefix(line, "s:"):
				cur.S += strings.TrimSpace(line[2:])
			case strings.HasPrefix(line, "s-regex:"):
				cur.Regex = strings.TrimSpace(line[len("s-regex:"):])
			case strings.HasPrefix(line, "s-action:"):
				cur.Action = strings.TrimSpace(line[len("s-action:"):])
			}
		}
		flush()
	}
	return out
}

func isExchangeFile(name string) bool {
	return name != "message.txt" && name != "zookeeper.txt"
}

// TestVectorRequestsRoundTrip decodes every request in the vectors and checks
// that encoding the decoded command gives the same bytes back.
func TestVectorRequestsRoundTrip(t *testing.T) {
	n := 0
	for _, vc := range loadVectors(t) {
		if !isExchangeFile(vc.File) {
			continue
		}
		t.Run(vc.File+"/"+vc.Name, func(t *testing.T) {
			rest := vc.C
			for len(rest) > 0 {
				cmd, used, err := DecodeBytes(rest)
				if err != nil {
					t.Fatalf("decode %q: %v", rest, err)
				}
				got := cmd.AppendTo(nil)
				if string(got) != string(rest[:used]) {
					t.Fatalf("re-encoded\n%q\nwant\n%q", got, rest[:used])
				}
				rest = rest[used:]
				n++
			}
		})
	}
	if n < 60 {
		t.Fatalf("only %d requests decoded", n)
	}
}

// TestVectorResponsesRoundTrip decodes every exact response (no wildcard)
// with the same Decoder and re-encodes it.
func TestVectorResponsesRoundTrip(t *testing.T) {
	n := 0
	for _, vc := range loadVectors(t) {
		if !isExchangeFile(vc.File) || vc.S == "" {
			continue
		}
		raw := strings.ReplaceAll(vc.S, "??", "00")
		b, err := hex.DecodeString(raw)
		if err != nil {
			t.Fatalf("%s/%s: %v", vc.File, vc.Name, err)
		}
		cmd, used, err := DecodeBytes(b)
		if err != nil {
			t.Fatalf("%s/%s: decode %q: %v", vc.File, vc.Name, b, err)
		}
		if used != len(b) {
			t.Fatalf("%s/%s: used %d of %d", vc.File, vc.Name, used, len(b))
		}
		if got := cmd.AppendTo(nil); string(got) != string(b) {
			t.Fatalf("%s/%s: re-encoded %q want %q", vc.File, vc.Name, got, b)
		}
		switch cmd.(type) {
		case *Result, *Value:
		default:
			t.Fatalf("%s/%s: response decoded as %T", vc.File, vc.Name, cmd)
		}
		n++
	}
	if n < 40 {
		t.Fatalf("only %d responses checked", n)
	}
}

// TestVectorMessageChecksums checks Checksum against the record headers in
// message.txt.
func TestVectorMessageChecksums(t *testing.T) {
	for _, vc := range loadVectors(t) {
		if vc.File != "message.txt" {
			continue
		}
		rec, err := hex.DecodeString(vc.S)
		if err != nil || len(rec) < 20 {
			t.Fatalf("%s: bad record %q", vc.Name, vc.S)
		}
		want := int32(uint32(rec[4])<<24 | uint32(rec[5])<<16 | uint32(rec[6])<<8 | uint32(rec[7]))
		if got := Checksum(vc.C); got != want {
			t.Errorf("%s: checksum %d want %d", vc.Name, got, want)
		}
		if string(rec[20:]) != string(vc.C) {
			t.Errorf("%s: record body differs from put body", vc.Name)
		}
	}
}
