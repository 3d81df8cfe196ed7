package georeplicator

// The gateway link: the one connection a slave site's broker keeps to the
// master's MetaQ port to carry the puts it forwards (broker/gateway.go).
// It shares the port with MetaQ clients and the replication stream: its
// first byte, GatewayFirstByte, is one no MetaQ request starts with. After
// a short handshake the connection carries the MetaQ protocol itself
// (puts, answers), framed, compressed and authenticated:
//
//	slave  → master  GatewayFirstByte, 'T' (TLS follows) or 'P' (plain)
//	                 [a TLS handshake, mutual when the master has a CA; what
//	                 follows then runs inside TLS]
//	slave  → master  version, codec, slave nonce (32 bytes)
//	                 [version 2: name length (1 byte), name, epoch (uint64)]
//	master → slave   status (0: go on, else refused, then a reason), master nonce (32 bytes)
//	slave  → master  HMAC-SHA256(secret, gatewaySlaveLabel | slave nonce | master nonce | codec [| name length | name | epoch])
//	master → slave   status (0: accepted, else refused, then a reason),
//	                 HMAC-SHA256(secret, gatewayMasterLabel | slave nonce | master nonce | codec [| name length | name | epoch])
//
// then, in each direction, frames:
//
//	+----------------+------------------------+--------------------+
//	| length, uint32 | payload (length bytes) | MAC (16 bytes)     |
//	+----------------+------------------------+--------------------+
//
// where the payload is what the sender wrote, compressed (one zstd stream
// per direction, flushed at every write, so later frames use the earlier
// ones' context: small puts of similar text compress well) and the MAC,
// on a link with a secret and without TLS, is HMAC-SHA256 truncated to 16
// bytes, keyed per direction and connection (from the secret and both
// nonces), over the frame's sequence number, its length and its payload: a
// frame inserted, dropped, reordered or replayed fails. Inside TLS, whose
// records are authenticated and ordered, and where the secret was proven
// in the same session, frames carry no MAC. The master accepts the secret of [replication] secretFile and the
// older ones it still accepts; a side with a secret refuses a peer without
// one. With TLS (the replication's certificates) the link is encrypted too;
// a master whose TLS config requires client certificates refuses a plain
// link.
//
// A version 1 hello is anonymous: the transaction links of client
// connections and a handing-over master's links use it, and so did every
// slave before version 2. A version 2 hello names the gateway the link
// belongs to (GatewayDialAs: the slave site's write gateway, its puts and
// its outbox's drain) and the link's epoch, higher for every link the
// slave's process opens later (its wall clock in nanoseconds, raised past
// the last one used). A master serving links through GatewayLinks keeps
// the highest epoch of each name: a link with a higher one supersedes the
// name's older link, which is then read no further (its reads end as at
// EOF: requests read before are served and answered, bytes that arrive on
// it later are never applied), and the newer link is served only once the
// older one's requests are all done; a link whose epoch is not higher is
// refused. So bytes of a link the slave gave up on (no answer in time) that
// the network still delivers after the slave opened another link and
// read the master's partitions there (the outbox's reconciliation) are
// never stored: without it they would be stored a second time. A refusal
// for a stale epoch names the master's highest; the slave's next link
// takes an epoch above it (its clock went back, or a previous process
// ran with a clock ahead). A master that predates version 2 refuses such a
// hello as an unknown version (ErrGatewayVersion): the slave then dials
// version 1, without superseding.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
)

// GatewayFirstByte is the first byte of a gateway link on the MetaQ port.
const GatewayFirstByte byte = 0xA8

const (
	gatewayVersion     = 1 // anonymous links
	gatewayVersionName = 2 // links naming their gateway and epoch
	gatewaySlaveLabel  = "metaq-gateway slave v1"
	gatewayMasterLabel = "metaq-gateway master v1"
	gatewayMACLen      = 16
	// gatewayMaxFrame bounds a frame's payload (compressed bytes).
	gatewayMaxFrame = 16 << 20
	// gatewayHandshakeTimeout bounds the handshake.
	gatewayHandshakeTimeout = 10 * time.Second
)

