package georeplicator

import (
	"encoding/binary"
	"fmt"
	"time"

	"metaq/broker/store"
)

// protocolVersion is sent in hello and welcome; a master refuses other versions.
const protocolVersion = 1

// hello is the slave's opening message.
type hello struct {
	Version  uint16
	BrokerID int32 // the slave's brokerId; must equal the master's (see Async slaves in broker/wire/doc.go). -1 = do not check
	SlaveID  int32
	Group    string
	Codec    Mode  // the slave's preference; "" = the master's setting
	Resume   int64 // master log position to resume from; -1 = from the first retained entry
	Window   uint32
	RateCap  int64         // the slave's bandwidth cap in bytes/s; 0 = none
	MaxDelay time.Duration // slaveMaxDelayInMills: longest a durable record may wait before it is sent
	WantConf bool          // send the master's server.ini (autoSyncMasterConfig)

	// Optional tail (older slaves send none). MasterLog is the master log
	// Resume refers to ("" = unknown: trust Resume); a master with another
	// log, or with its own log whose history has other generations than
	// Lineage (its log forked since), starts at the lowest position
	// covering Ends, this slave's partition ends. Generation is the highest
	// master generation the slave knows.
	MasterLog  string
	Generation uint64
	Ends       []partEnd
	// Features are the optional messages this slave understands
	// (feature* in control.go), after Ends: older masters ignore them.
	Features uint32
	// Lineage (with HasLineage, after Features) lists the generations of
	// the history of the slave's log (Identity.History): a master that
	// resumes it by partition ends finds the newest generation both logs
	// hold and cuts it where the master's later generations start. Older
	// slaves send none; they are cut at the master's own promotion ends.
	HasLineage bool
	Lineage    []uint64
}

func (h hello) encode() []byte {
	var e enc
	e.u16(h.Version)
	e.u32(uint32(h.BrokerID))
	e.u32(uint32(h.SlaveID))
	e.str(h.Group)
	e.str(string(h.Codec))
	e.i64(h.Resume)
	e.u32(h.Window)
	e.i64(h.RateCap)
	e.u32(uint32(h.MaxDelay / time.Millisecond))
	var f byte
	if h.WantConf {
		f |= 1
	}
	e.u8(f)
	e.str(h.MasterLog)
	e.u64(h.Generation)
	encodeEnds(&e, h.Ends)
	e.u32(h.Features)
	if h.HasLineage {
		encodeGenerations(&e, h.Lineage)
	}
	return e.b
}

func encodeEnds(e *enc, ends []partEnd) {
	e.u32(uint32(len(ends)))
	for _, p := range ends {
		e.str(p.Topic)
		e.u32(uint32(p.Partition))
		e.i64(p.End)
	}
}

func decodeEnds(d *dec) []partEnd {
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/14 {
		d.err = fmt.Errorf("%w: %d partition ends claimed", ErrProtocol, n)
		return nil
	}
	var ends []partEnd
	for i := 0; i < n && d.err == nil; i++ {
		ends = append(ends, partEnd{Topic: d.str(), Partition: int(int32(d.u32())), End: d.i64()})
	}
	return ends
}

func decodeHello(p []byte) (hello, error) {
	d := dec{b: p}
	h := hello{
		Version:  d.u16(),
		BrokerID: int32(d.u32()),
		SlaveID:  int32(d.u32()),
		Group:    d.str(),
		Codec:    Mode(d.str()),
		Resume:   d.i64(),
		Window:   d.u32(),
		RateCap:  d.i64(),
		MaxDelay: time.Duration(d.u32()) * time.Millisecond,
	}
	h.WantConf = d.u8()&1 != 0
	if d.err == nil && len(d.b) > 0 {
		h.MasterLog = d.str()
		h.Generation = d.u64()
		h.Ends = decodeEnds(&d)
	}
	if d.err == nil && len(d.b) >= 4 {
		h.Features = d.u32()
	}
	if d.err == nil && len(d.b) > 0 {
		h.HasLineage, h.Lineage = true, decodeGenerations(&d)
	}
	return h, d.err
}

