package siterole

import (
	"fmt"
	"time"
)

// UnfinishedFacts are what an automatic promotion knows about a
// generation newer than the one its site followed.
type UnfinishedFacts struct {
	// Known is the generation this site followed; Seen the newest it sees
	// in the ZooKeeper ensembles it reaches (SeenAt names where).
	Known, Seen uint64
	SeenAt      string
	// Followed is the newest generation another bundle of this brokerId
	// gossips as the one it knows (a slave's is the generation it
	// follows), FollowedBy its site: a site that stepped down for a raise
	// that was given back follows a generation no ensemble holds any more.
	Followed   uint64
	FollowedBy string
	// MasterOfSeen is a site gossip has as master (alive or only
	// suspect) of Seen or a newer generation, "" when none.
	MasterOfSeen string
	// Registered is a site whose ZooKeeper ensemble, read by this site,
	// has a master registered at Newest or a newer generation (its master
	// node was created after the generation took its value: a master's
	// mirror carries its registration into the ensembles it reaches), ""
	// when none. Gossip may not show that master (a partition between two
	// slave sites after the master was lost): the generation is finished
	// all the same.
	Registered string
	// SeenFor is how long this site has seen the newest generation
	// (Newest) with no master of it in gossip.
	SeenFor time.Duration
}

// UnfinishedAfter is how long a site must have seen a generation newer
// than the one it followed, with no master of it in gossip, before it
// counts as left unfinished. Until then the promotion that raised it may
// still be on its way: an automatic one waits out its fence (at most 3 s)
// before it registers, and gossip needs a probe or two to carry its new
// role; a site that gossip cannot reach (a partition between two slave
// sites) shows no master for longer. Raising above such a generation at
// once overrides a promotion in progress instead of losing the
// compare-and-set to it: in seed 941021 bj raised generation 6 while cut
// off from hf, hf read 6 in gz's ensemble 40 ms later, found no master of
// it and raised 8 above it, so one outage made two automatic raises and
// bj's promotion stepped down before it finished.
const UnfinishedAfter = 10 * time.Second

// AutoRaiseFrom is the generation an automatic promotion raises from
// (with a compare-and-set, in a majority of the ensembles), and why when
// it is not the one this site followed. A generation newer than Known
// that no site is master of in gossip was raised by a promotion that
// never finished (its site was killed after the raise and came back
// without it, or gave it up unmarked): nobody will be its master, and
// waiting for one leaves the brokerId without a master for good. The
// automatic promotion, which acts only once the master is lost by the
// dead-master rule, raises above it. While gossip has a master of it,
// the promotion raises from Known and loses (the generation moved): this
// site follows that master instead.
func AutoRaiseFrom(f UnfinishedFacts) (uint64, string) {
	seen, at := f.Newest()
	if !LeftUnfinished(f) {
		return f.Known, ""
	}
	return seen, fmt.Sprintf("generation %d (%s) is newer than the %d this site followed and no site is its master: "+
		"the promotion that raised it never finished; raising above it", seen, at, f.Known)
}

// Newest is the newest generation f names and where: Seen (in an
// ensemble) or Followed (by a site, in gossip).
func (f UnfinishedFacts) Newest() (uint64, string) {
	if f.Followed > f.Seen {
		return f.Followed, "followed by site " + f.FollowedBy + " in gossip"
	}
	return f.Seen, f.SeenAt
}

// LeftUnfinished reports whether a generation newer than the one this
// site followed was left unfinished: seen in an ensemble this site
// reaches or followed by another site in gossip (wherever it is seen),
// with no site master of it in gossip (MasterOfSeen names a master of
// Newest or a newer one) and no master registered at it in an ensemble
// this site reads (Registered), for at least UnfinishedAfter.
// DeadMasterFacts.Unfinished is this.
func LeftUnfinished(f UnfinishedFacts) bool {
	seen, _ := f.Newest()
	return seen > f.Known && f.Masterless() && f.SeenFor >= UnfinishedAfter
}

// Masterless reports whether f knows no master of its newest generation
// (or a newer one): none in gossip, none registered in an ensemble read.
func (f UnfinishedFacts) Masterless() bool {
	return f.MasterOfSeen == "" && f.Registered == ""
}
