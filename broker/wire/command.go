package wire

import (
	"strconv"
)

// NoOpaque is the opaque MetaQ assumes for `version` and `stats` sent without
// one (Java Integer.MAX_VALUE); the broker echoes it.
const NoOpaque int32 = 2147483647

// NoChecksum is the checksum value that means "do not verify" (see put in the package doc).
const NoChecksum int32 = -1

// Command is one decoded frame. Requests (Put, Get, Offset, Version, Stats,
// Quit, Transaction, Sync) and responses (Result, Value) share it so that a
// client and the broker use the same codec.
type Command interface {
	// Name is the command word ("put", "get", ...).
	Name() string
	// OpaqueID is the opaque the frame carries. Quit has none and returns 0.
	OpaqueID() int32
	// AppendTo appends the complete frame (header line and body) to b.
	AppendTo(b []byte) []byte
}

// Put is `put topic partition bodyLen flag [checksum] [txKey] opaque\r\nbody`
// (see put in the package doc).
type Put struct {
	Topic     string
	Partition int32 // -1: the broker picks one at random
	Flag      int32
	// Checksum is CRC32(Body)&0x7FFFFFFF, or NoChecksum when absent or -1.
	Checksum int32
	// TxKey is the raw transaction key ("" = not in a transaction) and Tx its
	// parsed form (valid when TxKey != "").
	TxKey  string
	Tx     TxID
	Opaque int32
	Body   []byte
	// Fields is the number of header fields the frame had (6, 7 or 8). When
	// encoding, 0 selects the 1.4.4+ form: 7 without a TxKey, 8 with one; 6
	// sends the pre-1.4.4 form without checksum (and without TxKey); 7 with a
	// TxKey sends the pre-1.4.4 transactional form (txKey instead of checksum).
	Fields int
}

// Get is `get topic group partition offset maxSize opaque` (see get in the package doc).
type Get struct {
	Topic     string
	Group     string
	Partition int32
	Offset    int64
	MaxSize   int32
	Opaque    int32
}

// Offset is `offset topic group partition offset opaque` (see offset in the package doc).
type Offset struct {
	Topic     string
	Group     string
	Partition int32
	Offset    int64
	Opaque    int32
}

// Version is `version [opaque]` (see version in the package doc). Without an opaque, Opaque is
// NoOpaque and HasOpaque false.
type Version struct {
	Opaque    int32
	HasOpaque bool
}

// Stats is `stats [item] [opaque]` (see stats in the package doc). Item "" means system stats,
// whether sent as two spaces or omitted.
type Stats struct {
	Item      string
	HasItem   bool // the item field was present (possibly empty)
	Opaque    int32
	HasOpaque bool
}

// Quit is `quit`: the broker closes the connection without answering.
type Quit struct{}

// Transaction is `transaction txKey sessionId type [timeout] [uniqueQualifier] opaque`
// (see Transactions in the package doc).
type Transaction struct {
	TxKey           string // raw key as sent
	Tx              TxID   // parsed key
	SessionID       string
	Type            TxType
	Timeout         int32  // seconds; 0 = not sent
	UniqueQualifier string // "" = not sent
	Opaque          int32
}

// Sync is `sync topic partition bodyLen flag msgId [checksum] opaque\r\nbody`
// (see sync in the package doc), sent by a synchronous-replication master to its slave.
type Sync struct {
	Topic     string
	Partition int32
	Flag      int32
	MsgID     int64
	Checksum  int32 // NoChecksum when absent
	Opaque    int32
	Body      []byte
	// Fields is 7 (pre-1.4.4, no checksum) or 8; 0 encodes as 8.
	Fields int
}

// SyncUnit is `syncunit <count> <len> <opaque>\r\n<body>`, where the body
// is count sync frames one after the other (see sync unit in the package
// doc): a transaction's commit that a synchronous master sends whole to a
// slave that offered sync units, which stores it all or none and answers
// once. It is no MetaQ command: a MetaQ broker's decoder closes the
// connection on it, so it is sent only to a slave that offered it.
type SyncUnit struct {
	// Syncs are the commit's messages in order; their Opaque is not
	// used. Decoded bodies share the frame's body buffer.
	Syncs  []Sync
	Opaque int32
}

// Result is the broker's status answer `result code bodyLen opaque\r\nbody`.
type Result struct {
	Code   int
	Body   []byte
	Opaque int32
}

// Value is the broker's data answer to get: `value len opaque\r\ndata`.
type Value struct {
	Data   []byte
	Opaque int32
}

// Name implementations.
func (*Put) Name() string         { return "put" }
func (*Get) Name() string         { return "get" }
func (*Offset) Name() string      { return "offset" }
func (*Version) Name() string     { return "version" }
func (*Stats) Name() string       { return "stats" }
func (*Quit) Name() string        { return "quit" }
func (*Transaction) Name() string { return "transaction" }
func (*Sync) Name() string        { return "sync" }
func (*SyncUnit) Name() string    { return "syncunit" }
func (*Result) Name() string      { return "result" }
func (*Value) Name() string       { return "value" }

// OpaqueID implementations.
func (c *Put) OpaqueID() int32         { return c.Opaque }
func (c *Get) OpaqueID() int32         { return c.Opaque }
func (c *Offset) OpaqueID() int32      { return c.Opaque }
func (c *Version) OpaqueID() int32     { return c.Opaque }
func (c *Stats) OpaqueID() int32       { return c.Opaque }
func (*Quit) OpaqueID() int32          { return 0 }
func (c *Transaction) OpaqueID() int32 { return c.Opaque }
func (c *Sync) OpaqueID() int32        { return c.Opaque }
func (c *SyncUnit) OpaqueID() int32    { return c.Opaque }
func (c *Result) OpaqueID() int32      { return c.Opaque }
func (c *Value) OpaqueID() int32       { return c.Opaque }

// Status codes (see the package doc).
const (
	StatusOK                  = 200
	StatusMoved               = 301
	StatusBadRequest          = 400
	StatusForbidden           = 403
	StatusNotFound            = 404
	StatusInternalServerError = 500
	StatusServiceUnavailable  = 503
	StatusGatewayTimeout      = 504
)

// NewResult builds a Result with a text body.
func NewResult(code int, body string, opaque int32) *Result {
	r := &Result{Code: code, Opaque: opaque}
	if body != "" {
		r.Body = []byte(body)
	}
	return r
}

// OK reports whether the result is a success (200).
func (r *Result) OK() bool { return r.Code == StatusOK }

// String returns the body as text.
func (r *Result) String() string { return strconv.Itoa(r.Code) + " " + string(r.Body) }
