package georeplicator

import (
	"fmt"
	"sort"
	"time"
)

// This file is the project's one model of replication lag: the master's
// Shipper measures it (GroupLag, PartitionLag) and sums it up (LagSummary,
// LagState); topology gossips the summaries and reports them per site, and
// the dashboard, /metrics, `stats slave` and `metaq lag` show these types.

// PartitionLag is how far one slave is behind on one partition. Offsets
// are MetaQ byte offsets, equal on master and slave.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	MasterEnd int64  `json:"masterEnd"` // master's durable end offset
	SlaveEnd  int64  `json:"slaveEnd"`  // end applied on the slave (-1 = the slave has none of it)
	Bytes     int64  `json:"bytes"`     // MasterEnd - SlaveEnd
	Messages  int64  `json:"messages"`  // records not yet on the slave
	// Behind is the age of the oldest record not yet on the slave (0 when caught up).
	Behind time.Duration `json:"behindNs"`
	// Stuck: behind, while the slave has made no progress for StuckAfter.
	Stuck bool `json:"stuck"`
}

// GroupLag is one slave's replication state as the master sees it. A slave
// group normally has one slave; each (Group, SlaveID) gets its own entry.
type GroupLag struct {
	Group     string
	SlaveID   int
	Connected bool   // false while the slave is not attached
	Addr      string // remote address of the current or last connection
	// AppliedPos and DurablePos are master log positions applied and
	// checkpointed on the slave; SentPos is what the master has sent.
	AppliedPos, DurablePos, SentPos int64
	// MasterPos is the master's durable log end.
	MasterPos int64
	// Totals over the partitions (Behind: the largest).
	Bytes    int64
	Messages int64
	Behind   time.Duration
	Stuck    bool
	// LogBytes is MasterPos - AppliedPos: bytes of the shared log not yet applied.
	LogBytes int64
	// Left out of the JSON (status -json) until they happen.
	LastAck      time.Time `json:",omitzero"`
	LastProgress time.Time `json:",omitzero"`
	RTT          time.Duration
	Mode         string // configured mode for this link (zstd, s2, none, auto)
	Codec        string // codec of the last data frame
	RawBytes     int64  // payload bytes shipped on this master's run
	WireBytes    int64  // bytes on the wire for them, headers included
	Frames       int64
	Rewinds      int64 // frames the slave rejected and asked for again
	Truncated    bool  // the slave's position had been removed by retention at its last connect
	// Auth is how the slave proved itself on its current or last connection
	// in this master's run: "secret", "tls-client-cert", both joined by "+",
	// or "none" (a listener without authentication); "" when it has not
	// connected since the master started.
	Auth       string
	Partitions []PartitionLag
}

// Lag reports every known slave's lag, sorted by group then slave id. It is
// safe to call at any time, also for slaves that are disconnected (their
// progress survives master restarts through the state file).
func (s *Shipper) Lag() []GroupLag { return s.lagWhere(nil) }

// lagOf is the lag of one slave, false when the master does not know it.
func (s *Shipper) lagOf(k slaveKey) (GroupLag, bool) {
	g := s.lagWhere(func(x slaveKey) bool { return x == k })
	if len(g) == 0 {
		return GroupLag{}, false
	}
	return g[0], true
}

// lagWhere is Lag of the slaves keep accepts (all when nil).
func (s *Shipper) lagWhere(keep func(slaveKey) bool) []GroupLag {
	now := s.opts.Clock.Now()
	parts := s.opts.Source.Partitions()
	_, durable := s.opts.Source.LogBounds()
	s.prog.mu.Lock()
	type snap struct {
		sp    slaveProgress
		parts map[pkey]partProgress
	}
	snaps := make([]snap, 0, len(s.prog.m))
	for _, sp := range s.prog.m {
		if keep != nil && !keep(sp.key) {
			continue
		}
		c := snap{sp: *sp, parts: make(map[pkey]partProgress, len(sp.Parts))}
		for k, pp := range sp.Parts {
			c.parts[k] = *pp
		}
		snaps = append(snaps, c)
	}
	s.prog.mu.Unlock()

	out := make([]GroupLag, 0, len(snaps))
	for _, c := range snaps {
		sp := c.sp
		g := GroupLag{Group: sp.key.Group, SlaveID: sp.key.SlaveID, Connected: sp.Connected, Addr: sp.Addr,
			AppliedPos: sp.Applied, DurablePos: sp.Durable, SentPos: sp.Sent, MasterPos: durable,
			LastAck: sp.LastAck, LastProgress: sp.LastProgress, RTT: sp.RTT, Mode: string(sp.Mode),
			RawBytes: sp.RawBytes, WireBytes: sp.WireBytes, Frames: sp.Frames, Rewinds: sp.Rewinds, Truncated: sp.Truncated,
			Auth: sp.Auth}
		if sp.Frames > 0 {
			g.Codec = sp.LastCodec.String()
		}
		if sp.Applied >= 0 && durable > sp.Applied {
			g.LogBytes = durable - sp.Applied
		}
		for _, pi := range parts {
			k := pkey{pi.Topic, pi.Partition}
			pl := PartitionLag{Topic: pi.Topic, Partition: pi.Partition, MasterEnd: pi.Durable, SlaveEnd: -1}
			// The slave applies the log in order, so a partition whose next
			// records lie further on is waiting its turn, not stuck: a
			// partition is stuck when it is behind and the slave's log
			// position has not moved for StuckAfter.
			since := sp.FirstSeen
			if sp.LastProgress.After(since) {
				since = sp.LastProgress
			}
			from := pi.Min
			if pp, ok := c.parts[k]; ok {
				pl.SlaveEnd = pp.End
				from = pp.End
			}
			if pi.Durable > from {
				pl.Bytes = pi.Durable - from
				msgs, t, _ := s.opts.Source.Backlog(pi.Topic, pi.Partition, from)
				pl.Messages = msgs
				if !t.IsZero() && now.After(t) {
					pl.Behind = now.Sub(t)
				}
				pl.Stuck = now.Sub(since) >= s.opts.StuckAfter
			}
			g.Bytes += pl.Bytes
			g.Messages += pl.Messages
			g.Behind = max(g.Behind, pl.Behind)
			g.Stuck = g.Stuck || pl.Stuck
			g.Partitions = append(g.Partitions, pl)
		}
		if g.LogBytes > 0 && now.Sub(sp.LastProgress) >= s.opts.StuckAfter {
			g.Stuck = true
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Group < out[j].Group || out[i].Group == out[j].Group && out[i].SlaveID < out[j].SlaveID
	})
	return out
}

