package configsync

// Signed pushes. Whoever can write to the NATS bucket could otherwise change
// every site's configuration. A pusher signs each version with an ed25519
// private key (`configsync keygen` makes one); an agent applies a version
// only when it carries a valid signature by one of the public keys listed
// in its own configuration ([nats] trustedKeys, normally in the site
// overlay), unless that configuration says allowUnsigned=true.
//
// The signature covers the version number, the SHA-256 of the bytes, the
// version a rollback restores, whether it may remove topics that hold
// messages and the Digest of the version it follows (Prev), so none of them
// can be changed, and an old signed version cannot be replayed as a newer
// one. The signed versions form a chain: an agent applies a version only
// when Prev links it, through signed versions in the bucket, to the one it
// applied last (the first one it ever applies excepted), so a bucket writer
// without a key can neither set a site back to an old genuine version nor
// make genuine pushes be numbered below what sites run; the pusher numbers
// a version from the signed versions, never from an unsigned entry, and
// fails (ErrBucketRewound) when the bucket is behind them.

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"metaq/broker/config"
)

// ErrUnsigned is returned (wrapped) for a version without a valid signature
// by a trusted key.
var ErrUnsigned = errors.New("configsync: not signed by a trusted key")

// signedMessage is what a signature covers.
func (v *Version) signedMessage() []byte {
	b := append(v.legacyMessage("metaq-configsync version v2\n"), '\n')
	return append(b, v.Prev...)
}

// legacyMessage is what a signature covered before versions were chained
// (with the header "metaq-configsync version v1\n"); the pusher still
// takes such a version as the one to build on.
func (v *Version) legacyMessage(head string) []byte {
	b := []byte(head)
	b = strconv.AppendUint(b, v.Version, 10)
	b = append(b, '\n')
	b = append(b, v.SHA256...)
	b = append(b, '\n')
	b = strconv.AppendUint(b, v.RollbackOf, 10)
	b = append(b, '\n')
	b = strconv.AppendBool(b, v.AllowTopicRemoval)
	return b
}

// Digest identifies v in the chain of versions: the hex SHA-256 of what
// its signature covers. The next version carries it as Prev.
func (v *Version) Digest() string {
	s := sha256.Sum256(v.signedMessage())
	return hex.EncodeToString(s[:])
}

// Sign sets v's signature and key.
func (v *Version) Sign(key ed25519.PrivateKey) {
	v.Signature = ed25519.Sign(key, v.signedMessage())
	v.SignedBy = config.FormatPublicKey(key.Public().(ed25519.PublicKey))
}

// Verify checks that v carries a valid signature by one of keys (and that
// its bytes match its hash).
func (v *Version) Verify(keys []ed25519.PublicKey) error {
	if err := v.Check(); err != nil {
		return err
	}
	if len(v.Signature) == 0 {
		return fmt.Errorf("%w: version %d is unsigned", ErrUnsigned, v.Version)
	}
	msg := v.signedMessage()
	for _, k := range keys {
		if ed25519.Verify(k, msg, v.Signature) {
			return nil
		}
	}
	if v.Prev == "" {
		// Signed before versions were chained.
		msg = v.legacyMessage("metaq-configsync version v1\n")
		for _, k := range keys {
			if ed25519.Verify(k, msg, v.Signature) {
				return nil
			}
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: version %d is signed by %s, but no key is trusted here ([nats] trustedKeys is empty)",
			ErrUnsigned, v.Version, v.SignedBy)
	}
	return fmt.Errorf("%w: version %d's signature (claiming key %s) does not verify with any of the %d trusted keys",
		ErrUnsigned, v.Version, v.SignedBy, len(keys))
}

// trust is what an agent accepts: versions signed by one of keys, or
// anything when allowUnsigned.
type trust struct {
	keys          []ed25519.PublicKey
	allowUnsigned bool
}

func trustOf(n config.NATS) (trust, error) {
	keys, err := config.ParseTrustedKeys(n.TrustedKeys)
	if err != nil {
		return trust{}, fmt.Errorf("configsync: [nats] trustedKeys: %w", err)
	}
	return trust{keys: keys, allowUnsigned: n.AllowUnsigned}, nil
}

func (t trust) check(v *Version) error {
	err := v.Verify(t.keys)
	if err != nil && t.allowUnsigned && errors.Is(err, ErrUnsigned) {
		return nil
	}
	if err != nil && errors.Is(err, ErrUnsigned) {
		return fmt.Errorf("%w; not applied (sign pushes with `configsync push -key`, list the public key in this site's [nats] trustedKeys)", err)
	}
	return err
}

// verified reports whether v carries a valid signature by a trusted key
// (check also lets unsigned versions through when allowUnsigned).
func (t trust) verified(v *Version) bool { return v.Verify(t.keys) == nil }

// GenerateKey makes a signing key pair: the private key as PKCS #8 PEM for
// a key file, and the public key in the form [nats] trustedKeys takes.
func GenerateKey() (privatePEM []byte, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("configsync: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, "", fmt.Errorf("configsync: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), config.FormatPublicKey(pub), nil
}

// LoadSigningKey reads a private key written by `configsync keygen`. The
// file must not be readable by group or others.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("configsync: signing key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("configsync: signing key %s is readable by group or others (mode %#o): chmod 600 it", path, perm)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configsync: signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("configsync: signing key %s: no PEM PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("configsync: signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("configsync: signing key %s is a %T, want ed25519", path, k)
	}
	return ek, nil
}

// insecureNATSLink reports whether a NATS URL list reaches another host with
// neither TLS nor credentials.
func insecureNATSLink(urls string, n config.NATS) bool {
	if n.TLSCA != "" || n.TLSCert != "" || n.CredsFile != "" {
		return false
	}
	for _, raw := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" {
			continue
		}
		if u.Scheme == "tls" || u.User != nil {
			continue
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return true
		}
	}
	return false
}

// redactURLs hides the password (or token) of every URL in a comma list, for
// log lines.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, raw := range parts {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.User == nil {
			continue
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a bare token
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
