package config

import (
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// sectionReader reads typed values out of one section and files every
// problem under the key's own file (base or overlay).
type sectionReader struct {
	sec  *rawSection
	file string // used when the section itself is missing
	p    *problems
}

func (r sectionReader) name() string {
	if r.sec == nil {
		return ""
	}
	return r.sec.Name
}

// raw returns the key's trimmed value; ok is false when the key is absent
// or blank, which MetaQ treats alike (StringUtils.isBlank).
func (r sectionReader) raw(key string) (rawKey, bool) {
	if r.sec == nil {
		return rawKey{}, false
	}
	k, ok := r.sec.get(key)
	if !ok || strings.TrimSpace(k.Value) == "" {
		return k, false
	}
	return k, true
}

func (r sectionReader) bad(k rawKey, expected string, args ...any) {
	file := k.File
	if file == "" {
		file = r.file
	}
	r.p.errorf(file, r.name(), k.Name, k.Value, expected, args...)
}

func (r sectionReader) required(key string) {
	if _, ok := r.raw(key); !ok {
		k, present := r.sec.get(key)
		if !present {
			k = rawKey{Name: key, File: r.file}
		}
		r.bad(k, "a value: the key is required")
	}
}

func (r sectionReader) str(key, def string) string {
	if k, ok := r.raw(key); ok {
		return k.Value
	}
	return def
}

// integer reads an Aviator-style integer expression within lo..hi.
func (r sectionReader) integer(key string, def, lo, hi int64) int64 {
	k, ok := r.raw(key)
	if !ok {
		return def
	}
	v, err := evalInt(k.Value)
	if err != nil {
		r.bad(k, "an integer or integer expression such as 1024*1024 (%v)", err)
		return def
	}
	if v < lo || v > hi {
		r.bad(k, "an integer in %s", rangeText(lo, hi))
		return def
	}
	return v
}

func rangeText(lo, hi int64) string {
	switch {
	case hi == math.MaxInt32:
		return fmt.Sprintf("%d..2147483647 (a 32-bit int, as MetaQ reads it)", lo)
	case hi == math.MaxInt64:
		return fmt.Sprintf("%d..%d", lo, hi)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

func (r sectionReader) int32(key string, def int, lo int64) int {
	return int(r.integer(key, int64(def), lo, math.MaxInt32))
}

func (r sectionReader) millis(key string, def time.Duration, lo int64) time.Duration {
	return time.Duration(r.integer(key, def.Milliseconds(), lo, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
}

func (r sectionReader) boolean(key string, def bool) bool {
	k, ok := r.raw(key)
	if !ok {
		return def
	}
	switch strings.ToLower(k.Value) {
	case "true":
		return true
	case "false":
		return false
	}
	r.bad(k, "true or false")
	return def
}

func (r sectionReader) oneOf(key, def string, allowed []string) string {
	k, ok := r.raw(key)
	if !ok {
		return def
	}
	if !contains(allowed, k.Value) {
		r.bad(k, "one of %s", strings.Join(allowed, ", "))
		return def
	}
	return k.Value
}

// addr reads a host:port listen or dial address.
func (r sectionReader) addr(key, def string) string {
	k, ok := r.raw(key)
	if !ok || strings.TrimSpace(k.Value) == "" { // written blank: the default
		return def
	}
	if err := checkAddr(k.Value); err != nil {
		r.bad(k, "host:port with a port in 0..65535 (%v)", err)
		return def
	}
	return k.Value
}

func checkAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// IsLoopbackAddr reports whether a listen address stays on this machine.
// An empty host (":8120") listens on every interface.
func IsLoopbackAddr(s string) bool {
	host, _, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r sectionReader) base64Key(key string) []byte {
	k, ok := r.raw(key)
	if !ok {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(k.Value)
	if err != nil || (len(b) != 16 && len(b) != 24 && len(b) != 32) {
		r.bad(k, "a base64 (standard alphabet) key of 16, 24 or 32 bytes")
		return nil
	}
	return b
}

// checkKeys warns about every key of the section that is not in valid,
// suggesting the nearest valid key as MetaQ's "do you mean" does. inert keys
// are accepted by MetaQ but unused: they get a milder warning.
func (r sectionReader) checkKeys(valid, inert []string, allowFilters bool) {
	if r.sec == nil {
		return
	}
	for _, k := range r.sec.Keys {
		switch {
		case contains(valid, k.Name):
		case allowFilters && strings.HasPrefix(k.Name, filterKeyPrefix):
		case contains(inert, k.Name):
			r.p.warnf(k.File, r.sec.Name, k.Name, "accepted for MetaQ compatibility but has no effect here")
		default:
			r.p.unknownf(k.File, r.sec.Name, k.Name, "unknown key (MetaQ refuses it at start-up); did you mean %q?", closest(valid, k.Name))
		}
	}
}

// has reports whether key is written with a value (an empty value means
// the default).
func (r sectionReader) has(key string) bool {
	_, ok := r.raw(key)
	return ok
}
