package georeplicator

// Optional messages on an established link, each behind a feature bit that
// both ends state in the handshake (hello.Features, welcome.Features, read
// by older peers as trailing bytes they ignore). A slave sends a control
// request only to a master whose welcome offered featureControl; a master
// sends lag reports only to a slave whose hello asked for them. An older
// peer therefore never receives a message type it does not know, and a
// request to an older master fails here with ErrControlUnsupported.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Message types of the optional messages.
const (
	typeControl      byte = 10 // slave → master: a control request (featureControl)
	typeControlReply byte = 11 // master → slave: its outcome
	typeLagReport    byte = 12 // master → slave: this slave's lag per partition (featureLagReport)
	typeHistory      byte = 13 // master → slave: the history of the master's log (featureHistory)
)

// Feature bits of hello.Features and welcome.Features.
const (
	// featureControl: in hello, the slave may send control requests; in
	// welcome, the master takes them on this link.
	featureControl uint32 = 1 << 0
	// featureLagReport: in hello, the slave reads lag reports; in welcome,
	// the master sends them.
	featureLagReport uint32 = 1 << 1
	// featureFrameMAC: in hello, the slave authenticates every frame after
	// a shared-secret handshake (framemac.go). Stated in hello only: the
	// master answers by the label of its proof.
	featureFrameMAC uint32 = 1 << 2
	// featureHistory: in hello, the slave reads the history of the
	// master's log (history.go), which the master sends after welcome and
	// the slave takes as its own.
	featureHistory uint32 = 1 << 3
	// featureUnits: in hello, the slave reads the units of a data frame
	// (the master log's units, a transaction's commit each: a list after
	// the batch's entries, see encodeBatch); in welcome, the master sends
	// them.
	featureUnits uint32 = 1 << 4
)

// slaveFeatures are the features every receiver of this version states.
const slaveFeatures = featureControl | featureLagReport | featureFrameMAC | featureHistory | featureUnits

// ErrControlUnsupported: the master on the other end of the link takes no
// control requests (an older version, or one not configured to).
var ErrControlUnsupported = errors.New("georeplicator: the master takes no requests over the replication link")

// ControlRequest is a request a slave sent its master over the replication
// link (Receiver.Control), as ShipperOptions.OnControl receives it.
type ControlRequest struct {
	Op   string            // what is asked, e.g. "switchover"
	Args map[string]string // its arguments
	// From names the requesting slave (group/slaveId), Addr its connection,
	// Auth how the link authenticated ("secret", "tls-client-cert", both
	// joined by "+", or "none").
	From, Addr, Auth string

	once  sync.Once
	reply func(body []byte, err error) error
	err   error
}

// Reply sends the outcome to the requesting slave: body, or err's text as
// the refusal. It returns once the answer is written (or could not be:
// the slave disconnected). Only the first call counts.
func (r *ControlRequest) Reply(body []byte, err error) error {
	r.once.Do(func() { r.err = r.reply(body, err) })
	return r.err
}

type controlReply struct {
	body []byte
	err  error
}