// Gateway link codecs.
const (
	gatewayRaw  byte = 0
	gatewayZstd byte = 1
)

// Gateway link modes, the byte after GatewayFirstByte.
const (
	gatewayPlain byte = 'P'
	gatewayTLS   byte = 'T'
)

// GatewayDial opens a gateway link over nc, a connection to the master's
// MetaQ port, authenticating with secret (nil: none; the master must have
// none either), compressing with zstd when compress, and inside TLS with
// tc when not nil (its ServerName, when empty, is the host nc reaches).
// It closes nc when it fails.
func GatewayDial(nc net.Conn, secret []byte, compress bool, tc *tls.Config) (net.Conn, error) {
	return gatewayDial(context.Background(), nc, secret, compress, tc, GatewayIdentity{})
}

// GatewayDialContext is GatewayDial whose handshake also ends when ctx
// does (its deadline, if sooner than the handshake's own bound, or its
// cancellation): a master that accepts TCP and never answers (a paused
// process) holds the dial only as long as its caller waits.
func GatewayDialContext(ctx context.Context, nc net.Conn, secret []byte, compress bool, tc *tls.Config) (net.Conn, error) {
	return gatewayDial(ctx, nc, secret, compress, tc, GatewayIdentity{})
}

// GatewayIdentity is what a version 2 hello names: the gateway a link
// belongs to and the link's epoch (see the top of this file).
type GatewayIdentity struct {
	Name  string // the slave's gateway, the same for all its links: its site and brokerId; at most 255 bytes
	Epoch uint64 // higher for every link opened later
}

// ErrGatewayVersion is returned by GatewayDialAs when the master refuses
// the version 2 hello as unknown (it predates it): dial version 1
// (GatewayDial) instead.
var ErrGatewayVersion = errors.New("georeplicator: gateway: the master does not know gateway links that name their gateway (version 2)")

// GatewayDialAs is GatewayDial for the links of the gateway name (a slave
// site's write gateway): the hello names it and an epoch higher than any
// this process gave before, so the master supersedes the gateway's older
// links (see the top of this file).
func GatewayDialAs(nc net.Conn, secret []byte, compress bool, tc *tls.Config, name string) (net.Conn, error) {
	return GatewayDialAsContext(context.Background(), nc, secret, compress, tc, name)
}

// GatewayDialAsContext is GatewayDialAs whose handshake also ends when ctx
// does (GatewayDialContext).
func GatewayDialAsContext(ctx context.Context, nc net.Conn, secret []byte, compress bool, tc *tls.Config, name string) (net.Conn, error) {
	if name == "" || len(name) > 255 {
		nc.Close()
		return nil, fmt.Errorf("georeplicator: gateway name %q: 1 to 255 bytes", name)
	}
	return gatewayDial(ctx, nc, secret, compress, tc, GatewayIdentity{Name: name, Epoch: gatewayEpochs.next()})
}

// gatewayEpochs gives the epochs of this process's named gateway links.
var gatewayEpochs epochSource

// epochSource gives increasing epochs: the wall clock in nanoseconds,
// raised past the last given and past the highest a master reported.
type epochSource struct{ last atomic.Uint64 }

func (e *epochSource) next() uint64 {
	for {
		last := e.last.Load()
		n := max(uint64(time.Now().UnixNano()), last+1)
		if e.last.CompareAndSwap(last, n) {
			return n
		}
	}
}

// observe makes later epochs exceed seen (a master's highest).
func (e *epochSource) observe(seen uint64) {
	for {
		last := e.last.Load()
		if last >= seen || e.last.CompareAndSwap(last, seen) {
			return
		}
	}
}

// gatewayStaleMark starts a master's refusal of a stale epoch, followed
// by the master's highest epoch for the name.
const gatewayStaleMark = "stale gateway link epoch; newest "

