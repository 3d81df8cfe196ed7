package georeplicator

// Shared-secret authentication of the replication handshake.
//
// Right after hello, a master with a secret sends a challenge: 32 random
// bytes. The slave answers auth: 32 random bytes of its own followed by
// HMAC-SHA256(secret, slaveLabel | master nonce | slave nonce | hello). A
// slave without a secret answers with its nonce only, so the master can name
// the problem instead of timing out. The master checks the proof in constant
// time before anything else (brokerId check, welcome, server.ini, data), so
// a peer without the secret learns nothing and is never registered as a
// slave. The master then proves it holds the secret too, with the same MAC
// under masterLabel, and the slave refuses a master that cannot: a fake
// master must not feed a replica records or a server.ini.
//
// The secret never crosses the wire, and both nonces are fresh per
// connection, so a recorded handshake cannot be replayed. The secret
// authenticates the peers; it does not encrypt the stream (use TLS for that).

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// Message types of the auth step. Far from the stream's own types so that
// other additions to the handshake do not collide with them.
const (
	typeChallenge byte = 0x20 // master → slave: master nonce
	typeAuth      byte = 0x21 // slave → master: slave nonce + proof; master → slave: proof
)

const (
	nonceLen = 32
	proofLen = sha256.Size
	// MinSecretLen is the shortest shared secret accepted, in bytes.
	MinSecretLen = 16

	slaveLabel  = "metaq-replication slave v1"
	masterLabel = "metaq-replication master v1"
)

// ErrAuth marks a peer that failed (or did not attempt) authentication.
var ErrAuth = errors.New("georeplicator: authentication failed")

// LoadSecrets reads replication shared secrets from a key file
// ([replication] secretFile): one per line, surrounding whitespace removed,
// each at least MinSecretLen bytes. The first line is this host's secret;
// further lines are older secrets a master still accepts from slaves while a
// new one is rolled out (ShipperOptions.PreviousSecrets). The file must not
// be readable by group or others, as ssh requires of private keys.
func LoadSecrets(path string) ([][]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("georeplicator: replication secret file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("georeplicator: replication secret file %s is readable by group or others (mode %#o): chmod 600 it", path, perm)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("georeplicator: replication secret file: %w", err)
	}
	var secrets [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(line) < MinSecretLen {
			return nil, fmt.Errorf("georeplicator: replication secret file %s line %d holds %d bytes, want at least %d (for example: openssl rand -hex 32 > %s)",
				path, i+1, len(line), MinSecretLen, path)
		}
		secrets = append(secrets, []byte(line))
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("georeplicator: replication secret file %s is empty (for example: openssl rand -hex 32 > %s)", path, path)
	}
	return secrets, nil
}

func authMAC(secret []byte, label string, masterNonce, slaveNonce, helloBytes []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(masterNonce)
	m.Write(slaveNonce)
	m.Write(helloBytes)
	return m.Sum(nil)
}

func newNonce() ([]byte, error) {
	n := make([]byte, nonceLen)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("georeplicator: random nonce: %w", err)
	}
	return n, nil
}

// maxHandshakeBytes bounds a frame read before the peer has authenticated,
// so a stranger cannot make this side allocate a full-size frame buffer.
const maxHandshakeBytes = 64 << 10

// readHandshakeFrame is readFrame for hello, challenge, auth and welcome.
func readHandshakeFrame(r io.Reader) (frame, error) { return readHandshakeFrameMAC(r, nil) }

// readHandshakeFrameMAC is readHandshakeFrame for the first frame after the
// auth step, on a link whose frames carry a MAC (m not nil).
func readHandshakeFrameMAC(r io.Reader, m *frameMAC) (frame, error) {
	var hb [headerLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return frame{}, err
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return frame{}, err
	}
	if h.wireLen > maxHandshakeBytes {
		return frame{}, fmt.Errorf("%w: handshake message of %d bytes (type %d), at most %d", ErrProtocol, h.wireLen, h.typ, maxHandshakeBytes)
	}
	return readFrameMAC(io.MultiReader(bytes.NewReader(hb[:]), r), m, nil)
}

