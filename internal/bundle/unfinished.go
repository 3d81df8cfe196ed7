package bundle

import (
	"context"
	"sync"
	"time"

	"metaq/internal/siterole"
)

// unfinishedFacts is what siterole.AutoRaiseFrom and LeftUnfinished know
// here, for a site that followed generation known: the newest generation
// in the ZooKeeper ensembles this bundle reaches, the newest another
// bundle of this brokerId gossips (alive or suspect; a slave's is the one
// it follows) or this site's own recorded slave role follows, a site
// gossip has as master of the newer of the two or of a newer one, and how
// long this bundle has seen that newest generation with no master of it
// (unfinishedSince), in gossip or registered in an ensemble this bundle
// reads (registeredMaster).
func (b *Bundle) unfinishedFacts(ctx context.Context, known uint64) siterole.UnfinishedFacts {
	f := b.unfinishedGossip(ctx, known)
	f.Registered = b.registeredMaster(ctx, f)
	newest, _ := f.Newest()
	f.SeenFor = b.unfinishedSeen.observe(newest, f.Masterless(), time.Now())
	return f
}

// unfinishedGossip is unfinishedFacts without SeenFor.
func (b *Bundle) unfinishedGossip(ctx context.Context, known uint64) siterole.UnfinishedFacts {
	f := siterole.UnfinishedFacts{Known: known}
	f.Seen, f.SeenAt = b.observedGeneration(ctx)
	// This site's own role counts as well: a master that stepped down for
	// a raise later given back follows a generation no ensemble holds, and
	// may be the failover candidate itself.
	if id := b.failover.openedIdentity(); id != nil {
		if g := followedGeneration(id); g > known {
			f.Followed, f.FollowedBy = g, b.Config().Site.Name
		}
	}
	if b.supersededBy > max(known, f.Followed) {
		f.Followed, f.FollowedBy = b.supersededBy, b.Config().Site.Name
	}
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return f
	}
	peers := gossipPeers(tc.Topology(), b.Config().System.BrokerID)
	for _, p := range peers {
		if !p.Self && (p.Alive || p.Suspect) && p.Generation > f.Followed {
			f.Followed, f.FollowedBy = p.Generation, p.Site
		}
	}
	newest, _ := f.Newest()
	for _, p := range peers {
		if !p.Self && p.Role == siterole.Master && (p.Alive || p.Suspect) && p.Generation >= newest {
			f.MasterOfSeen = p.Site
		}
	}
	return f
}

// unfinishedSince remembers since when this bundle has seen the newest
// generation of its brokerId with no master of it in gossip, for
// siterole.UnfinishedFacts.SeenFor.
type unfinishedSince struct {
	mu    sync.Mutex
	gen   uint64
	since time.Time
}

// observe records that gen is the newest generation seen at now,
// masterless or not, and returns how long it has been seen masterless
// (0 when a master of it is seen, or when it was not the newest before).
func (u *unfinishedSince) observe(gen uint64, masterless bool, now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !masterless {
		u.gen, u.since = 0, time.Time{}
		return 0
	}
	if gen != u.gen || u.since.IsZero() {
		u.gen, u.since = gen, now
	}
	return now.Sub(u.since)
}

// registeredMaster is the site whose ensemble (this site's own, or one
// this bundle holds a session to) has a master registered at f's newest
// generation or a newer one (registry.MasterOfGeneration), "" when none
// does or gossip already names a master of it. Each ensemble is read for
// at most 2 s.
func (b *Bundle) registeredMaster(ctx context.Context, f siterole.UnfinishedFacts) string {
	newest, _ := f.Newest()
	if b.Registry == nil || f.MasterOfSeen != "" || newest <= f.Known {
		return ""
	}
	_, ens := b.raiseEnsembles()
	for _, e := range ens {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		g, ok, err := e.reg.MasterOfGeneration(rctx, b.Config().System.BrokerID)
		cancel()
		if err == nil && ok && g >= newest {
			return e.site
		}
	}
	return ""
}