// helloExtra is what a hello adds to the codec in the handshake's MACs:
// nothing for version 1, the name and epoch for version 2.
func (id GatewayIdentity) helloExtra() []byte {
	if id.Name == "" {
		return nil
	}
	b := append([]byte{byte(len(id.Name))}, id.Name...)
	return binary.BigEndian.AppendUint64(b, id.Epoch)
}

func gatewayDial(ctx context.Context, nc net.Conn, secret []byte, compress bool, tc *tls.Config, id GatewayIdentity) (c net.Conn, err error) {
	raw := nc
	deadline := time.Now().Add(gatewayHandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	raw.SetDeadline(deadline)
	// Canceled (the caller stopped waiting: the master moved): the
	// handshake's reads and writes end at once.
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		stop()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
			}
			raw.Close()
		}
	}()
	mode := gatewayPlain
	if tc != nil {
		mode = gatewayTLS
	}
	if _, err := nc.Write([]byte{GatewayFirstByte, mode}); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway hello to %s: %w", nc.RemoteAddr(), err)
	}
	if tc != nil {
		if tc.ServerName == "" {
			tc = tc.Clone()
			tc.ServerName, _, _ = net.SplitHostPort(nc.RemoteAddr().String())
		}
		t := tls.Client(nc, tc)
		if err := t.Handshake(); err != nil {
			return nil, fmt.Errorf("%w: gateway: TLS with %s: %v", ErrAuth, nc.RemoteAddr(), err)
		}
		nc = t
	}
	codec := gatewayRaw
	if compress {
		codec = gatewayZstd
	}
	sn, err := newNonce()
	if err != nil {
		return nil, err
	}
	version := byte(gatewayVersion)
	extra := id.helloExtra()
	if extra != nil {
		version = gatewayVersionName
	}
	hello := append([]byte{version, codec}, sn...)
	hello = append(hello, extra...)
	if _, err := nc.Write(hello); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway hello to %s: %w", nc.RemoteAddr(), err)
	}
	br := bufio.NewReader(nc)
	if err := readStatus(br, "master "+nc.RemoteAddr().String()); err != nil {
		if extra != nil && strings.Contains(err.Error(), unknownVersion) {
			return nil, fmt.Errorf("%w (%v)", ErrGatewayVersion, err)
		}
		return nil, err
	}
	mn := make([]byte, nonceLen)
	if _, err := io.ReadFull(br, mn); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: %w", nc.RemoteAddr(), err)
	}
	proof := make([]byte, proofLen)
	if len(secret) > 0 {
		proof = authMAC(secret, gatewaySlaveLabel, sn, mn, append([]byte{codec}, extra...))
	}
	if _, err := nc.Write(proof); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway proof to %s: %w", nc.RemoteAddr(), err)
	}
	if err := readStatus(br, "master "+nc.RemoteAddr().String()); err != nil {
		msg := err.Error()
		if i := strings.Index(msg, gatewayStaleMark); i >= 0 {
			digits := msg[i+len(gatewayStaleMark):]
			if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
				digits = digits[:j]
			}
			if seen, perr := strconv.ParseUint(digits, 10, 64); perr == nil {
				gatewayEpochs.observe(seen) // the next link goes above it
			}
		}
		return nil, err
	}
	mp := make([]byte, proofLen)
	if _, err := io.ReadFull(br, mp); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: %w", nc.RemoteAddr(), err)
	}
	if len(secret) > 0 && !hmac.Equal(mp, authMAC(secret, gatewayMasterLabel, sn, mn, append([]byte{codec}, extra...))) {
		return nil, fmt.Errorf("%w: gateway: master %s failed to prove the replication shared secret", ErrAuth, nc.RemoteAddr())
	}
	if len(secret) == 0 && !bytes.Equal(mp, make([]byte, proofLen)) {
		return nil, fmt.Errorf("%w: gateway: master %s has a replication shared secret and this broker none ([replication] secretFile)", ErrAuth, nc.RemoteAddr())
	}
	if !stop() && ctx.Err() != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: given up", nc.RemoteAddr())
	}
	raw.SetDeadline(time.Time{})
	gc, err := newGatewayConn(nc, br, secret, sn, mn, codec, true, tc != nil)
	if err != nil {
		return nil, err
	}
	gc.id = id
	return gc, nil
}

