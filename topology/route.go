package topology

import (
	"context"
	"sort"
	"strings"
	"time"

	"metaq/broker/client"
)

// Replica is one copy of a brokerId's partitions as the router sees it:
// gossip liveness and health, plus the lag its master reports for it.
type Replica struct {
	// Site, Master and SlaveID identify the copy (SlaveID -1 for the master).
	Site    string
	Master  bool
	SlaveID int
	// Addr is host:port (no scheme).
	Addr string
	// Alive is gossip liveness (a suspect member is not alive here).
	Alive bool
	// Healthy is storage and replication ok.
	Healthy bool
	// LinkDown is a slave's own word that its replication link to the
	// master is down while its storage is fine (its only reason for not
	// being Healthy).
	LinkDown bool
	// Lag is the master's figure for this slave; LagKnown is false when the
	// master is not in gossip or reported no entry for it.
	Lag      LagSummary
	LagKnown bool
}

// Decision is what Choose picked and why (for logs and tests).
type Decision struct {
	Addr    string
	Site    string
	Master  bool
	SlaveID int
	// Reason names the rule that chose it, e.g. "local replica".
	Reason string
}

// RouteInput is everything Choose needs, with no I/O behind it.
type RouteInput struct {
	// Site is the consumer's site; Preference and MaxLag its read preference
	// and the largest lag it accepts (0 = any lag, but never stuck or down).
	Site       string
	Preference client.ReadPreference
	MaxLag     time.Duration
	// SiteOrder ranks other sites by nearness for NearestHealthy and for the
	// fallback after the master; sites not listed come after, by name.
	SiteOrder []string
	Replicas  []Replica
}

// usable reports whether a slave may serve reads for in: alive, healthy,
// its master reports it connected and progressing, and within MaxLag.
func usable(r Replica, in RouteInput) bool {
	if r.Master {
		return r.Alive
	}
	if !r.Alive || !r.Healthy || !r.LagKnown {
		return false
	}
	if r.Lag.State == LagStuck || r.Lag.State == LagDown {
		return false
	}
	return in.MaxLag <= 0 || r.Lag.Behind <= in.MaxLag
}

// Choose is the site-affinity rule, a pure function:
//
//   - MasterOnly: the master while it is alive.
//   - LocalFirst: a usable replica in the consumer's site (the master if the
//     site holds it), else the master, else a usable slave in the nearest
//     other site.
//   - NearestHealthy: walk the sites from the consumer's own through
//     SiteOrder; the first usable replica wins.
//
// When nothing usable is left, any alive slave is returned (reads from a lagging
// copy beat no reads, as MetaQ's client reads a slave while the master is
// gone). ok is false when no replica is alive at all.
func Choose(in RouteInput) (d Decision, ok bool) {
	var master *Replica
	bySite := map[string][]Replica{}
	for i := range in.Replicas {
		r := in.Replicas[i]
		if r.Master {
			if r.Alive {
				master = &in.Replicas[i]
			}
			continue
		}
		bySite[r.Site] = append(bySite[r.Site], r)
	}
	for _, rs := range bySite {
		// Lowest lag first, then slave id, so the choice is stable.
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].Lag.Behind != rs[j].Lag.Behind {
				return rs[i].Lag.Behind < rs[j].Lag.Behind
			}
			return rs[i].SlaveID < rs[j].SlaveID
		})
	}
	pick := func(r Replica, reason string) (Decision, bool) {
		return Decision{Addr: r.Addr, Site: r.Site, Master: r.Master, SlaveID: r.SlaveID, Reason: reason}, true
	}
	inSite := func(site string) (Replica, bool) {
		if master != nil && master.Site == site {
			return *master, true
		}
		for _, r := range bySite[site] {
			if usable(r, in) {
				return r, true
			}
		}
		return Replica{}, false
	}
	order := siteOrder(in, master, bySite)

	switch in.Preference {
	case client.LocalFirst:
		if r, ok := inSite(in.Site); ok {
			return pick(r, "local replica")
		}
		if master != nil {
			return pick(*master, "master (local replica unusable)")
		}
		for _, s := range order {
			if r, ok := inSite(s); ok {
				return pick(r, "nearest usable replica (master down)")
			}
		}
	case client.NearestHealthy:
		for _, s := range order {
			if r, ok := inSite(s); ok {
				return pick(r, "nearest usable replica")
			}
		}
	default:
		if master != nil {
			return pick(*master, "master")
		}
	}
	// Last resort: any alive slave, local first.
	for _, s := range order {
		for _, r := range bySite[s] {
			if r.Alive {
				return pick(r, "alive slave (no usable replica)")
			}
		}
	}
	return Decision{}, false
}

