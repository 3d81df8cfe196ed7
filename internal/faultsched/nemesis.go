package faultsched

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// FaultRecord is one applied event of a schedule, or a command the
// nemesis ran, with its outcome.
type FaultRecord struct {
	At     time.Duration `json:"at"` // since the run started
	Event  string        `json:"event"`
	Kind   Kind          `json:"kind"`
	Heal   bool          `json:"heal,omitempty"`
	Err    string        `json:"err,omitempty"`
	Output string        `json:"output,omitempty"` // a command's output
	// Command is true for an operator command (switchover, promote,
	// restart): its failure must name its cause.
	Command bool          `json:"command,omitempty"`
	Took    time.Duration `json:"took,omitempty"`
}

// Nemesis applies a schedule's events to a cluster at their times.
type Nemesis struct {
	C     *Cluster
	Start time.Time
	Log   io.Writer // each record as a line, as it happens; may be nil

	mu      sync.Mutex
	records []FaultRecord
	wg      sync.WaitGroup
}

func (n *Nemesis) record(r FaultRecord) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.records = append(n.records, r)
	if n.Log != nil {
		line := fmt.Sprintf("%8.3fs %s", r.At.Seconds(), r.Event)
		if r.Err != "" {
			line += " ERR " + r.Err
		}
		if r.Output != "" {
			line += "\n    | " + indent(r.Output)
		}
		fmt.Fprintln(n.Log, line)
	}
}

// Records returns what was applied so far.
func (n *Nemesis) Records() []FaultRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]FaultRecord(nil), n.records...)
}

func indent(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == '\n' {
			out = append(out, "    | "...)
		}
	}
	return string(out)
}

// Run applies the schedule's events at their times, operator commands in
// goroutines of their own so that they overlap the other faults; it
// returns when the last event was applied and every command has ended.
func (n *Nemesis) Run(ctx context.Context, s Schedule) {
	for _, e := range s.Events {
		if wait := time.Until(n.Start.Add(e.At)); wait > 0 {
			select {
			case <-ctx.Done():
				n.wg.Wait()
				return
			case <-time.After(wait):
			}
		}
		n.apply(ctx, e)
	}
	n.wg.Wait()
}

func (n *Nemesis) since() time.Duration { return time.Since(n.Start) }

func (n *Nemesis) apply(ctx context.Context, e Event) {
	c := n.C
	rec := FaultRecord{At: n.since(), Event: e.String(), Kind: e.Kind, Heal: e.Heal}
	var err error
	switch e.Kind {
	case KindKill:
		if !e.Heal {
			err = c.Kill(e.A)
		} else {
			rec.Command = true
			err = c.StartSite(e.A)
		}
	case KindPause:
		err = c.Pause(e.A, !e.Heal)
	case KindCut:
		c.Links.Cut(e.A, e.B, !e.Heal)
	case KindZKCut:
		c.Links.Cut(e.A, "zk:"+e.A, !e.Heal)
	case KindClientCut:
		c.Links.Cut(Clients, e.A, !e.Heal)
	case KindZKDown:
		if !e.Heal {
			err = c.StopZK(e.A)
		} else {
			err = c.StartZK(ctx, e.A)
		}
	case KindSlow:
		d := time.Duration(e.Amount) * time.Millisecond
		if e.Heal {
			d = 0
		}
		c.Links.Slow(e.A, e.B, d)
	case KindLossy:
		p := float64(e.Amount) / 1000
		if e.Heal {
			p = 0
		}
		c.Links.Lossy(e.A, e.B, p)
	case KindDiskFull:
		err = c.FillDisk(e.A, !e.Heal)
	case KindFlip:
		var what string
		what, err = c.FlipSealed(e.A, e.Amount)
		rec.Output = what
	case KindSwitchover, KindPromote, KindPromoteForce, KindPush:
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.command(ctx, e, rec)
		}()
		return
	}
	if err != nil {
		rec.Err = err.Error()
	}
	n.record(rec)
}

// command runs an operator command at site A; a stopped or killed site
// cannot answer, which the command must say.
func (n *Nemesis) command(ctx context.Context, e Event, rec FaultRecord) {
	if e.Kind == KindPush {
		n.push(ctx, e, rec)
		return
	}
	var args []string
	switch e.Kind {
	case KindSwitchover:
		args = []string{"switchover", "-to", e.B}
	case KindPromote:
		args = []string{"promote"}
	case KindPromoteForce:
		args = []string{"promote", "-force"}
	}
	rec.Command = true
	t0 := time.Now()
	out, err := n.C.Command(ctx, e.A, 40*time.Second, args...)
	rec.Took = time.Since(t0)
	rec.Output = out
	if err != nil {
		rec.Err = err.Error()
	}
	rec.Event += fmt.Sprintf(" (took %v)", rec.Took.Round(time.Millisecond))
	n.record(rec)
}

// push publishes server.ini with one more topic with configsync at site A;
// a site that is down or cut off must be named in the command's per-site
// result, and catch up after the heal (Cluster.ConfigConverged).
func (n *Nemesis) push(ctx context.Context, e Event, rec FaultRecord) {
	rec.Command = true
	file := n.C.NextPush()
	t0 := time.Now()
	out, v, err := n.C.Push(ctx, e.A, file, 10*time.Second)
	rec.Took = time.Since(t0)
	rec.Output = out
	if err != nil {
		rec.Err = err.Error()
	}
	if v > 0 {
		n.C.Pushed(file)
		rec.Event += fmt.Sprintf(" (version %d)", v)
	}
	rec.Event += fmt.Sprintf(" (took %v)", rec.Took.Round(time.Millisecond))
	n.record(rec)
}

// HealAll ends every fault: SIGCONT, restarts of killed sites, ZooKeepers
// started, links healed.
func (n *Nemesis) HealAll(ctx context.Context) {
	c := n.C
	c.Links.HealAll()
	for _, s := range Sites {
		if c.DiskFilled(s) {
			rec := FaultRecord{At: n.since(), Event: "heal-all disk-full " + s, Kind: KindDiskFull, Heal: true}
			if err := c.FillDisk(s, false); err != nil {
				rec.Err = err.Error()
			}
			n.record(rec)
		}
	}
	n.record(FaultRecord{At: n.since(), Event: "heal all links"})
	for _, s := range Sites {
		if c.ZKDown(s) {
			rec := FaultRecord{At: n.since(), Event: "heal-all zk-down " + s, Kind: KindZKDown, Heal: true}
			if err := c.StartZK(ctx, s); err != nil {
				rec.Err = err.Error()
			}
			n.record(rec)
		}
		if c.Stopped(s) {
			rec := FaultRecord{At: n.since(), Event: "heal-all pause " + s, Kind: KindPause, Heal: true}
			if err := c.Pause(s, false); err != nil {
				rec.Err = err.Error()
			}
			n.record(rec)
		}
		if !c.Running(s) {
			rec := FaultRecord{At: n.since(), Event: "heal-all kill " + s + " (restart)", Kind: KindKill, Heal: true, Command: true}
			if err := c.StartSite(s); err != nil {
				rec.Err = err.Error()
			}
			n.record(rec)
		}
	}
}