// StatsLines renders Lag for the broker's `stats slave` item: one line per
// slave, then one per partition, values joined by single spaces as MetaQ's
// stats lines are (the caller adds CRLF, STATS and END):
//
//	<group> slave_id <id> connected <bool> addr <a> applied <pos> master <pos> lag_bytes <n> lag_messages <n> lag_seconds <f> stuck <bool> rtt_ms <f> codec <c> wire_bytes <n> raw_bytes <n> rewinds <n>
//	<group> partition <topic>-<p> master_end <n> slave_end <n> lag_bytes <n> lag_messages <n> lag_seconds <f> stuck <bool>
func (s *Shipper) StatsLines() []string {
	var lines []string
	for _, g := range s.Lag() {
		addr := g.Addr
		if addr == "" {
			addr = "-"
		}
		codec := g.Codec
		if codec == "" {
			codec = g.Mode
		}
		lines = append(lines, fmt.Sprintf("%s slave_id %d connected %t addr %s applied %d master %d lag_bytes %d lag_messages %d lag_seconds %.2f stuck %t rtt_ms %.2f codec %s wire_bytes %d raw_bytes %d rewinds %d",
			g.Group, g.SlaveID, g.Connected, addr, g.AppliedPos, g.MasterPos, g.Bytes, g.Messages, g.Behind.Seconds(), g.Stuck,
			float64(g.RTT)/float64(time.Millisecond), codec, g.WireBytes, g.RawBytes, g.Rewinds))
		for _, p := range g.Partitions {
			lines = append(lines, fmt.Sprintf("%s partition %s-%d master_end %d slave_end %d lag_bytes %d lag_messages %d lag_seconds %.2f stuck %t",
				g.Group, p.Topic, p.Partition, p.MasterEnd, p.SlaveEnd, p.Bytes, p.Messages, p.Behind.Seconds(), p.Stuck))
		}
	}
	return lines
}

// LagState classifies a slave group's lag.
type LagState uint8

const (
	// LagOK means the slave is connected and within the lagging threshold.
	LagOK LagState = iota
	// LagLagging means the slave is connected and making progress but further
	// behind than the lagging threshold.
	LagLagging
	// LagStuck means the slave is behind and has made no progress for the
	// replicator's stuck time.
	LagStuck
	// LagDown means the slave is not connected or its bundle is down.
	LagDown
)

// String returns ok, lagging, stuck or down.
func (s LagState) String() string {
	switch s {
	case LagOK:
		return "ok"
	case LagLagging:
		return "lagging"
	case LagStuck:
		return "stuck"
	}
	return "down"
}

// MarshalText makes LagState print as its name in JSON.
func (s LagState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the names String returns.
func (s *LagState) UnmarshalText(b []byte) error {
	for _, c := range []LagState{LagOK, LagLagging, LagStuck, LagDown} {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("georeplicator: unknown lag state %q", b)
}

// LagSummary is one slave group's lag summed over its partitions and
// classified: what a master gossips about each slave group.
type LagSummary struct {
	SlaveGroup string        `json:"slaveGroup"`
	SlaveID    int           `json:"slaveId"`
	Partitions int           `json:"partitions"`
	Bytes      int64         `json:"bytes"`
	Messages   int64         `json:"messages"`
	Behind     time.Duration `json:"behindNs"`
	State      LagState      `json:"state"`
}

// Summary sums g up: down when not connected, stuck when g or any
// partition is stuck, lagging when the oldest missing record is older than
// laggingAfter, else ok.
func (g *GroupLag) Summary(laggingAfter time.Duration) LagSummary {
	s := LagSummary{SlaveGroup: g.Group, SlaveID: g.SlaveID, Partitions: len(g.Partitions)}
	stuck := g.Stuck
	for _, p := range g.Partitions {
		s.Bytes += p.Bytes
		s.Messages += p.Messages
		s.Behind = max(s.Behind, p.Behind)
		stuck = stuck || p.Stuck
	}
	switch {
	case !g.Connected:
		s.State = LagDown
	case stuck:
		s.State = LagStuck
	case s.Behind > laggingAfter:
		s.State = LagLagging
	default:
		s.State = LagOK
	}
	return s
}