// unknownVersion starts the master's refusal of a hello's version.
const unknownVersion = "unknown gateway version"

// GatewayAccept runs the master's side of the handshake on a connection
// whose first byte is GatewayFirstByte, accepting any of secrets (none:
// only a slave without a secret) and TLS with tc (nil: none; one that
// requires client certificates refuses a plain link), and returns the
// link, which carries the MetaQ protocol.
func GatewayAccept(nc net.Conn, secrets [][]byte, tc *tls.Config) (net.Conn, error) {
	c, err := gatewayAccept(nc, secrets, tc, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// gatewayAccept is GatewayAccept; admit, when not nil, is asked about a
// named link before the handshake's last answer, and refuses it with an
// error.
func gatewayAccept(nc net.Conn, secrets [][]byte, tc *tls.Config, admit func(GatewayIdentity) error) (*gatewayConn, error) {
	nc.SetDeadline(time.Now().Add(gatewayHandshakeTimeout))
	var head [2]byte
	if _, err := io.ReadFull(nc, head[:]); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway hello from %s: %w", nc.RemoteAddr(), err)
	}
	refuse := func(w io.Writer, msg string) error {
		w.Write(append([]byte{1, byte(min(len(msg), 255))}, msg[:min(len(msg), 255)]...))
		return fmt.Errorf("%w: gateway from %s: %s", ErrAuth, nc.RemoteAddr(), msg)
	}
	switch {
	case head[0] != GatewayFirstByte || (head[1] != gatewayPlain && head[1] != gatewayTLS):
		return nil, fmt.Errorf("%w: gateway from %s: not a gateway hello (%#x %#x)", ErrProtocol, nc.RemoteAddr(), head[0], head[1])
	case head[1] == gatewayTLS && tc == nil:
		return nil, fmt.Errorf("%w: gateway from %s: TLS asked and this broker has no TLS certificate ([replication] tlsCert)", ErrAuth, nc.RemoteAddr())
	case head[1] == gatewayTLS:
		t := tls.Server(nc, tc)
		if err := t.Handshake(); err != nil {
			return nil, fmt.Errorf("%w: gateway: TLS with %s: %v", ErrAuth, nc.RemoteAddr(), err)
		}
		nc = t
	case tc != nil && tc.ClientAuth == tls.RequireAndVerifyClientCert:
		// Read the hello first, so the refusal reaches the slave.
		io.ReadFull(nc, make([]byte, 2+nonceLen))
		return nil, refuse(nc, "this master requires TLS with a client certificate ([replication] tlsCert, tlsKey, tlsCA)")
	}
	br := bufio.NewReader(nc)
	hello := make([]byte, 2+nonceLen)
	if _, err := io.ReadFull(br, hello); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway hello from %s: %w", nc.RemoteAddr(), err)
	}
	codec := hello[1]
	switch {
	case hello[0] != gatewayVersion && hello[0] != gatewayVersionName:
		return nil, refuse(nc, fmt.Sprintf("%s %d", unknownVersion, hello[0]))
	case codec != gatewayRaw && codec != gatewayZstd:
		return nil, refuse(nc, fmt.Sprintf("unknown gateway codec %d", codec))
	}
	var id GatewayIdentity
	if hello[0] == gatewayVersionName {
		n, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("georeplicator: gateway hello from %s: %w", nc.RemoteAddr(), err)
		}
		rest := make([]byte, int(n)+8)
		if _, err := io.ReadFull(br, rest); err != nil {
			return nil, fmt.Errorf("georeplicator: gateway hello from %s: %w", nc.RemoteAddr(), err)
		}
		id = GatewayIdentity{Name: string(rest[:n]), Epoch: binary.BigEndian.Uint64(rest[n:])}
		if id.Name == "" {
			return nil, refuse(nc, "a gateway link named with an empty name")
		}
	}
	extra := append([]byte{codec}, id.helloExtra()...)
	sn := hello[2:]
	mn, err := newNonce()
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(append([]byte{0}, mn...)); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: %w", nc.RemoteAddr(), err)
	}
	proof := make([]byte, proofLen)
	if _, err := io.ReadFull(br, proof); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: %w", nc.RemoteAddr(), err)
	}
	var matched []byte
	for _, k := range secrets {
		if hmac.Equal(proof, authMAC(k, gatewaySlaveLabel, sn, mn, extra)) {
			matched = k
			break
		}
	}
	switch {
	case len(secrets) > 0 && matched == nil:
		return nil, refuse(nc, "the slave's replication shared secret differs from the master's, or it has none")
	case len(secrets) == 0 && !bytes.Equal(proof, make([]byte, proofLen)):
		return nil, refuse(nc, "this master has no replication shared secret ([replication] secretFile) and the slave has one")
	}
	if admit != nil && id.Name != "" {
		if err := admit(id); err != nil {
			return nil, refuse(nc, err.Error())
		}
	}
	mp := make([]byte, proofLen)
	if matched != nil {
		mp = authMAC(matched, gatewayMasterLabel, sn, mn, extra)
	}
	if _, err := nc.Write(append([]byte{0}, mp...)); err != nil {
		return nil, fmt.Errorf("georeplicator: gateway handshake with %s: %w", nc.RemoteAddr(), err)
	}
	nc.SetDeadline(time.Time{})
	c, err := newGatewayConn(nc, br, matched, sn, mn, codec, false, head[1] == gatewayTLS)
	if err != nil {
		return nil, err
	}
	c.id = id
	return c, nil
}

