package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// printStatusSummary renders the admin endpoint's /status as a few lines;
// -json prints the whole document instead.
func printStatusSummary(w io.Writer, body []byte) error {
	st, err := decodeObject(body)
	if err != nil {
		return fmt.Errorf("status: the admin endpoint's answer %q: %w", body, err)
	}
	role := str(st["mode"])
	if role == "" {
		role = "master"
	}
	who := fmt.Sprintf("%s of brokerId %v", role, st["brokerId"])
	if id, err := json.Number(str(st["slaveId"])).Int64(); err == nil && id >= 0 {
		who += fmt.Sprintf(" (slaveId %v)", id)
	}
	health := "healthy"
	if st["healthy"] != true {
		health = "NOT healthy"
	}
	fmt.Fprintf(w, "  %s, serving %s, up %s, %s\n", who, str(st["url"]), str(st["uptime"]), health)
	fmt.Fprintf(w, "  config %s (checksum %v)\n", str(st["configFile"]), st["configChecksum"])
	if why := str(st["steppedDown"]); why != "" {
		fmt.Fprintf(w, "  STEPPED DOWN: %s\n", why)
	}
	if pp, ok := st["pendingPromotion"].(map[string]any); ok {
		fmt.Fprintf(w, "  PROMOTION PENDING: generation %v raised by this site, not finished after %v attempts (retrying until %s, then giving up): %s\n",
			pp["generation"], pp["attempts"], str(pp["giveUpAt"]), str(pp["lastError"]))
		if why := str(pp["notGivingUp"]); why != "" {
			fmt.Fprintf(w, "  it keeps retrying past that: %s\n", why)
		}
	}
	if g, ok := st["promotionGivenUp"].(map[string]any); ok {
		abandoned := "marked abandoned in ZooKeeper: the master that stepped down for it takes mastership back"
		if g["abandoned"] != true {
			abandoned = "NOT marked abandoned in ZooKeeper"
		}
		fmt.Fprintf(w, "  PROMOTION GIVEN UP at %s: generation %v, after %v attempts (%s); this site follows again as a slave: %s\n",
			str(g["gaveUpAt"]), g["generation"], g["attempts"], abandoned, str(g["lastError"]))
	}
	if zk, ok := st["zookeeper"].(map[string]any); ok {
		reg := "broker registered"
		if zk["brokerRegistered"] != true {
			reg = "broker NOT registered"
		}
		topics, _ := zk["topics"].([]any)
		fmt.Fprintf(w, "  zookeeper: session %s, %s, %d topics\n", orNone(str(zk["session"])), reg, len(topics))
	} else {
		fmt.Fprintln(w, "  zookeeper: off")
	}
	comps, _ := st["components"].(map[string]any)
	names := make([]string, 0, len(comps))
	for n := range comps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c, _ := comps[n].(map[string]any)
		fmt.Fprintf(w, "  %s: %s\n", n, componentLine(n, c))
	}
	fmt.Fprintln(w, "(metaq-server status -json prints everything; slave-status the replication link)")
	return nil
}

// componentLine is one component's state in a few words.
func componentLine(name string, c map[string]any) string {
	var parts []string
	if r, ok := c["running"]; ok && r != true {
		parts = append(parts, "NOT running")
	}
	switch name {
	case "replication-slave":
		return slaveLine(c)
	case "replication-master":
		if c["running"] == false {
			break
		}
		return shipperLine(c)
	case "configsync":
		if s, ok := c["state"].(map[string]any); ok {
			parts = append(parts, fmt.Sprintf("runs v%v, applied %s", s["version"], when(s["appliedAt"])))
			if e := str(s["error"]); e != "" {
				parts = append(parts, "error: "+e)
			}
		}
	case "topology":
		if sites, ok := c["sites"].(map[string]any); ok {
			parts = append(parts, fmt.Sprintf("node %s, sites %s", str(c["node"]), states(sites)))
		}
	case "transactions":
		parts = append(parts, fmt.Sprintf("%v local, %v XA open", c["local"], c["xa"]))
	default:
		if a := str(c["addr"]); a != "" {
			parts = append(parts, a)
		}
	}
	if e := str(c["error"]); e != "" {
		parts = append(parts, "error: "+e)
	}
	if len(parts) == 0 {
		return "running"
	}
	return strings.Join(parts, ", ")
}

