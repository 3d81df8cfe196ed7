package configsync

import (
	"errors"
	"os"
	"slices"
	"sort"
	"strings"

	"metaq/broker/config"
)

// OverlayKeys lists the "section.key" names an overlay file sets (only the
// names: an overlay holds secrets such as tokens and the gossip key, which
// never leave the site). A key the overlay sets is the overlay's on that
// site whatever the shared file says, so a push changing it changes nothing
// there; the pusher's per-site preview leaves such keys out.
func OverlayKeys(data []byte) []string {
	seen := map[string]bool{}
	for section, line := range config.KeyLines(data) {
		if key := keyName(line); key != "" && section != "" {
			seen[section+"."+key] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// secretKey reports whether an overlay key may hold a secret (a token, the
// gossip key, a password): such lines never leave the site.
func secretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"token", "key", "secret", "password", "creds"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// keyName returns the key of an ini key line: what stands before the first
// '=' or ':', trimmed.
func keyName(line string) string {
	if i := strings.IndexAny(line, "=:"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// PublicOverlay returns the overlay file without the lines of keys that may
// hold secrets (secretKey). The pusher applies it to preview what a version
// changes on the site; the keys left out are still named by OverlayKeys.
func PublicOverlay(data []byte) []byte {
	var b strings.Builder
	for line := range strings.SplitSeq(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && t[0] != ';' && t[0] != '#' && t[0] != '[' {
			if secretKey(keyName(t)) {
				continue
			}
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// overlayOf reads the overlay file at path and returns its key names and its
// public part; nil when there is none.
func overlayOf(path string) ([]string, []byte) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	return OverlayKeys(data), PublicOverlay(data)
}

// siteOverlayName returns the value of "overlay" in the [site] section of a
// server.ini, without validating the rest of the file.
func siteOverlayName(data []byte) string {
	for section, line := range config.KeyLines(data) {
		if !strings.EqualFold(section, "site") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "overlay" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ErrHostKeys is returned when a pushed version would replace one of the
// keys a push must never change on a site (pinnedKeys) while the site's own
// server.ini sets it outside its overlay.
var ErrHostKeys = errors.New("configsync: a push would change who this host is")

// pinnedKeys are the host keys (config.IsHostKey) a push leaves alone even
// where the site wrote them into server.ini instead of its overlay: its
// secrets (a pushed file never carries them, so taking it would drop them),
// where its data lives (a restart would open an empty store elsewhere) and
// which overlay holds the rest of its identity. The [site] name has its own
// check. The other host keys (ports, listeners, host name, ensembles)
// written in the shared file are shared settings a push may change: they
// take effect at the restart and are reported as pending until then.
var pinnedKeys = []string{"system.dataPath", "system.dataLogPath", "site.overlay", "site.token", "gossip.key"}

// hostKeysReplaced names ("[section] key") the pinned keys that the file a
// site runs (old) sets itself, its overlay does not, and pushed would change
// or drop.
func hostKeysReplaced(old, pushed, overlay []byte) []string {
	was, now := config.HostKeyValues(old), config.HostKeyValues(pushed)
	overlaid := OverlayKeys(overlay)
	var out []string
	for name, v := range was {
		if !slices.Contains(pinnedKeys, name) || slices.Contains(overlaid, name) {
			continue
		}
		if nv, ok := now[name]; !ok || nv != v {
			section, key, _ := strings.Cut(name, ".")
			out = append(out, "["+section+"] "+key)
		}
	}
	sort.Strings(out)
	return out
}