// readStatus reads a handshake status byte and, when it refuses, the
// reason.
func readStatus(br *bufio.Reader, peer string) error {
	st, err := br.ReadByte()
	if err != nil {
		return fmt.Errorf("georeplicator: gateway handshake with %s: %w", peer, err)
	}
	if st == 0 {
		return nil
	}
	n, err := br.ReadByte()
	msg := make([]byte, n)
	if err == nil {
		io.ReadFull(br, msg)
	}
	return fmt.Errorf("%w: gateway: %s refused: %s", ErrAuth, peer, msg)
}

// gatewayConn is an established gateway link (see the top of this file).
// Read and Write may be called concurrently with each other; Writes are
// serialised.
type gatewayConn struct {
	net.Conn
	id         GatewayIdentity // the hello's; zero for version 1
	superseded atomic.Bool     // reads end as at EOF (GatewayLinks)

	wmu    sync.Mutex
	wmac   hash.Hash // nil without a secret
	wseq   uint64
	enc    *zstd.Encoder // nil for gatewayRaw
	encBuf bytes.Buffer
	frame  []byte

	rmu    sync.Mutex // held by Read; Close takes it to release the decoder
	closed bool       // under rmu
	in     *frameReader
	dec    *zstd.Decoder // nil for gatewayRaw
}

func newGatewayConn(nc net.Conn, br *bufio.Reader, secret, sn, mn []byte, codec byte, slave, inTLS bool) (*gatewayConn, error) {
	c := &gatewayConn{Conn: nc, in: &frameReader{r: br}}
	// Inside TLS every record is authenticated and ordered already, and
	// the secret was proven inside the same session: frames carry no MAC.
	if len(secret) > 0 && !inTLS {
		s2m := authMAC(secret, "metaq-gateway slave to master", sn, mn, []byte{codec})
		m2s := authMAC(secret, "metaq-gateway master to slave", sn, mn, []byte{codec})
		w, r := s2m, m2s
		if !slave {
			w, r = m2s, s2m
		}
		c.wmac, c.in.mac = hmac.New(sha256.New, w), hmac.New(sha256.New, r)
	}
	if codec == gatewayZstd {
		enc, err := zstd.NewWriter(&c.encBuf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20))
		if err != nil {
			return nil, fmt.Errorf("georeplicator: gateway encoder: %w", err)
		}
		dec, err := zstd.NewReader(c.in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20),
			zstd.WithDecoderMaxMemory(64<<20))
		if err != nil {
			return nil, fmt.Errorf("georeplicator: gateway decoder: %w", err)
		}
		c.enc, c.dec = enc, dec
	}
	return c, nil
}