func encodeControl(id uint64, op string, args map[string]string) []byte {
	var e enc
	e.u64(id)
	e.str(op)
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.u32(uint32(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(args[k])
	}
	return e.b
}

func decodeControl(p []byte) (uint64, string, map[string]string, error) {
	d := dec{b: p}
	id, op := d.u64(), d.str()
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/4 {
		return 0, "", nil, fmt.Errorf("%w: control request claims %d arguments", ErrProtocol, n)
	}
	args := make(map[string]string, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		args[k] = d.str()
	}
	return id, op, args, d.err
}

func encodeControlReply(id uint64, body []byte, err error) []byte {
	var e enc
	e.u64(id)
	if err != nil {
		e.u8(1)
		e.bytes([]byte(err.Error()))
	} else {
		e.u8(0)
		e.bytes(body)
	}
	return e.b
}

func decodeControlReply(p []byte) (uint64, controlReply, error) {
	d := dec{b: p}
	id, failed, body := d.u64(), d.u8(), d.bytes()
	if d.err != nil {
		return 0, controlReply{}, d.err
	}
	if failed != 0 {
		return id, controlReply{err: errors.New(string(body))}, nil
	}
	return id, controlReply{body: append([]byte(nil), body...)}, nil
}

// handleControl runs on the session's reader: it checks the request and
// hands it to OnControl, which answers through Reply.
func (ss *session) handleControl(p []byte) error {
	s := ss.s
	id, op, args, err := decodeControl(p)
	if err != nil {
		return err
	}
	req := &ControlRequest{Op: op, Args: args, From: fmt.Sprintf("%s/%d", ss.key.Group, ss.key.SlaveID),
		Addr: ss.conn.RemoteAddr().String(), Auth: s.authMethod(ss.conn)}
	req.reply = func(body []byte, err error) error {
		select {
		case <-ss.done:
			return fmt.Errorf("georeplicator: slave %s disconnected before the answer", req.From)
		default:
		}
		return ss.writeWithin(header{typ: typeControlReply}, encodeControlReply(id, body, err), controlReplyTimeout)
	}
	switch {
	case ss.features&featureControl == 0 || s.opts.OnControl == nil:
		// The slave sent what the handshake did not offer.
		return fmt.Errorf("%w: control request from a slave not offered them", ErrProtocol)
	case req.Auth == "none" && !s.opts.AllowUnauthenticatedControl:
		ss.log.Warn("REPLICATION: refused a request over an unauthenticated link", "op", op)
		return req.Reply(nil, fmt.Errorf("refused: this master takes %q from a slave site only over an authenticated replication link; "+
			"run it at the master, or set [replication] secretFile (the same key file at every site) or mutual TLS", op))
	case req.Auth == "none":
		ss.log.Warn("UNAUTHENTICATED CONTROL REQUEST ACCEPTED: [replication] allowUnauthenticatedSwitchover=true lets anyone who reaches "+
			"the replication port ask this master to hand over; set [replication] secretFile", "op", op, "args", args)
	default:
		ss.log.Info("REPLICATION: request from a slave site", "op", op, "args", args, "auth", req.Auth)
	}
	s.opts.OnControl(req)
	return nil
}

// warnUnauthenticatedControl logs, loudly, a master that takes control
// requests (a switchover) from slaves it cannot authenticate.
func (s *Shipper) warnUnauthenticatedControl() {
	if _, authenticated := s.opts.security(); authenticated || s.opts.OnControl == nil || !s.opts.AllowUnauthenticatedControl {
		return
	}
	s.log.Warn("UNAUTHENTICATED SWITCHOVER ALLOWED: [replication] allowUnauthenticatedSwitchover=true and neither secretFile nor mutual TLS: "+
		"anyone who reaches the replication port can make this master hand mastership to another site", "addr", s.Addr())
}

// controlReplyTimeout bounds writing an answer: a switchover waits for it
// before the new master is told to take over.
const controlReplyTimeout = 5 * time.Second

// writeWithin is write bounded by d; a write that times out may have sent
// part of the frame, so the connection is closed (the slave reconnects).
func (ss *session) writeWithin(h header, p []byte, d time.Duration) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.conn.SetWriteDeadline(time.Now().Add(d)) // socket deadlines are the kernel's: real time
	_, err := writeFrameMAC(ss.conn, ss.macs.send, h, p, nil)
	ss.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		ss.conn.Close()
	}
	return err
}

// write sends one frame on the session's connection; the stream and
// control answers share it.
func (ss *session) write(h header, p []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	_, err := writeFrameMAC(ss.conn, ss.macs.send, h, p, nil)
	return err
}

// link is the receiver's side of one established connection, shared by
// the session (acks, rewinds) and Control.
type link struct {
	conn     net.Conn
	addr     string
	features uint32 // what the master's welcome offered
	done     chan struct{}

	wmu  sync.Mutex // one frame at a time on conn
	macs linkMACs   // send is used under wmu; recv by the session's reader

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan controlReply
}

func newLink(conn net.Conn, addr string, features uint32, macs linkMACs) *link {
	return &link{conn: conn, addr: addr, features: features, macs: macs, done: make(chan struct{}), pending: map[uint64]chan controlReply{}}
}

// write writes one frame; scratch is reused as writeFrame does.
func (l *link) write(h header, p, scratch []byte) ([]byte, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return writeFrameMAC(l.conn, l.macs.send, h, p, scratch)
}

func (l *link) deliver(id uint64, r controlReply) {
	l.mu.Lock()
	ch := l.pending[id]
	delete(l.pending, id)
	l.mu.Unlock()
	if ch != nil {
		ch <- r // buffered
	}
}

