package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"metaq/georeplicator"
)

// Role is what a bundle is for its brokerId: the master or an async slave.
type Role uint8

const (
	// RoleMaster serves producers and ships its log to slaves.
	RoleMaster Role = iota
	// RoleSlave replicates a master and serves reads.
	RoleSlave
)

// String returns "master" or "slave".
func (r Role) String() string {
	if r == RoleSlave {
		return "slave"
	}
	return "master"
}

// MarshalText makes Role print as its name in JSON.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses "master" or "slave".
func (r *Role) UnmarshalText(b []byte) error {
	switch string(b) {
	case "master":
		*r = RoleMaster
	case "slave":
		*r = RoleSlave
	default:
		return fmt.Errorf("topology: unknown role %q", b)
	}
	return nil
}

// LagState and its values are georeplicator's (where lag is measured);
// named here too because routing speaks of them throughout.
type LagState = georeplicator.LagState

const (
	LagOK      = georeplicator.LagOK
	LagLagging = georeplicator.LagLagging
	LagStuck   = georeplicator.LagStuck
	LagDown    = georeplicator.LagDown
)

// Health is a bundle's own view of its storage and replication.
type Health struct {
	// StorageOK is false after a storage write failure (the store's health state).
	StorageOK bool `json:"storageOk"`
	// ReplicationOK is false when this bundle's replication link is broken: a
	// slave that cannot reach its master, or a master whose shipper failed.
	ReplicationOK bool `json:"replicationOk"`
}

// LagSummary is one slave group's replication lag as a master publishes it
// in its gossip metadata: totals over all partitions.
type LagSummary = georeplicator.LagSummary

// Meta is the node metadata every bundle gossips. It is encoded compactly
// (EncodeMeta) because memberlist refuses metadata over 512 bytes.
type Meta struct {
	Site     string `json:"site"`
	Role     Role   `json:"role"`
	BrokerID int    `json:"brokerId"`
	// SlaveID is -1 for a master.
	SlaveID int `json:"slaveId"`
	// ServeURL is the MetaQ serving address, meta://host:port.
	ServeURL string `json:"serveUrl"`
	// ReplAddr is the replication listener (master) or "" (slave).
	ReplAddr string `json:"replAddr,omitempty"`
	// HTTPAddr is the dashboard/JSON address serving /lag, "" when none.
	HTTPAddr string `json:"httpAddr,omitempty"`
	Health   Health `json:"health"`
	// Lag is the master's per-slave-group summary; empty on slaves.
	Lag []LagSummary `json:"lag,omitempty"`
	// LagTruncated is true when Lag entries were left out to fit the size limit.
	LagTruncated bool `json:"lagTruncated,omitempty"`
	// ZKConnect and ZKRoot name this bundle's site ensemble (zk.zkConnect
	// without a chroot, and the effective root): what other bundles need to
	// keep this site's view for Java consumers while its own bundles are down.
	// Empty when ZooKeeper is off.
	ZKConnect string `json:"zkConnect,omitempty"`
	ZKRoot    string `json:"zkRoot,omitempty"`
	// Views lists the sites whose ensembles this bundle holds a session to
	// right now, so it can write their views (see viewKeeper).
	Views []string `json:"views,omitempty"`
	// Generation is the master generation this bundle knows for its
	// brokerId (raised by every promotion): a slave follows the master of
	// the highest one, and a master that sees a higher one steps down.
	Generation uint64 `json:"generation,omitempty"`
	// LogPos is how far this bundle's log goes: applied on a slave,
	// written on a master. Automatic failover promotes the slave with the
	// highest.
	LogPos int64 `json:"logPos,omitempty"`
}

// MetaMaxSize is memberlist's limit on node metadata.
const MetaMaxSize = memberlist.MetaMaxSize

const metaVersion = 1

// maxMetaString bounds each string so that a master's identity always fits
// with room for lag entries.
const maxMetaString = 100

// maxMetaEnsemble bounds the ensemble fields (connect string and root) and
// the views list together; they are gossiped after the lag entries, which
// give way to them.
const maxMetaEnsemble = 160

// ErrMetaTooLarge is returned by EncodeMeta when the metadata cannot fit in
// MetaMaxSize even without lag entries (strings too long).
var ErrMetaTooLarge = errors.New("topology: node metadata over 512 bytes")

// errMetaCorrupt is returned by DecodeMeta for bytes it cannot parse.
var errMetaCorrupt = errors.New("topology: corrupt node metadata")

const (
	flagSlave    = 1 << 0
	flagStorage  = 1 << 1
	flagRepl     = 1 << 2
	flagLagTrunc = 1 << 3
)