// slaveLine summarises a replication-slave status.
func slaveLine(s map[string]any) string {
	conn := "NOT connected"
	if s["Connected"] == true {
		conn = "connected"
	}
	line := fmt.Sprintf("%s to %s (%s), applied %v of the master's %v, last apply %s",
		conn, orNone(str(s["MasterAddr"])), orNone(str(s["Method"])), s["AppliedPos"], s["MasterPos"], when(s["LastApply"]))
	if e := str(s["LastError"]); e != "" {
		line += fmt.Sprintf(", last error %s: %s", when(s["LastErrorAt"]), e)
	}
	return line
}

// shipperLine summarises a replication-master status: where it listens,
// whether its address is published, and each slave group it ships to.
func shipperLine(c map[string]any) string {
	line := "shipping at " + orNone(str(c["addr"]))
	switch {
	case str(c["publishedError"]) != "":
		line += ", address NOT published: " + str(c["publishedError"])
	case c["published"] == false:
		line += ", address NOT published in ZooKeeper"
	}
	slaves, _ := c["slaves"].([]any)
	if len(slaves) == 0 {
		return line + ", no slave attached"
	}
	var groups []string
	for _, g := range slaves {
		m, _ := g.(map[string]any)
		state := "connected"
		if m["Connected"] != true {
			state = "NOT connected"
		}
		groups = append(groups, fmt.Sprintf("%s/%v %s, %v log bytes behind", str(m["Group"]), m["SlaveID"], state, m["LogBytes"]))
	}
	return line + "; " + strings.Join(groups, "; ")
}

// printSlaveSummary renders /slave-status; -json prints the document.
func printSlaveSummary(w io.Writer, body []byte) error {
	s, err := decodeObject(body)
	if err != nil {
		return fmt.Errorf("slave-status: the admin endpoint's answer %q: %w", body, err)
	}
	fmt.Fprintf(w, "replication: %s\n", slaveLine(s))
	if r := str(s["MethodReason"]); r != "" {
		fmt.Fprintf(w, "  why this method: %s\n", r)
	}
	fmt.Fprintf(w, "  %v partitions, %v entries in %v frames (%v bytes on the wire for %v)\n",
		s["Partitions"], s["Entries"], s["Frames"], s["WireBytes"], s["RawBytes"])
	fmt.Fprintf(w, "  reconnects %v, dial failures %v, rewinds %v, corrupt frames %v\n",
		s["Reconnects"], s["DialFailures"], s["Rewinds"], s["Corrupt"])
	if s["Truncated"] == true || s["Diverged"] != nil {
		fmt.Fprintf(w, "  diverged from the master: %v (unreplicated records saved aside: %v)\n", s["Diverged"], s["Unreplicated"])
	}
	fmt.Fprintln(w, "(metaq-server slave-status -json prints everything)")
	return nil
}

// decodeObject decodes a JSON object keeping numbers as written (a checksum
// is not 2.57e+09).
func decodeObject(body []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	err := d.Decode(&m)
	return m, err
}

// when formats a JSON time for people: "never" for Go's zero time.
func when(v any) string {
	t, err := time.Parse(time.RFC3339Nano, str(v))
	if err != nil || t.IsZero() || t.Year() <= 1 {
		return "never"
	}
	return t.Local().Format(time.RFC3339) + " (" + time.Since(t).Round(time.Second).String() + " ago)"
}

func states(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + " " + str(m[k])
	}
	return strings.Join(keys, ", ")
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
