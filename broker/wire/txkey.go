package wire

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// TxKind tells which kind of transaction key a TxID holds.
type TxKind uint8

const (
	// TxNull is the literal key "null", used by RECOVER.
	TxNull TxKind = iota
	// TxLocal is TX:<sessionId>:<n>.
	TxLocal
	// TxXA is XID:<formatId>:<gtrid hex>:<bqual hex>:<uniqueQualifier>.
	TxXA
)

// TxID is a parsed transaction key (see Transactions in the package doc).
type TxID struct {
	Kind TxKind
	// Local keys.
	SessionID string
	Value     int32
	// XA keys.
	FormatID        int32
	GlobalID        []byte
	BranchQualifier []byte
	UniqueQualifier string
}

// String returns the canonical key, as MetaQ's getTransactionKey does (hex in
// lowercase), which is what error texts quote.
func (t TxID) String() string {
	switch t.Kind {
	case TxLocal:
		return "TX:" + t.SessionID + ":" + strconv.Itoa(int(t.Value))
	case TxXA:
		return "XID:" + strconv.Itoa(int(t.FormatID)) + ":" + hex.EncodeToString(t.GlobalID) + ":" +
			hex.EncodeToString(t.BranchQualifier) + ":" + t.UniqueQualifier
	default:
		return "null"
	}
}

// ParseTxKey parses a transaction key with MetaQ's rules: "null", a local key
// split on ':' with trailing empty parts dropped and exactly 3 parts, or an
// XA key split on ':' with empty parts kept and exactly 5 parts. Any other
// form is an error (the Java broker closes the connection).
func ParseTxKey(key string) (TxID, error) {
	switch {
	case key == "null":
		return TxID{Kind: TxNull}, nil
	case strings.HasPrefix(key, "XID:"):
		parts := strings.Split(key, ":")
		if len(parts) != 5 {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q", key)
		}
		f, err := parseInt32(parts[1])
		if err != nil {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q: %w", key, err)
		}
		g, err := parseHexJava(parts[2])
		if err != nil {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q: %w", key, err)
		}
		b, err := parseHexJava(parts[3])
		if err != nil {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q: %w", key, err)
		}
		return TxID{Kind: TxXA, FormatID: f, GlobalID: g, BranchQualifier: b, UniqueQualifier: parts[4]}, nil
	case strings.HasPrefix(key, "TX:"):
		parts := javaSplit(key, ':')
		if len(parts) != 3 {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q", key)
		}
		v, err := parseInt32(parts[2])
		if err != nil {
			return TxID{}, fmt.Errorf("wire: illegal transaction key %q: %w", key, err)
		}
		return TxID{Kind: TxLocal, SessionID: parts[1], Value: v}, nil
	default:
		return TxID{}, fmt.Errorf("wire: illegal transaction key %q", key)
	}
}

// parseHexJava decodes hex as HexSupport.toBytesFromHex does: pairs of hex
// digits, an odd trailing digit ignored. Signs that Integer.parseInt(h,16)
// would accept ("+f", "-f") are refused here; Java clients never send them.
func parseHexJava(s string) ([]byte, error) {
	n := len(s) / 2
	out, err := hex.DecodeString(s[:2*n])
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TxType is the transaction command type (see Transactions in the package doc).
type TxType string

// Transaction command types.
const (
	TxBegin          TxType = "BEGIN"
	TxPrepare        TxType = "PREPARE"
	TxCommitOnePhase TxType = "COMMIT_ONE_PHASE"
	TxCommitTwoPhase TxType = "COMMIT_TWO_PHASE"
	TxRollback       TxType = "ROLLBACK"
	TxRecover        TxType = "RECOVER"
	TxForget         TxType = "FORGET"
	TxEnd            TxType = "END"
)

// Valid reports whether t is one of the eight known types.
func (t TxType) Valid() bool {
	switch t {
	case TxBegin, TxPrepare, TxCommitOnePhase, TxCommitTwoPhase, TxRollback, TxRecover, TxForget, TxEnd:
		return true
	}
	return false
}