// EncodeMeta encodes m in a compact binary form of at most MetaMaxSize bytes:
//
//	version u8 | flags u8 | brokerId uvarint | slaveId varint |
//	site, serveURL, replAddr, httpAddr (uvarint length + bytes) |
//	nLag uvarint | nLag × (group str, slaveId varint, partitions uvarint,
//	bytes uvarint, messages uvarint, behind ms uvarint, state u8) |
//	zkConnect, zkRoot, views joined by "," (uvarint length + bytes)
//
// The ensemble fields come last so that a decoder that predates them (it
// stops after the lag entries) still reads the rest.
//
// Lag entries that do not fit are left out and the truncated flag is set, so
// a master with many slave groups still gossips its identity and health.
func EncodeMeta(m Meta) ([]byte, error) {
	for _, s := range []string{m.Site, m.ServeURL, m.ReplAddr, m.HTTPAddr} {
		if len(s) > maxMetaString {
			return nil, fmt.Errorf("%w: field %.20q... is %d bytes (max %d)", ErrMetaTooLarge, s, len(s), maxMetaString)
		}
	}
	views := strings.Join(m.Views, ",")
	if n := len(m.ZKConnect) + len(m.ZKRoot) + len(views); n > maxMetaEnsemble {
		return nil, fmt.Errorf("%w: ZooKeeper connect string, root and views are %d bytes (max %d)", ErrMetaTooLarge, n, maxMetaEnsemble)
	}
	var tail []byte // left out when empty: the bytes of the format before it
	if m.ZKConnect != "" || m.ZKRoot != "" || views != "" || m.Generation > 0 || m.LogPos > 0 {
		for _, s := range []string{m.ZKConnect, m.ZKRoot, views} {
			tail = appendString(tail, s)
		}
	}
	if m.Generation > 0 || m.LogPos > 0 {
		// After the ensemble fields: decoders that predate them stop before.
		tail = binary.AppendUvarint(tail, m.Generation)
		if m.LogPos > 0 {
			tail = binary.AppendUvarint(tail, uint64(m.LogPos))
		}
	}
	var flags byte
	if m.Role == RoleSlave {
		flags |= flagSlave
	}
	if m.Health.StorageOK {
		flags |= flagStorage
	}
	if m.Health.ReplicationOK {
		flags |= flagRepl
	}
	head := []byte{metaVersion, flags}
	head = binary.AppendUvarint(head, uint64(max(m.BrokerID, 0)))
	head = binary.AppendVarint(head, int64(m.SlaveID))
	for _, s := range []string{m.Site, m.ServeURL, m.ReplAddr, m.HTTPAddr} {
		head = appendString(head, s)
	}
	var entries [][]byte
	truncated := m.LagTruncated
	size := len(head) + binary.MaxVarintLen16 + len(tail)
	for _, l := range m.Lag {
		e := appendString(nil, truncate(l.SlaveGroup, maxMetaString))
		e = binary.AppendVarint(e, int64(l.SlaveID))
		e = binary.AppendUvarint(e, uint64(max(l.Partitions, 0)))
		e = binary.AppendUvarint(e, uint64(max(l.Bytes, 0)))
		e = binary.AppendUvarint(e, uint64(max(l.Messages, 0)))
		e = binary.AppendUvarint(e, uint64(max(l.Behind.Milliseconds(), 0)))
		e = append(e, byte(l.State))
		if size+len(e) > MetaMaxSize {
			truncated = true
			break
		}
		size += len(e)
		entries = append(entries, e)
	}
	if truncated {
		head[1] |= flagLagTrunc
	}
	out := binary.AppendUvarint(head, uint64(len(entries)))
	for _, e := range entries {
		out = append(out, e...)
	}
	out = append(out, tail...)
	if len(out) > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrMetaTooLarge, len(out))
	}
	return out, nil
}

// DecodeMeta parses what EncodeMeta produced.
func DecodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	var m Meta
	if v := d.byte(); v != metaVersion {
		return m, fmt.Errorf("%w: version %d", errMetaCorrupt, v)
	}
	flags := d.byte()
	if flags&flagSlave != 0 {
		m.Role = RoleSlave
	}
	m.Health.StorageOK = flags&flagStorage != 0
	m.Health.ReplicationOK = flags&flagRepl != 0
	m.LagTruncated = flags&flagLagTrunc != 0
	m.BrokerID = int(d.uvarint())
	m.SlaveID = int(d.varint())
	m.Site = d.string()
	m.ServeURL = d.string()
	m.ReplAddr = d.string()
	m.HTTPAddr = d.string()
	n := d.uvarint()
	if n > MetaMaxSize {
		return m, fmt.Errorf("%w: %d lag entries", errMetaCorrupt, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var l LagSummary
		l.SlaveGroup = d.string()
		l.SlaveID = int(d.varint())
		l.Partitions = int(d.uvarint())
		l.Bytes = int64(d.uvarint())
		l.Messages = int64(d.uvarint())
		l.Behind = time.Duration(d.uvarint()) * time.Millisecond
		l.State = LagState(d.byte())
		if l.State > LagDown {
			d.err = errMetaCorrupt
		}
		m.Lag = append(m.Lag, l)
	}
	if d.err == nil && len(d.b) > 0 {
		m.ZKConnect = d.string()
		m.ZKRoot = d.string()
		if v := d.string(); v != "" {
			m.Views = strings.Split(v, ",")
		}
		if d.err == nil && len(d.b) > 0 {
			m.Generation = d.uvarint()
		}
		if d.err == nil && len(d.b) > 0 {
			m.LogPos = int64(d.uvarint())
		}
	}
	if d.err != nil {
		return Meta{}, d.err
	}
	return m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// decoder reads the fields of EncodeMeta, remembering the first error so the
// caller checks once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = errMetaCorrupt
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errMetaCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint undoes the zig-zag encoding binary.AppendVarint applies on top of
// an unsigned varint.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errMetaCorrupt
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