// Control asks the master this receiver is connected to to carry out op
// with args over the (authenticated) replication link, and returns the
// master's answer. It fails when no link is up, when the master does not
// take requests (ErrControlUnsupported), with the master's refusal, or
// when the link ends or ctx is done first.
func (r *Receiver) Control(ctx context.Context, op string, args map[string]string) ([]byte, error) {
	r.mu.Lock()
	l := r.link
	r.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("georeplicator: not connected to the master (last tried %q)", r.lastAddr())
	}
	if l.features&featureControl == 0 {
		return nil, fmt.Errorf("%w: master %s (an older version, or it does not offer them)", ErrControlUnsupported, l.addr)
	}
	ch := make(chan controlReply, 1)
	l.mu.Lock()
	l.next++
	id := l.next
	l.pending[id] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.pending, id)
		l.mu.Unlock()
	}()
	if _, err := l.write(header{typ: typeControl}, encodeControl(id, op, args), nil); err != nil {
		return nil, fmt.Errorf("georeplicator: send %s request to %s: %w", op, l.addr, err)
	}
	select {
	case rep := <-ch:
		if rep.err != nil {
			return nil, fmt.Errorf("georeplicator: master %s: %w", l.addr, rep.err)
		}
		return rep.body, nil
	case <-l.done:
		// The answer may have come with the frame that ended the link.
		select {
		case rep := <-ch:
			if rep.err != nil {
				return nil, fmt.Errorf("georeplicator: master %s: %w", l.addr, rep.err)
			}
			return rep.body, nil
		default:
		}
		return nil, fmt.Errorf("georeplicator: the link to master %s ended before it answered the %s request", l.addr, op)
	case <-ctx.Done():
		return nil, fmt.Errorf("georeplicator: %s request to master %s: %w", op, l.addr, ctx.Err())
	}
}

// LagReport is the master's last report of this slave's lag, per
// partition (Receiver.LastLagReport).
type LagReport struct {
	// At is the master's clock when it built the report; Received this
	// slave's clock when it arrived.
	At       time.Time `json:"at"`
	Received time.Time `json:"received"`
	// Bytes and Messages are the totals over every partition; Behind the
	// largest partition's.
	Bytes    int64         `json:"bytes"`
	Messages int64         `json:"messages"`
	Behind   time.Duration `json:"behindNs"`
	// Lagging is the number of partitions behind; Partitions lists them,
	// most bytes behind first, at most maxLagReportParts of them.
	Lagging    int            `json:"lagging"`
	Partitions []PartitionLag `json:"partitions"`
}

// maxLagReportParts bounds a lag report's partition list (and so its
// frame); the totals always cover every partition.
const maxLagReportParts = 256

// lagReportOf builds the report for g.
func lagReportOf(g GroupLag, at time.Time) LagReport {
	rep := LagReport{At: at, Bytes: g.Bytes, Messages: g.Messages, Behind: g.Behind}
	for _, p := range g.Partitions {
		if p.Bytes > 0 || p.Messages > 0 {
			rep.Partitions = append(rep.Partitions, p)
		}
	}
	rep.Lagging = len(rep.Partitions)
	slices.SortStableFunc(rep.Partitions, func(a, b PartitionLag) int {
		switch {
		case a.Bytes != b.Bytes:
			return compareInt64(b.Bytes, a.Bytes)
		case a.Topic != b.Topic:
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		default:
			return a.Partition - b.Partition
		}
	})
	if len(rep.Partitions) > maxLagReportParts {
		rep.Partitions = rep.Partitions[:maxLagReportParts]
	}
	return rep
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (l LagReport) encode() []byte {
	var e enc
	e.i64(l.At.UnixNano())
	e.i64(l.Bytes)
	e.i64(l.Messages)
	e.i64(int64(l.Behind))
	e.u32(uint32(l.Lagging))
	e.u32(uint32(len(l.Partitions)))
	for _, p := range l.Partitions {
		e.str(p.Topic)
		e.u32(uint32(p.Partition))
		e.i64(p.MasterEnd)
		e.i64(p.SlaveEnd)
		e.i64(p.Bytes)
		e.i64(p.Messages)
		e.i64(int64(p.Behind))
	}
	return e.b
}

func decodeLagReport(p []byte) (LagReport, error) {
	d := dec{b: p}
	l := LagReport{At: time.Unix(0, d.i64()), Bytes: d.i64(), Messages: d.i64(), Behind: time.Duration(d.i64()), Lagging: int(d.u32())}
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/46 {
		return l, fmt.Errorf("%w: lag report claims %d partitions", ErrProtocol, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		l.Partitions = append(l.Partitions, PartitionLag{Topic: d.str(), Partition: int(int32(d.u32())),
			MasterEnd: d.i64(), SlaveEnd: d.i64(), Bytes: d.i64(), Messages: d.i64(), Behind: time.Duration(d.i64())})
	}
	return l, d.err
}

// sendLagReport sends this slave its lag as the master sees it now.
func (ss *session) sendLagReport() error {
	g, ok := ss.s.lagOf(ss.key)
	if !ok {
		return nil
	}
	return ss.write(header{typ: typeLagReport}, lagReportOf(g, ss.s.opts.Clock.Now()).encode())
}

// LastLagReport is the last lag report the master sent this slave (false
// before the first one, or from a master that sends none).
func (r *Receiver) LastLagReport() (LagReport, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastLag == nil {
		return LagReport{}, false
	}
	return *r.lastLag, true
}
