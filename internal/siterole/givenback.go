package siterole

import "fmt"

// A raise of the generation can be given back after it won somewhere: a
// quorum raise that lost the majority, or a forced raise whose number was
// outside its site's class (the reclass branch) sets back its wins
// (registry.UndoRaise). A master that read the number in the meantime
// stepped down for it, and nothing would be master of it: the master
// follows a generation that no ensemble holds any more. The give-back
// therefore leaves a mark in the raiser node it sets back (GivenBack),
// and the master that stepped down takes mastership back at once
// (ReclaimGivenBack) instead of waiting for automatic failover to count
// the generation as left unfinished (UnfinishedAfter, then the failover
// delay: about 15 s without a master).

// EnsembleGen is what one ZooKeeper ensemble holds of the brokerId's
// generation: the number, and the number of a raise given back there
// (0 without a mark; the raiser node's GivenBack).
type EnsembleGen struct {
	Site       string // the site whose ensemble it is
	Generation uint64
	GivenBack  uint64
}

// GivenBackFacts are what a master that stepped down for generation
// Generation knows when it asks whether it may take mastership back.
type GivenBackFacts struct {
	// Generation is the generation this site stepped down for (the one
	// its role follows).
	Generation uint64
	// Own is this site's own ensemble's read; OwnRead false when it could
	// not be read.
	Own     EnsembleGen
	OwnRead bool
	// Others are the other ensembles read (by the sessions this site
	// holds).
	Others []EnsembleGen
	// Complete: the reads cover every ensemble of the deployment this
	// site knows and every [replication] sites site's ensemble.
	Complete bool
	// MasterOf is a site gossip has as master (alive or suspect) of
	// Generation or a newer one, "" when none.
	MasterOf string
}

// ReclaimGivenBack reports whether a master that stepped down for
// f.Generation may take mastership back, from which generation it raises
// (the newest any ensemble holds, a compare-and-set from it in a majority
// of the ensembles, to a number above f.Generation), and why (not). It may
// only when the number was given back for sure: an ensemble it read marks
// it given back, every ensemble of the deployment was read and holds
// less (a raise that keeps it anywhere has a master coming), and gossip
// has no master of it or of a newer one.
func ReclaimGivenBack(f GivenBackFacts) (ok bool, from uint64, why string) {
	if f.Generation == 0 {
		return false, 0, "this site stepped down for no generation"
	}
	if !f.OwnRead {
		return false, 0, "this site's own ZooKeeper ensemble could not be read"
	}
	if f.MasterOf != "" {
		return false, 0, fmt.Sprintf("site %s is master of generation %d or a newer one (gossip)", f.MasterOf, f.Generation)
	}
	if !f.Complete {
		return false, 0, "not every site's ZooKeeper ensemble could be read: a raise of the generation may be kept where this site cannot see"
	}
	marked := ""
	for _, e := range append([]EnsembleGen{f.Own}, f.Others...) {
		if e.Generation >= f.Generation {
			return false, 0, fmt.Sprintf("site %s's ZooKeeper ensemble holds generation %d", e.Site, e.Generation)
		}
		from = max(from, e.Generation)
		if e.GivenBack == f.Generation && marked == "" {
			marked = e.Site
		}
	}
	if marked == "" {
		return false, 0, fmt.Sprintf("no ZooKeeper ensemble marks generation %d given back", f.Generation)
	}
	return true, from, fmt.Sprintf("generation %d, which this master stepped down for, was given back (marked in site %s's ZooKeeper ensemble; every ensemble holds at most %d and gossip has no master of it)",
		f.Generation, marked, from)
}
