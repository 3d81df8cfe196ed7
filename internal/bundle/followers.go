package bundle

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"metaq/internal/siterole"
)

// defaultFollowWait bounds how long `switchover` and `promote` wait for
// the slave sites to follow the new master before they report the ones
// that did not (followWait=<duration> on the admin call changes it).
const defaultFollowWait = 10 * time.Second

// FollowerReport is one slave site of the brokerId after a change of
// master: whether it follows the new master, and why not.
type FollowerReport struct {
	Site    string `json:"site"`
	SlaveID int    `json:"slaveId"`
	// Self: this site (an old master that stepped down).
	Self      bool `json:"self,omitempty"`
	Following bool `json:"following"`
	// OldMaster: not a slave site but the master this change replaced,
	// down (or paused) as gossip sees it: it follows once it runs again
	// (a returning master starts as a slave), so nobody waits for it and
	// it does not make the change fail.
	OldMaster bool   `json:"oldMaster,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// followWait is the admin call's followWait parameter, defaultFollowWait
// when absent.
func followWait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("followWait")
	if v == "" {
		return defaultFollowWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("followWait=%q: want a duration such as 10s", v)
	}
	return d, nil
}

// awaitFollowers waits up to bound (or until ctx ends) for every slave
// site of this brokerId to follow the master of generation gen, and
// reports each; note says what could not be checked.
func (b *Bundle) awaitFollowers(ctx context.Context, gen uint64, bound time.Duration) ([]FollowerReport, string) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		reps, note := b.followers(gen)
		done := true
		for _, r := range reps {
			done = done && (r.Following || r.OldMaster)
		}
		if done {
			return reps, note
		}
		select {
		case <-ctx.Done():
			for _, r := range reps {
				if !r.Following && !r.OldMaster {
					b.log.Warn("FAILOVER: a slave site does not follow the new master", "site", r.Site, "slaveId", r.SlaveID,
						"generation", gen, "within", bound, "why", r.Reason)
				}
			}
			return reps, note
		case <-tk.C:
		}
	}
}

// followers is, once, whether each slave site follows the master of
// generation gen: this site by its receiver when it is a slave, the others
// by the new master's shipper when this site is it, else by gossip.
func (b *Bundle) followers(gen uint64) ([]FollowerReport, string) {
	var out []FollowerReport
	mySite := b.Config().Site.Name
	role := b.Role()
	if role.Role == siterole.Slave {
		out = append(out, b.selfFollows(gen, role))
	}
	connected := map[int]bool{}
	if s := b.runningShipper(); s != nil && role.IsMaster() {
		for _, g := range s.Lag() {
			if g.Connected {
				connected[g.SlaveID] = true
			}
		}
	}
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return out, "gossip is off: other slave sites are not checked"
	}
	for _, p := range gossipPeers(tc.Topology(), b.Config().System.BrokerID) {
		if p.Self || p.Site == mySite || (p.Role == siterole.Master && p.Alive && p.Generation >= gen) {
			continue // this site, or the new master
		}
		if p.Role == siterole.Master && !p.Alive && p.Generation < gen {
			// The master a promotion replaced, dead or paused: it is no slave
			// site yet, and the kill -9 or pause that made the promotion
			// necessary is not the promotion's failure.
			out = append(out, FollowerReport{Site: p.Site, OldMaster: true,
				Reason: fmt.Sprintf("the old master (generation %d) is down (gossip): it follows the new master once it runs again", p.Generation)})
			continue
		}
		ok, why := siterole.Follows(p, gen)
		if !ok && p.Role == siterole.Slave && connected[p.SlaveID] {
			ok, why = true, "" // its link to this master is up; gossip lags
		}
		out = append(out, FollowerReport{Site: p.Site, SlaveID: p.SlaveID, Following: ok, Reason: why})
	}
	return out, ""
}

// selfFollows is whether this site (a slave now) follows the master of
// generation gen over its replication link.
func (b *Bundle) selfFollows(gen uint64, role siterole.State) FollowerReport {
	fr := FollowerReport{Site: b.Config().Site.Name, SlaveID: role.SlaveID, Self: true}
	rc := b.receiver()
	if rc == nil {
		fr.Reason = "no slave replication runs here"
		return fr
	}
	r := rc.Receiver()
	if r == nil {
		method, why := rc.Method()
		fr.Reason = fmt.Sprintf("no replication stream runs (method %q: %s)", method, why)
		return fr
	}
	st := r.Status()
	var known uint64
	if id, err := b.identity(); err == nil {
		known = id.Generation()
	}
	switch {
	case st.Connected && known >= gen:
		fr.Following = true
	case st.LastError != "":
		fr.Reason = st.LastError
	case st.Connected:
		fr.Reason = fmt.Sprintf("it follows the master of generation %d", known)
	default:
		fr.Reason = "not connected to the new master yet"
	}
	return fr
}
