package config

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
)

// secretKeys are the server.ini keys whose values are secrets, by section.
// They never leave the host: not in `stats config`, not in the server.ini a
// master hands its slaves, not in a log line.
var secretKeys = map[string][]string{
	sectionSite:   {"token"},
	sectionGossip: {"key"},
}

// hiddenValue stands for a secret's value in errors and warnings.
const hiddenValue = "(hidden)"

// IsSecretKey reports whether key of section holds a secret.
func IsSecretKey(section, key string) bool {
	for _, k := range secretKeys[strings.ToLower(section)] {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// StripSecrets returns server.ini bytes without the lines that set a secret
// key (see IsSecretKey); every other byte is kept as it is. Lines are
// removed rather than masked so a copy loaded elsewhere never runs with a
// placeholder as its token: a site keeps its own secrets in its overlay.
// It returns data itself when there is nothing to remove.
func StripSecrets(data []byte) []byte {
	var (
		out  []byte
		kept int // data[:kept] is dealt with
	)
	scanSecrets(data, func(start, end int, _ string) {
		out = append(out, data[kept:start]...)
		kept = end
	})
	if kept == 0 {
		return data
	}
	return append(out, data[kept:]...)
}

// SecretKeysIn names the secret keys ("[site] token") that data sets.
func SecretKeysIn(data []byte) []string {
	var keys []string
	scanSecrets(data, func(_, _ int, name string) { keys = append(keys, name) })
	return keys
}

// scanSecrets calls f with the byte range of every line of data that sets a
// secret key, in order.
func scanSecrets(data []byte, f func(start, end int, name string)) {
	var section string
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += pos + 1
		}
		line := strings.TrimSpace(string(data[pos:end]))
		switch {
		case strings.HasPrefix(line, "[") && strings.Contains(line, "]"):
			section = strings.TrimSpace(line[1:strings.Index(line, "]")])
		case line == "" || line[0] == ';' || line[0] == '#':
		default:
			if i := strings.IndexAny(line, "=:"); i > 0 {
				if key := strings.TrimSpace(line[:i]); IsSecretKey(section, key) {
					f(pos, end, "["+section+"] "+key)
				}
			}
		}
		pos = end
	}
}

// PublicKeyPrefix starts every public key in [nats] trustedKeys.
const PublicKeyPrefix = "ed25519:"

// ParseTrustedKeys parses a [nats] trustedKeys value: comma-separated
// "ed25519:<base64>" public keys. Blank items are skipped.
func ParseTrustedKeys(list string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		b64, ok := strings.CutPrefix(item, PublicKeyPrefix)
		if !ok {
			return nil, fmt.Errorf("%q does not start with %q", item, PublicKeyPrefix)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%q is not a base64 ed25519 public key of %d bytes", item, ed25519.PublicKeySize)
		}
		keys = append(keys, ed25519.PublicKey(raw))
	}
	return keys, nil
}

// FormatPublicKey is the trustedKeys form of a public key.
func FormatPublicKey(k ed25519.PublicKey) string {
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(k)
}
