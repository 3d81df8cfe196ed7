package faultsched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds a schedule draws from.
const (
	KindKill         Kind = "kill"          // kill -9 of a site; healed by a restart with the unit's command
	KindPause        Kind = "pause"         // SIGSTOP of a site; healed by SIGCONT
	KindCut          Kind = "cut"           // black hole between two sites (replication links)
	KindZKCut        Kind = "zk-cut"        // black hole between a site and its ZooKeeper
	KindZKDown       Kind = "zk-down"       // a site's whole ensemble (its one ZooKeeper) killed; healed by starting it
	KindSlow         Kind = "slow"          // 50-300 ms added per chunk on a link between two sites
	KindLossy        Kind = "lossy"         // 5-30% of a link's chunks stalled 200 ms, as retransmissions
	KindSwitchover   Kind = "switchover"    // metaq-server switchover -to B, run at site A
	KindPromote      Kind = "promote"       // metaq-server promote, run at site A
	KindPromoteForce Kind = "promote-force" // metaq-server promote -force, run at site A
	KindDiskFull     Kind = "disk-full"     // site A's data filesystem (a tmpfs of its own) filled; healed by freeing it
	KindFlip         Kind = "flip"          // one byte flipped in a sealed log segment of site A
	KindPush         Kind = "push"          // configsync push at site A of server.ini with one more topic
	KindClientCut    Kind = "client-cut"    // black hole between the workload's clients and site A (its MetaQ port, its ZooKeeper)
)

// AllKinds lists the kinds "all" means: the twelve the harness started
// with. It does not grow, so that a seed recorded with "all" (SOAK.md)
// draws the same schedule later.
var AllKinds = []Kind{KindKill, KindPause, KindCut, KindZKCut, KindZKDown, KindSlow, KindLossy,
	KindSwitchover, KindPromote, KindPromoteForce, KindDiskFull, KindFlip}

// ExtraKinds are kinds named on their own ("all,push,client-cut"): push
// also runs a NATS server per site for configsync; client-cut came after
// the twelve.
var ExtraKinds = []Kind{KindPush, KindClientCut}

// lasting reports whether a fault lasts until a heal event.
func (k Kind) lasting() bool {
	switch k {
	case KindSwitchover, KindPromote, KindPromoteForce, KindFlip, KindPush:
		return false
	}
	return true
}

// Event is one step of a schedule: a fault starting, or healing (Heal).
type Event struct {
	At   time.Duration
	ID   int // a fault and its heal share it
	Kind Kind
	Heal bool
	A, B string // the site(s); B is the other end of a link, or switchover's target
	// Amount is a slow link's delay or a lossy link's stall fraction (per mille).
	Amount int
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8.3fs #%d ", e.At.Seconds(), e.ID)
	if e.Heal {
		b.WriteString("heal ")
	}
	b.WriteString(string(e.Kind))
	b.WriteString(" " + e.A)
	if e.B != "" {
		b.WriteString(" " + e.B)
	}
	switch {
	case e.Kind == KindSlow && !e.Heal:
		fmt.Fprintf(&b, " %dms", e.Amount)
	case e.Kind == KindLossy && !e.Heal:
		fmt.Fprintf(&b, " %d‰", e.Amount)
	}
	return b.String()
}

// Schedule is a seeded list of faults, sorted by time; every fault that
// lasts is healed by the end.
type Schedule struct {
	Seed     uint64
	Duration time.Duration
	Kinds    []Kind
	Events   []Event
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d duration %v kinds %v\n", s.Seed, s.Duration, s.Kinds)
	for _, e := range s.Events {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

// NewSchedule draws a schedule of faults of the given kinds over d from
// seed. It is a function of its arguments alone: the same seed gives the
// same schedule. Faults overlap: a new one starts every 0.3-1.5 s and
// lasting ones last 0.5-6 s, but one site never has two process faults
// (kill, pause) at once, and a link is cut once at a time.
func NewSchedule(seed uint64, d time.Duration, kinds []Kind) Schedule {
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := Schedule{Seed: seed, Duration: d, Kinds: slices.Clone(kinds)}
	busy := map[string]time.Duration{} // resource -> busy until
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	id := 0
	end := d - 500*time.Millisecond
	for t := ms(500, 1500); t < end; t += ms(300, 1500) {
		k := kinds[rng.IntN(len(kinds))]
		a := Sites[rng.IntN(len(Sites))]
		b := Sites[rng.IntN(len(Sites))]
		for b == a {
			b = Sites[rng.IntN(len(Sites))]
		}
		var res string
		switch k {
		case KindKill, KindPause:
			res = "proc:" + a
		case KindCut, KindSlow, KindLossy:
			p := pairOf(a, b)
			res = string(k) + ":" + p[0] + "-" + p[1]
			if k == KindCut {
				res = "link:" + p[0] + "-" + p[1]
			}
		case KindZKCut, KindZKDown:
			res = "zk:" + a
		case KindDiskFull:
			res = "disk:" + a
		case KindClientCut:
			res = "clients:" + a
		}
		if res != "" && busy[res] > t {
			continue
		}
		id++
		e := Event{At: t, ID: id, Kind: k, A: a}
		switch k {
		case KindCut, KindSlow, KindLossy, KindSwitchover:
			e.B = b
		}
		switch k {
		case KindSlow:
			e.Amount = 50 + rng.IntN(251)
		case KindLossy:
			e.Amount = 50 + rng.IntN(251)
		case KindFlip:
			e.Amount = rng.IntN(1 << 30) // picks the segment and the byte
		}
		s.Events = append(s.Events, e)
		if k.lasting() {
			h := e
			h.Heal, h.Amount = true, 0
			h.At = min(t+ms(500, 6000), end)
			s.Events = append(s.Events, h)
			busy[res] = h.At + 200*time.Millisecond
		}
	}
	slices.SortStableFunc(s.Events, func(x, y Event) int {
		if x.At != y.At {
			return int(x.At - y.At)
		}
		return x.ID - y.ID
	})
	return s
}

// ParseKinds reads a comma list of kinds, where "all" stands for AllKinds
// ("" is "all").
func ParseKinds(s string) ([]Kind, error) {
	if s == "" {
		s = "all"
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		switch {
		case k == "all":
			out = append(out, AllKinds...)
		case slices.Contains(AllKinds, k) || slices.Contains(ExtraKinds, k):
			out = append(out, k)
		default:
			return nil, fmt.Errorf("faultsched: unknown fault kind %q (kinds: all = %v, and %v)", k, AllKinds, ExtraKinds)
		}
	}
	return out, nil
}
