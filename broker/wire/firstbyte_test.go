package wire

import "testing"

// TestCanStartRequestCoversEveryRequest: every request in the conformance
// vectors (every first line a MetaQ client sends) begins with a byte
// CanStartRequest accepts, and a line whose first byte it refuses is
// refused by the decoder whatever follows (every vector's request with
// its first byte replaced), so claiming such a byte for another protocol
// takes nothing from MetaQ's clients.
func TestCanStartRequestCoversEveryRequest(t *testing.T) {
	var requests [][]byte
	for _, vc := range loadVectors(t) {
		if !isExchangeFile(vc.File) || len(vc.C) == 0 {
			continue
		}
		rest := vc.C
		for len(rest) > 0 {
			_, used, err := DecodeBytes(rest)
			if err != nil {
				t.Fatalf("%s/%s: %v", vc.File, vc.Name, err)
			}
			requests = append(requests, rest[:used])
			rest = rest[used:]
		}
	}
	if len(requests) < 60 {
		t.Fatalf("only %d requests in the vectors", len(requests))
	}
	for _, r := range requests {
		if !CanStartRequest(r[0]) {
			t.Fatalf("request %q starts with %#x, which CanStartRequest refuses", r, r[0])
		}
	}
	// The Go client's heartbeat and MetaQ's words not in the vectors.
	for _, line := range []string{"version 1\r\n", "quit\r\n", "stats\r\n", "offset t g 0 0 1\r\n", "value 1 1\r\nx"} {
		if !CanStartRequest(line[0]) {
			t.Fatalf("%q refused", line)
		}
	}
	claimable := 0
	for b := range 256 {
		if CanStartRequest(byte(b)) {
			continue
		}
		claimable++
		for _, r := range requests {
			line := append([]byte{byte(b)}, r[1:]...)
			if cmd, _, err := DecodeBytes(line); err == nil {
				t.Fatalf("%q (first byte %#x) decodes to %s", line, b, cmd.Name())
			}
			line = append([]byte{byte(b)}, r...)
			if cmd, _, err := DecodeBytes(line); err == nil {
				t.Fatalf("%q (first byte %#x) decodes to %s", line, b, cmd.Name())
			}
		}
	}
	for _, b := range []byte{0xA7, 0x16} { // replication frame magic, TLS handshake record
		if CanStartRequest(b) {
			t.Fatalf("%#x can start a MetaQ request", b)
		}
	}
	t.Logf("%d requests checked; %d first bytes never start one", len(requests), claimable)
}