// welcome is the master's answer to hello.
type welcome struct {
	Version   uint16
	BrokerID  int32
	Start     int64 // the log position the stream starts at
	First     int64 // master's first retained log position
	Durable   int64 // master's durable log end at handshake
	Truncated bool  // the requested position was below First: Start = First
	Keepalive time.Duration

	// Optional tail. LogID names the master's log (Start and the other
	// positions are in it); Generation is the master's generation; ByEnds
	// says Start was found from the slave's partition ends.
	LogID      string
	Generation uint64
	ByEnds     bool
	// PromotionEnds (with ByEnds) are where this master's generations that
	// the slave's log lacks start in its partitions (from the slave's
	// lineage; for a slave that sent none, each partition's end when this
	// master was promoted): a slave holding more (a former master's
	// unreplicated tail) cuts it and saves it aside before it follows.
	PromotionEnds []partEnd
	// Features are the optional messages this master accepts or sends on
	// this link (feature* in control.go), after PromotionEnds: older
	// slaves ignore them, and a slave reads none from an older master.
	Features uint32
	// Common (with HasCommon, after Features; with ByEnds and a lineage in
	// hello) is the newest generation both logs hold: the slave also cuts
	// where its own later generations start, which this master does not
	// know. The master's history itself follows in a history frame
	// (featureHistory). Older masters send neither.
	HasCommon bool
	Common    uint64
}

func (w welcome) encode() []byte {
	var e enc
	e.u16(w.Version)
	e.u32(uint32(w.BrokerID))
	e.i64(w.Start)
	e.i64(w.First)
	e.i64(w.Durable)
	var f byte
	if w.Truncated {
		f |= 1
	}
	e.u8(f)
	e.u32(uint32(w.Keepalive / time.Millisecond))
	e.str(w.LogID)
	e.u64(w.Generation)
	f = 0
	if w.ByEnds {
		f |= 1
	}
	e.u8(f)
	encodeEnds(&e, w.PromotionEnds)
	e.u32(w.Features)
	if w.HasCommon {
		e.u64(w.Common)
	}
	return e.b
}

func decodeWelcome(p []byte) (welcome, error) {
	d := dec{b: p}
	w := welcome{Version: d.u16(), BrokerID: int32(d.u32()), Start: d.i64(), First: d.i64(), Durable: d.i64()}
	w.Truncated = d.u8()&1 != 0
	w.Keepalive = time.Duration(d.u32()) * time.Millisecond
	if d.err == nil && len(d.b) > 0 {
		w.LogID = d.str()
		w.Generation = d.u64()
		w.ByEnds = d.u8()&1 != 0
		w.PromotionEnds = decodeEnds(&d)
	}
	if d.err == nil && len(d.b) >= 4 {
		w.Features = d.u32()
	}
	if d.err == nil && len(d.b) >= 8 {
		w.HasCommon, w.Common = true, d.u64()
	}
	return w, d.err
}

// partEnd is one partition's end as applied on the slave.
type partEnd struct {
	Topic     string
	Partition int
	End       int64
}

// ack reports the slave's progress. Acks also serve as the slave's keepalive.
type ack struct {
	Seq     uint64 // last frame applied in the current epoch (0 = none yet)
	Applied int64  // master log position applied
	Durable int64  // master log position checkpointed on the slave
	Echo    int64  // timestamp of the last keepalive seen, for RTT
	Parts   []partEnd
	// Synced is the master log position up to which the slave's store is
	// fsynced (>= Durable): sent after the partitions, so a master that
	// predates it reads the rest and ignores it; a slave that predates it
	// sends none and Synced reads as Durable.
	Synced int64
}

func (a ack) encode() []byte {
	var e enc
	e.u64(a.Seq)
	e.i64(a.Applied)
	e.i64(a.Durable)
	e.i64(a.Echo)
	encodeEnds(&e, a.Parts)
	e.i64(a.Synced)
	return e.b
}

func decodeAck(p []byte) (ack, error) {
	d := dec{b: p}
	a := ack{Seq: d.u64(), Applied: d.i64(), Durable: d.i64(), Echo: d.i64()}
	a.Parts = decodeEnds(&d)
	a.Synced = a.Durable
	if d.err == nil && len(d.b) >= 8 {
		a.Synced = max(d.i64(), a.Durable)
	}
	return a, d.err
}