// authenticateSlave runs the master's side of the auth step after hello
// (features are the hello's). It returns the MACs of the link's frames
// that follow, none without a secret.
func (s *Shipper) authenticateSlave(c net.Conn, helloBytes []byte, features uint32) (linkMACs, error) {
	secret := s.opts.Secret
	if len(secret) == 0 {
		return linkMACs{}, nil
	}
	// refuse tells the slave why, then returns the error the master logs.
	refuse := func(msg string) error {
		writeFrame(c, header{typ: typeError}, []byte(msg), nil)
		return fmt.Errorf("%w: refused slave: %s", ErrAuth, msg)
	}
	mn, err := newNonce()
	if err != nil {
		return linkMACs{}, err
	}
	if _, err := writeFrame(c, header{typ: typeChallenge}, mn, nil); err != nil {
		return linkMACs{}, fmt.Errorf("write challenge: %w", err)
	}
	f, err := readHandshakeFrame(c)
	if err != nil {
		return linkMACs{}, fmt.Errorf("%w: slave sent no answer to the challenge (a slave without authentication support?): %v", ErrAuth, err)
	}
	switch {
	case f.typ != typeAuth:
		return linkMACs{}, refuse(fmt.Sprintf("authentication required: expected an auth answer, got message type %d", f.typ))
	case len(f.wire) == nonceLen:
		return linkMACs{}, refuse("authentication required: this master needs the replication shared secret ([replication] secretFile) and the slave has none configured")
	case len(f.wire) != nonceLen+proofLen:
		return linkMACs{}, refuse(fmt.Sprintf("authentication failed: malformed auth answer (%d bytes)", len(f.wire)))
	}
	sn, proof := f.wire[:nonceLen], f.wire[nonceLen:]
	var matched []byte
	for _, k := range append([][]byte{secret}, s.opts.PreviousSecrets...) {
		if hmac.Equal(proof, authMAC(k, slaveLabel, mn, sn, helloBytes)) {
			matched = k
			break
		}
	}
	if matched == nil {
		return linkMACs{}, refuse("authentication failed: the slave's replication shared secret differs from the master's")
	}
	if features&featureFrameMAC == 0 {
		return linkMACs{}, refuse("authentication failed: the slave is an older version that authenticates the handshake only, " +
			"not every frame after it (frames could be inserted on the path); upgrade the slave")
	}
	// Answer with the secret the slave used, which during a rotation may be
	// an older one, under the label that says every frame from here on
	// carries a MAC.
	if _, err := writeFrame(c, header{typ: typeAuth}, authMAC(matched, masterLabelFrames, mn, sn, helloBytes), nil); err != nil {
		return linkMACs{}, fmt.Errorf("write auth: %w", err)
	}
	return masterLinkMACs(matched, mn, sn, helloBytes), nil
}

// authenticateMaster runs the slave's side of the auth step: f is the first
// frame the master sent after hello. It returns the frame that follows the
// auth step (welcome or error) and the MACs of the link's frames, none
// without a secret.
func (r *Receiver) authenticateMaster(c net.Conn, addr string, f frame, helloBytes []byte) (frame, linkMACs, error) {
	secret := r.opts.Secret
	if f.typ != typeChallenge {
		if len(secret) > 0 && f.typ != typeError {
			msg := "slave requires authentication: the master has no replication shared secret ([replication] secretFile) configured"
			writeFrame(c, header{typ: typeError}, []byte(msg), nil)
			return frame{}, linkMACs{}, fmt.Errorf("%w: master %s did not authenticate (it has no replication shared secret configured); refusing to replicate from it", ErrAuth, addr)
		}
		return f, linkMACs{}, nil
	}
	if len(f.wire) != nonceLen {
		return frame{}, linkMACs{}, fmt.Errorf("%w: malformed challenge from master %s", ErrProtocol, addr)
	}
	mn := append([]byte(nil), f.wire...)
	sn, err := newNonce()
	if err != nil {
		return frame{}, linkMACs{}, err
	}
	answer := sn
	if len(secret) > 0 {
		answer = append(answer, authMAC(secret, slaveLabel, mn, sn, helloBytes)...)
	}
	if _, err := writeFrame(c, header{typ: typeAuth}, answer, nil); err != nil {
		return frame{}, linkMACs{}, fmt.Errorf("georeplicator: send auth: %w", err)
	}
	g, err := readHandshakeFrame(c)
	if err != nil {
		return frame{}, linkMACs{}, fmt.Errorf("georeplicator: read auth answer from %s: %w", addr, err)
	}
	if g.typ == typeError {
		if len(secret) == 0 {
			return frame{}, linkMACs{}, fmt.Errorf("%w: master %s requires the replication shared secret and this slave has none ([replication] secretFile): %s", ErrAuth, addr, g.wire)
		}
		return frame{}, linkMACs{}, fmt.Errorf("%w: master %s refused: %s", ErrAuth, addr, g.wire)
	}
	if g.typ == typeAuth && hmac.Equal(g.wire, authMAC(secret, masterLabel, mn, sn, helloBytes)) {
		return frame{}, linkMACs{}, fmt.Errorf("%w: master %s is an older version that authenticates the handshake only, not every frame after it "+
			"(frames could be inserted on the path); upgrade the master: refusing to replicate from it", ErrAuth, addr)
	}
	if g.typ != typeAuth || !hmac.Equal(g.wire, authMAC(secret, masterLabelFrames, mn, sn, helloBytes)) {
		return frame{}, linkMACs{}, fmt.Errorf("%w: master %s failed to prove the replication shared secret (a different secret, or not our master)", ErrAuth, addr)
	}
	macs := slaveLinkMACs(secret, mn, sn, helloBytes)
	g, err = readHandshakeFrameMAC(c, macs.recv)
	return g, macs, err
}

