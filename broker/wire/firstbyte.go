package wire

// CanStartRequest reports whether a MetaQ request line may begin with b.
// Every command word starts with a lowercase ASCII letter; the decoder
// picks a command from the low byte of the first UTF-16 unit, so a line
// may also begin with a UTF-8 lead byte (0xC2..0xF4) and still select one
// (and be answered as MetaQ answers it). The test keeps a wide margin: any
// printable ASCII byte, whitespace and every lead byte count. A byte for
// which this is false can never start a request MetaQ would accept, so
// another protocol may claim it on the MetaQ port (the replication
// stream's frame magic, a TLS record's content type).
func CanStartRequest(b byte) bool {
	switch {
	case b == '\t' || b == '\n' || b == '\r':
		return true
	case b >= 0x20 && b <= 0x7E:
		return true
	case b >= 0xC2 && b <= 0xF4:
		return true
	}
	return false
}
