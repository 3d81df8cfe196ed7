package config

import (
	"slices"
	"strings"
)

// Changes is what differs between two loaded server.ini files, as far as a
// running broker cares (see Reload in broker/wire/doc.go): MetaQ re-applies [topic=...] sections on
// reload, and everything else needs a restart.
type Changes struct {
	TopicsAdded   []string // topic section names only in the new file, in its order
	TopicsChanged []string // in both, with any effective value different
	TopicsRemoved []string // only in the old file, in its order
	// RestartKeys names every changed key outside [topic=...] as
	// "section.key", e.g. "system.serverPort" or "zookeeper.zk.zkConnect".
	RestartKeys []string
	// AppliedKeys names the changed keys outside [topic=...] that a
	// reload applies, as "section.key": site.forwardMaxInFlightBytes (the
	// write gateway's bound, broker.Gateway.SetMaxInFlightBytes).
	AppliedKeys []string
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.TopicsAdded) == 0 && len(c.TopicsChanged) == 0 && len(c.TopicsRemoved) == 0 && len(c.RestartKeys) == 0 &&
		len(c.AppliedKeys) == 0
}

// NeedsRestart reports whether a key outside the topic sections changed.
func (c Changes) NeedsRestart() bool { return len(c.RestartKeys) > 0 }

// String gives one human line, such as
// "topics added: a; changed: test; removed: old; restart needed for: system.serverPort".
func (c Changes) String() string {
	if c.Empty() {
		return "no changes"
	}
	var parts []string
	add := func(label string, list []string) {
		if len(list) > 0 {
			parts = append(parts, label+": "+strings.Join(list, ", "))
		}
	}
	add("topics added", c.TopicsAdded)
	add("topics changed", c.TopicsChanged)
	add("topics removed", c.TopicsRemoved)
	add("applied", c.AppliedKeys)
	add("restart needed for", c.RestartKeys)
	return strings.Join(parts, "; ")
}

// Diff compares two effective configurations. Either may be nil (treated as
// an empty file). Topics are compared by their effective values, so a change
// of a [system] default that a topic inherits shows up both as a restart key
// and as a changed topic.
func Diff(old, new *Server) Changes {
	var c Changes
	ob, nb := blocksOf(old), blocksOf(new)
	oTopics, nTopics := map[string][]entry{}, map[string][]entry{}
	oOther, nOther := map[string][]entry{}, map[string][]entry{}
	var oOrder, nOrder, otherOrder []string
	for _, b := range ob {
		if name, ok := strings.CutPrefix(b.Section, topicPrefix); ok {
			oTopics[name] = b.Entries
			oOrder = append(oOrder, name)
		} else {
			oOther[b.Section] = b.Entries
			otherOrder = append(otherOrder, b.Section)
		}
	}
	for _, b := range nb {
		if name, ok := strings.CutPrefix(b.Section, topicPrefix); ok {
			nTopics[name] = b.Entries
			nOrder = append(nOrder, name)
		} else {
			nOther[b.Section] = b.Entries
			if _, seen := oOther[b.Section]; !seen {
				otherOrder = append(otherOrder, b.Section)
			}
		}
	}
	for _, name := range nOrder {
		oe, ok := oTopics[name]
		switch {
		case !ok:
			c.TopicsAdded = append(c.TopicsAdded, name)
		case !slices.Equal(oe, nTopics[name]):
			c.TopicsChanged = append(c.TopicsChanged, name)
		}
	}
	for _, name := range oOrder {
		if _, ok := nTopics[name]; !ok {
			c.TopicsRemoved = append(c.TopicsRemoved, name)
		}
	}
	for _, sec := range otherOrder {
		ov, nv := toMap(oOther[sec]), toMap(nOther[sec])
		for _, e := range mergeKeys(oOther[sec], nOther[sec]) {
			if ov[e] != nv[e] {
				c.RestartKeys = append(c.RestartKeys, sec+"."+e)
			}
		}
	}
	var ob64, nb64 int64
	if old != nil {
		ob64 = old.Site.ForwardMaxInFlightBytes
	}
	if new != nil {
		nb64 = new.Site.ForwardMaxInFlightBytes
	}
	if ob64 != nb64 {
		c.AppliedKeys = append(c.AppliedKeys, "site.forwardMaxInFlightBytes")
	}
	return c
}

func blocksOf(s *Server) []block {
	if s == nil {
		return nil
	}
	return s.blocks()
}

func toMap(es []entry) map[string]string {
	m := make(map[string]string, len(es))
	for _, e := range es {
		m[e.Key] = e.Value
	}
	return m
}

func mergeKeys(a, b []entry) []string {
	seen := map[string]bool{}
	var out []string
	for _, list := range [][]entry{a, b} {
		for _, e := range list {
			if !seen[e.Key] {
				seen[e.Key] = true
				out = append(out, e.Key)
			}
		}
	}
	return out
}