// isLoopback reports whether host (an IP or "localhost") stays on this machine.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authMethod names how the slave on c proved itself (it got this far, so
// every check configured passed).
func (s *Shipper) authMethod(c net.Conn) string {
	var m []string
	if len(s.opts.Secret) > 0 {
		m = append(m, "secret")
	}
	if tc, ok := c.(*tls.Conn); ok && len(tc.ConnectionState().VerifiedChains) > 0 {
		m = append(m, "tls-client-cert")
	}
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(m, "+")
}

func (p *progress) setAuth(k slaveKey, method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.getLocked(k); sp.Auth != method {
		sp.Auth = method
		p.dirty = true
	}
}

// forgetUnauthenticated drops the slaves whose last connection was not
// authenticated (state kept from a run without authentication): once the
// master requires it, they are strangers, and stay out of the lag report.
func (p *progress) forgetUnauthenticated() []slaveKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []slaveKey
	for k, sp := range p.m {
		if sp.Auth == "none" {
			delete(p.m, k)
			gone = append(gone, k)
			p.dirty = true
		}
	}
	return gone
}

// security reports how the master's listener protects its links.
func (o *ShipperOptions) security() (encrypted, authenticated bool) {
	encrypted = o.TLS != nil
	authenticated = len(o.Secret) > 0 || (o.TLS != nil && o.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	return
}

// warnInsecure logs, loudly, a listener reachable from other hosts that lets
// anyone in.
func (s *Shipper) warnInsecure(addr string) {
	if isLoopback(addr) {
		return
	}
	switch encrypted, authenticated := s.opts.security(); {
	case !encrypted && !authenticated:
		s.log.Warn("INSECURE REPLICATION LISTENER: reachable from other hosts, neither encrypted nor authenticated; "+
			"anyone who connects and names the brokerId receives the whole log and server.ini. "+
			"Set [replication] secretFile (the same key file on every site) and/or tlsCert, tlsKey, tlsCA",
			"addr", addr)
	case !authenticated:
		s.log.Warn("UNAUTHENTICATED REPLICATION LISTENER: TLS encrypts the link but any client may replicate; "+
			"set [replication] secretFile or tlsCA (client certificates)", "addr", addr)
	}
}

// warnInsecureLink logs, once per master address, a link leaving this host
// in plain text without authentication.
func (r *Receiver) warnInsecureLink(addr string) {
	if isLoopback(addr) || r.opts.TLS != nil || len(r.opts.Secret) > 0 {
		return
	}
	if _, dup := r.warned.LoadOrStore(addr, true); dup {
		return
	}
	r.log.Warn("INSECURE REPLICATION LINK: the link to the master leaves this host neither encrypted nor authenticated; "+
		"anyone on the path can read the log or pose as the master. Set [replication] secretFile and/or tlsCA",
		"master", addr)
}
