package store

import "encoding/binary"

// salvageWindow bounds how far past the first damaged record salvage looks
// for the next intact one when the damaged record's own length cannot be
// trusted.
const salvageWindow = 1 << 20

// salvage finds the records of a damaged data payload (one log entry whose
// crc failed) that can still be served: every record carries its own body
// checksum (see Records in broker/wire/doc.go), so the damage is located at the records that fail
// theirs. It returns the payload's damaged part [a, b): the whole records
// before a and from b to the end pass their checks and tile the payload
// exactly. When no record fails (the damage is in the entry header, or in
// a record's id or flag, which no checksum covers) it cannot be located:
// the whole payload is damaged (0, len).
//
// An empty record next to the damage counts as damaged too: its checksum is
// that of an empty body, the constant 0, so it vouches for nothing, and
// zeroed bytes (a length and a checksum of 0) read as one. Kept, it would be
// served at offsets where other bytes were written. An empty record inside
// a kept run is vouched for by the framing around it (the checked record
// before it says where it starts, the checked one after it where it ends).
func salvage(payload []byte) (a, b int) {
	a, b = damagedRange(payload)
	if a == 0 && b == len(payload) {
		return a, b
	}
	return lastNonEmptyEnd(payload, a), firstNonEmpty(payload, b)
}

// damagedRange is salvage before empty records next to the damage are
// added to it.
func damagedRange(payload []byte) (a, b int) {
	a = intactRun(payload, 0)
	if a == len(payload) {
		return 0, len(payload)
	}
	// Most often only the first failing record's body is hit: its length
	// still says where the next record starts.
	if len(payload)-a >= RecordHeaderLen {
		n := int(int32(binary.BigEndian.Uint32(payload[a:])))
		if next := a + RecordHeaderLen + n; n >= 0 && n <= MaxRecordBody && next <= len(payload) && intactRun(payload, next) == len(payload) {
			return a, next
		}
	}
	// Else the first position after it from which intact records run
	// exactly to the end.
	for x := a + 1; x+RecordHeaderLen <= len(payload) && x <= a+salvageWindow; x++ {
		if n := int(int32(binary.BigEndian.Uint32(payload[x:]))); n < 0 || x+RecordHeaderLen+n > len(payload) {
			continue
		}
		if intactRun(payload, x) == len(payload) {
			return a, x
		}
	}
	return a, len(payload)
}

// intactRun returns where the run of records starting at x that pass their
// checks ends (x itself when the first one fails).
func intactRun(payload []byte, x int) int {
	for x < len(payload) {
		_, n, err := DecodeRecord(payload[x:])
		if err != nil {
			return x
		}
		x += n
	}
	return x
}

// lastNonEmptyEnd returns where the last record with a body ends in the run
// of checked records from 0 to a (0 if none has one).
func lastNonEmptyEnd(payload []byte, a int) int {
	end := 0
	for x := 0; x < a; {
		n := RecordHeaderLen + int(binary.BigEndian.Uint32(payload[x:]))
		if n > RecordHeaderLen {
			end = x + n
		}
		x += n
	}
	return end
}

// firstNonEmpty skips the empty records at the start of the run of checked
// records from b to the end of payload.
func firstNonEmpty(payload []byte, b int) int {
	for b < len(payload) && binary.BigEndian.Uint32(payload[b:]) == 0 {
		b += RecordHeaderLen
	}
	return b
}