// siteOrder is the consumer's site, then SiteOrder, then the remaining sites
// by name.
func siteOrder(in RouteInput, master *Replica, bySite map[string][]Replica) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	add(in.Site)
	for _, s := range in.SiteOrder {
		add(s)
	}
	var rest []string
	for s := range bySite {
		rest = append(rest, s)
	}
	if master != nil {
		rest = append(rest, master.Site)
	}
	sort.Strings(rest)
	for _, s := range rest {
		add(s)
	}
	return out
}

// Replicas returns what gossip knows about brokerID's copies: its master and
// slaves with liveness, health and the master's lag figures for each slave.
// A master of an older generation than another master gossip knows (one
// that stepped down after a failover and is not yet demoted) is left out:
// what it holds beyond the promotion is not replicated and will be cut, so
// no read is routed there.
func (t *Topology) Replicas(brokerID int) []Replica {
	return replicasOf(t.Members(), brokerID)
}

func replicasOf(members []Member, brokerID int) []Replica {
	var out []Replica
	var lag map[int]LagSummary
	masterAlive := false
	var newest uint64
	for _, m := range members {
		if m.Meta.BrokerID == brokerID && m.Meta.Role == RoleMaster {
			newest = max(newest, m.Meta.Generation)
		}
	}
	superseded := func(m Member) bool { return m.Meta.Role == RoleMaster && m.Meta.Generation < newest }
	for _, m := range members {
		if m.Meta.BrokerID != brokerID || m.Meta.Role != RoleMaster || superseded(m) {
			continue
		}
		// A restarted master may appear twice (old name down, new alive):
		// prefer the alive one's figures.
		if m.State == StateAlive || lag == nil {
			lag = map[int]LagSummary{}
			for _, l := range m.Meta.Lag {
				lag[l.SlaveID] = l
			}
			masterAlive = masterAlive || m.State == StateAlive
		}
	}
	for _, m := range members {
		if m.Meta.BrokerID != brokerID || superseded(m) {
			continue
		}
		r := Replica{
			Site:    m.Meta.Site,
			Master:  m.Meta.Role == RoleMaster,
			SlaveID: m.Meta.SlaveID,
			Addr:    strings.TrimPrefix(m.Meta.ServeURL, "meta://"),
			Alive:   m.State == StateAlive,
			Healthy: m.Healthy(),
		}
		r.LinkDown = m.Meta.Role == RoleSlave && m.Meta.Health.StorageOK && !m.Meta.Health.ReplicationOK
		if r.Master {
			r.SlaveID = -1
		} else if l, ok := lag[r.SlaveID]; ok && masterAlive {
			r.Lag, r.LagKnown = l, true
		}
		out = append(out, r)
	}
	return out
}

// withClientMaster adds the master the client found in ZooKeeper when gossip
// has no master member for the broker id (a master outside the pool, such
// as a Java broker): it is taken as alive, since ZooKeeper lists it, and its
// slaves' lag is unknown, so LocalFirst keeps reading from it.
func withClientMaster(reps []Replica, known []client.Replica) []Replica {
	if len(reps) == 0 {
		return reps
	}
	for _, r := range reps {
		if r.Master {
			return reps
		}
	}
	for _, k := range known {
		if k.Master {
			return append(reps, Replica{Master: true, SlaveID: -1, Addr: strings.TrimPrefix(k.Addr, "meta://"), Alive: true, Healthy: true})
		}
	}
	return reps
}

// Router implements broker/client's Router from gossip. Create it with
// NewRouter; it is safe for concurrent use.
type Router struct {
	t *Topology
	// SiteOrder ranks other sites by nearness (see RouteInput.SiteOrder).
	SiteOrder []string
}

// NewRouter returns a Router over t's view of the pool.
func NewRouter(t *Topology, siteOrder ...string) *Router {
	return &Router{t: t, SiteOrder: siteOrder}
}

var _ client.Router = (*Router)(nil)

// Route answers which address serves req's partition. It returns
// client.ErrNoRoute when gossip knows no alive copy of the brokerId, so the
// client falls back to its own choice from ZooKeeper.
func (r *Router) Route(ctx context.Context, req client.RouteRequest) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	in := RouteInput{
		Site:       req.Site,
		Preference: req.Preference,
		MaxLag:     req.MaxLag,
		SiteOrder:  r.SiteOrder,
		Replicas:   withClientMaster(r.t.Replicas(req.BrokerID), req.Replicas),
	}
	if in.Site == "" {
		in.Site = r.t.Site()
	}
	d, ok := Choose(in)
	if !ok {
		return "", client.ErrNoRoute
	}
	return d.Addr, nil
}
