// Package wire is the codec of the MetaQ 1.4.6 TCP protocol (spec §1): it
// knows bytes and commands only and imports nothing else from the project,
// so that it can be fuzzed on its own. The broker and the Go client share
// it: every command type has an encoder (AppendTo) and the Decoder reads
// requests and responses alike.
//
// # Framing
//
// Every frame, in both directions, starts with a text header line ended by
// CRLF (a lone LF does not end it). The header is UTF-8 and is split on
// single spaces exactly as Java's Pattern.compile(" ").split does: two
// spaces give an empty field, empty fields at the end are dropped, nothing
// is trimmed, and a tab is an ordinary character. Only put and sync (from
// clients) and result and value (from the broker) carry a body, whose byte
// length is a header field:
//
//	put <topic> <partition> <len> <flag> <opaque>\r\n<body>                      6 fields (old clients)
//	put <topic> <partition> <len> <flag> <checksum> <opaque>\r\n<body>           7 fields
//	put <topic> <partition> <len> <flag> <txKey> <opaque>\r\n<body>              7 fields (old, in a tx)
//	put <topic> <partition> <len> <flag> <checksum> <txKey> <opaque>\r\n<body>   8 fields
//	get <topic> <group> <partition> <offset> <maxSize> <opaque>\r\n
//	offset <topic> <group> <partition> <offset> <opaque>\r\n
//	version [<opaque>]\r\n
//	stats [<item>] [<opaque>]\r\n         ("stats  <opaque>" = blank item)
//	quit\r\n
//	transaction <txKey> <sessionId> <type> [<timeout>] [<uniqueQualifier>] <opaque>\r\n
//	sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque>\r\n<body>
//	result <code> <len> <opaque>\r\n<body>
//	value <len> <opaque>\r\n<data>
//
// A 7-field put carries a checksum when its sixth field starts with a digit
// or '-', else a transaction key. A 6-field transaction carries a timeout
// when its fifth field is all digits, else a unique qualifier.
//
// The command is chosen by the first character of the first field, as
// MetaQ does: p put, g get, t transaction, r result, o offset, q quit
// (whatever follows), v value if the word is exactly "value" else version
// (whatever follows), s stats if the word is exactly "stats" else sync. The
// other commands must then match their whole word.
//
// # Opaque
//
// Every request except quit ends with an opaque, a signed 32-bit decimal
// (usually negative: Java clients count up from -2147483648), that the answer
// echoes as its last header field. version and stats may omit it; the
// broker then uses NoOpaque (2147483647). Requests are pipelined and may be
// answered out of order.
//
// # Errors
//
// MetaQ closes the connection, without answering, whenever its decoder
// fails: an unknown command, a wrong word, a missing field, a number that
// does not parse, a bad transaction key or type. Decode returns a
// *FatalError for all of these, and the caller closes the connection. A
// declared body longer than Decoder.MaxBodySize, or negative, is fatal too
// and is detected before any body byte is read. *ClientError is the
// recoverable kind: the broker answers it with a result frame and keeps
// the connection.
//
// # Records
//
// A value frame carries stored records back to back, each a 20-byte header
// followed by the put body (spec §1.10), and may end in a partial record:
//
//	+--------+----------+---------+--------+-----------------+
//	| msgLen | checksum |   id    |  flag  | body (msgLen)   |
//	| int32  |  int32   |  int64  | int32  | [attr] payload  |
//	+--------+----------+---------+--------+-----------------+
//
// checksum is CRC32(body) & 0x7FFFFFFF (Checksum); all integers big-endian.
package wire
