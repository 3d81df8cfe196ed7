package config

import (
	"bytes"
	"slices"
	"strings"
)

// hostKeys are the keys that say who this host is rather than how the
// deployment behaves: its name and ports, its data directories, its site,
// its gossip and replication listeners, its own ZooKeeper ensemble and NATS
// servers, its secrets and TLS files, and whom it trusts. A server.ini that
// comes from elsewhere (the master's, with autoSyncMasterConfig; a
// configsync push) carries topics and shared settings; these stay the
// host's own (KeepHostKeys).
var hostKeys = map[string][]string{
	sectionSystem:      {"hostName", "serverPort", "dashboardHttpPort", "dataPath", "dataLogPath"},
	sectionZooKeeper:   {"zk.zkConnect"},
	sectionSite:        {"name", "dashboardAddr", "adminAddr", "token", "overlay", "forwardPuts", "storeAndForward", "outboxMaxBytes", "outboxMaxAgeMs", "forwardMaxInFlightBytes"},
	sectionGossip:      {"bind", "advertise", "join", "key"},
	sectionReplication: {"listen", "advertise", "secretFile", "tlsCert", "tlsKey", "tlsCA"},
	sectionNATS:        {"url", "embeddedListen", "credsFile", "tlsCert", "tlsKey", "tlsCA", "agent", "trustedKeys", "allowUnsigned"},
}

// IsHostKey reports whether key of section belongs to the host (see
// hostKeys) rather than to the deployment.
func IsHostKey(section, key string) bool {
	return slices.Contains(hostKeys[section], key)
}

// iniLine is one line of an ini file as written (with its newline).
type iniLine struct {
	section string // the section it stands in ("" before the first header)
	key     string // the key it sets; "" for blanks, comments and headers
	header  bool
	text    []byte
}

func iniLines(data []byte) []iniLine {
	var out []iniLine
	section := ""
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += pos + 1
		}
		l := iniLine{text: data[pos:end]}
		t := strings.TrimSpace(string(l.text))
		switch {
		case t == "" || t[0] == ';' || t[0] == '#':
		case t[0] == '[':
			if e := strings.LastIndexByte(t, ']'); e > 0 {
				section = strings.TrimSpace(t[1:e])
			}
			l.header = true
		default:
			if i := strings.IndexAny(t, "=:"); i > 0 {
				l.key = strings.TrimSpace(t[:i])
			}
		}
		l.section = section
		out = append(out, l)
		pos = end
	}
	return out
}

// HostKeyValues returns the "section.key" → value of every host key data
// sets itself (the last line wins, as when loading).
func HostKeyValues(data []byte) map[string]string {
	out := map[string]string{}
	for _, l := range iniLines(data) {
		if l.key != "" && IsHostKey(l.section, l.key) {
			t := strings.TrimSpace(string(l.text))
			out[l.section+"."+l.key] = strings.TrimSpace(t[strings.IndexAny(t, "=:")+1:])
		}
	}
	return out
}

// KeepHostKeys returns incoming (a server.ini from elsewhere) with this
// host's own keys: a line of incoming that sets a host key is replaced by
// own's line for that key, or left out when own does not set it; own's host
// key lines incoming has no place for go right after the first header of
// their section (a section incoming lacks is added at the end). All other
// bytes of incoming are kept as they are, comments included, so the result
// is incoming's topics and shared settings with own's identity. Applied
// again to the same incoming with its own result it gives the same bytes,
// so a host can tell that nothing changed.
func KeepHostKeys(incoming, own []byte) []byte {
	type ownLine struct {
		text   []byte
		placed bool
	}
	lines := map[string]*ownLine{} // "section.key" → own's (last) line
	bySection := map[string][]string{}
	var order []string
	for _, l := range iniLines(own) {
		if l.key == "" || !IsHostKey(l.section, l.key) {
			continue
		}
		text := l.text
		if !bytes.HasSuffix(text, []byte("\n")) {
			text = append(slices.Clip(text), '\n')
		}
		name := l.section + "." + l.key
		if ol, ok := lines[name]; ok {
			ol.text = text
			continue
		}
		lines[name] = &ownLine{text: text}
		if _, seen := bySection[l.section]; !seen {
			order = append(order, l.section)
		}
		bySection[l.section] = append(bySection[l.section], name)
	}
	in := iniLines(incoming)
	inHas := map[string]bool{}
	for _, l := range in {
		if l.key != "" && IsHostKey(l.section, l.key) {
			inHas[l.section+"."+l.key] = true
		}
	}
	var out []byte
	headed := map[string]bool{}
	for _, l := range in {
		if l.key != "" && IsHostKey(l.section, l.key) {
			if ol, ok := lines[l.section+"."+l.key]; ok && !ol.placed {
				out = append(out, ol.text...)
				ol.placed = true
			}
			continue
		}
		out = append(out, l.text...)
		if !l.header || headed[l.section] {
			continue
		}
		if !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		headed[l.section] = true
		for _, name := range bySection[l.section] {
			if ol := lines[name]; !inHas[name] {
				out = append(out, ol.text...)
				ol.placed = true
			}
		}
	}
	for _, sec := range order {
		if headed[sec] {
			continue
		}
		if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		out = append(out, "\n["+sec+"]\n"...)
		for _, name := range bySection[sec] {
			out = append(out, lines[name].text...)
		}
	}
	return out
}