// Write sends p as one frame.
func (c *gatewayConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	payload := p
	if c.enc != nil {
		c.encBuf.Reset()
		if _, err := c.enc.Write(p); err != nil {
			return 0, err
		}
		if err := c.enc.Flush(); err != nil {
			return 0, err
		}
		payload = c.encBuf.Bytes()
	}
	if len(payload) > gatewayMaxFrame {
		return 0, fmt.Errorf("georeplicator: gateway frame of %d bytes, at most %d", len(payload), gatewayMaxFrame)
	}
	c.frame = binary.BigEndian.AppendUint32(c.frame[:0], uint32(len(payload)))
	c.frame = append(c.frame, payload...)
	if c.wmac != nil {
		c.frame = append(c.frame, frameMACOf(c.wmac, c.wseq, payload)...)
		c.wseq++
	}
	if _, err := c.Conn.Write(c.frame); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Read reads what the peer wrote; once the link is superseded, nothing
// more: io.EOF.
func (c *gatewayConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.superseded.Load() {
		return 0, io.EOF
	}
	var n int
	var err error
	if c.dec != nil {
		n, err = c.dec.Read(p)
	} else {
		n, err = c.in.Read(p)
	}
	if c.superseded.Load() {
		// Superseded while this read waited: what it got arrived after
		// the newer link, and is not handed on.
		return 0, io.EOF
	}
	return n, err
}

// supersede ends the link's reads: the current one at once, later ones
// before they start.
func (c *gatewayConn) supersede() {
	c.superseded.Store(true)
	c.Conn.SetReadDeadline(time.Unix(1, 0))
}

// SetReadDeadline sets the read deadline, except on a superseded link,
// whose reads stay ended.
func (c *gatewayConn) SetReadDeadline(t time.Time) error {
	err := c.Conn.SetReadDeadline(t)
	if c.superseded.Load() {
		return c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
	return err
}

// SetDeadline is SetReadDeadline and the write deadline.
func (c *gatewayConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// Close closes the connection, which ends a Read in progress, then
// releases the decoder once no Read uses it.
func (c *gatewayConn) Close() error {
	err := c.Conn.Close()
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if !c.closed {
		c.closed = true
		if c.dec != nil {
			c.dec.Close()
		}
	}
	return err
}

// frameReader yields the payloads of verified frames.
type frameReader struct {
	r   *bufio.Reader
	mac hash.Hash // nil without a secret
	seq uint64
	buf []byte // payload not read yet
	err error
}

func (f *frameReader) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.err = f.next()
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

func (f *frameReader) next() error {
	var hb [4]byte
	if _, err := io.ReadFull(f.r, hb[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hb[:])
	if n > gatewayMaxFrame {
		return fmt.Errorf("%w: gateway frame of %d bytes, at most %d", ErrProtocol, n, gatewayMaxFrame)
	}
	size := int(n)
	if f.mac != nil {
		size += gatewayMACLen
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f.r, data); err != nil {
		return err
	}
	payload := data[:n]
	if f.mac != nil {
		if !hmac.Equal(data[n:], frameMACOf(f.mac, f.seq, payload)) {
			return fmt.Errorf("%w: gateway frame %d fails its MAC", ErrAuth, f.seq)
		}
		f.seq++
	}
	f.buf = payload
	return nil
}

// frameMACOf is a frame's MAC: m (keyed) over seq, the length and payload.
func frameMACOf(m hash.Hash, seq uint64, payload []byte) []byte {
	m.Reset()
	var h [12]byte
	binary.BigEndian.PutUint64(h[:8], seq)
	binary.BigEndian.PutUint32(h[8:], uint32(len(payload)))
	m.Write(h[:])
	m.Write(payload)
	return m.Sum(nil)[:gatewayMACLen]
}