// keepalive is sent by the master when it has nothing else to send.
type keepalive struct {
	SentAt  int64 // master clock, unix ns; echoed in the next ack
	Durable int64 // master's durable log end
}

func (k keepalive) encode() []byte {
	var e enc
	e.i64(k.SentAt)
	e.i64(k.Durable)
	return e.b
}

func decodeKeepalive(p []byte) (keepalive, error) {
	d := dec{b: p}
	k := keepalive{SentAt: d.i64(), Durable: d.i64()}
	return k, d.err
}

// batch is the decoded payload of a data frame: the entries of the master
// log between Start and End, in log order.
type batch struct {
	Start, End int64
	SentAt     int64 // master clock when the frame was built, unix ns
	Entries    []store.LogEntry
}

func encodeBatch(dst []byte, start, end, sentAt int64, entries []store.LogEntry) []byte {
	e := enc{b: dst[:0]}
	e.i64(start)
	e.i64(end)
	e.i64(sentAt)
	e.u32(uint32(len(entries)))
	for _, en := range entries {
		e.str(en.Topic)
		e.u32(uint32(en.Partition))
		e.i64(en.Offset)
		e.i64(en.Time.UnixNano())
		e.bytes(en.Records)
	}
	// The units among the entries (LogEntry.Unit), when there are any:
	// their count, then each one's first entry and number of entries.
	// Sent only to a slave that stated featureUnits.
	units := 0
	for _, en := range entries {
		if en.Unit > 1 {
			units++
		}
	}
	if units > 0 {
		e.u32(uint32(units))
		for i, en := range entries {
			if en.Unit > 1 {
				e.u32(uint32(i))
				e.u32(uint32(en.Unit))
			}
		}
	}
	return e.b
}

// decodeBatch decodes a data payload. Records alias p.
func decodeBatch(p []byte) (batch, error) {
	d := dec{b: p}
	b := batch{Start: d.i64(), End: d.i64(), SentAt: d.i64()}
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/26 {
		return b, fmt.Errorf("%w: batch claims %d entries", ErrCorruptFrame, n)
	}
	b.Entries = make([]store.LogEntry, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var en store.LogEntry
		en.Topic = d.str()
		en.Partition = int(int32(d.u32()))
		en.Offset = d.i64()
		en.Time = time.Unix(0, d.i64())
		en.Records = d.bytes()
		b.Entries = append(b.Entries, en)
	}
	if d.err == nil && len(d.b) > 0 {
		// The units (featureUnits): ascending, not overlapping, within
		// the entries.
		units := int(d.u32())
		if d.err == nil && units > len(d.b)/8 {
			return b, fmt.Errorf("%w: batch claims %d units", ErrCorruptFrame, units)
		}
		next := 0
		for i := 0; i < units && d.err == nil; i++ {
			first, count := int(d.u32()), int(d.u32())
			if d.err == nil && (first < next || count < 2 || first >= len(b.Entries) || count > len(b.Entries)-first) {
				return b, fmt.Errorf("%w: unit of %d entries at entry %d of %d", ErrCorruptFrame, count, first, len(b.Entries))
			}
			if d.err == nil {
				b.Entries[first].Unit = count
				next = first + count
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in batch", ErrCorruptFrame, len(d.b))
	}
	return b, d.err
}

// recordHeaderLen is the MetaQ stored record header (see Records in broker/wire/doc.go).
const recordHeaderLen = 20

// countRecords counts the whole records in b and checks that b holds whole
// records only.
func countRecords(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if len(b) < recordHeaderLen {
			return n, fmt.Errorf("%w: partial record header", ErrCorruptFrame)
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		if l < 0 || recordHeaderLen+l > len(b) {
			return n, fmt.Errorf("%w: record length %d exceeds entry", ErrCorruptFrame, l)
		}
		b = b[recordHeaderLen+l:]
		n++
	}
	return n, nil
}

// recordBoundary reports whether off (relative to b's start) is the start of
// a record in b, or its end.
func recordBoundary(b []byte, off int) bool {
	pos := 0
	for pos < off && pos+recordHeaderLen <= len(b) {
		pos += recordHeaderLen + int(int32(binary.BigEndian.Uint32(b[pos:])))
	}
	return pos == off
}
