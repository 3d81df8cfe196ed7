package bundle

import (
	"context"

	"metaq/internal/siterole"
)

// unfinishedFacts is what siterole.AutoRaiseFrom and LeftUnfinished know
// here, for a site that followed generation known: the newest generation
// in the ZooKeeper ensembles this bundle reaches, the newest another
// bundle of this brokerId gossips (alive or suspect; a slave's is the one
// it follows), and a site gossip has as master of the newer of the two or
// of a newer one.
func (b *Bundle) unfinishedFacts(ctx context.Context, known uint64) siterole.UnfinishedFacts {
	f := siterole.UnfinishedFacts{Known: known}
	f.Seen, f.SeenAt = b.observedGeneration(ctx)
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
