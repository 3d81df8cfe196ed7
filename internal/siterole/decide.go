package siterole

import (
	"fmt"
	"time"
)

// Peer is what gossip says about one bundle of this brokerId at another
// site (or this one, Self).
type Peer struct {
	Site    string
	Self    bool
	Role    Role
	SlaveID int // a slave's
	Alive   bool
	// Suspect: gossip's probes of it failed but it is not yet declared
	// down; it may well be alive (a loaded machine, a slow link).
	Suspect    bool
	Generation uint64
	// Follows: a slave that gossips that it reaches its master.
	Follows bool
	// LogPos is the master log position a slave applied.
	LogPos int64
	// DownFor is how long gossip has had it suspect or down (0 while
	// alive): a bundle declared down under load may well be alive, and
	// its last gossiped facts (Follows, LogPos) are then all there is.
	DownFor time.Duration
}

// SiblingDownFinal is how long a slave site gossip declared down (or
// suspects) must have been so before its last gossiped position counts as
// final although it was last seen following the master: until then it may
// be alive and still applying the master's log (a false "down" on a loaded
// machine), and a promotion of another site could drop what it holds. A
// site down that long is gone (gossip reaps dead members after about as
// long) and DownSiblingAhead judges it by its last position.
const SiblingDownFinal = 30 * time.Second

// PositionFinal reports whether the slave site p's log position is final
// (it applies nothing more of the old master's log), and why not: an alive
// site that still follows the master is not; nor is one suspected or
// declared down whose last gossip said it followed, until it has been so
// for SiblingDownFinal (gossip cannot tell a loaded site from a dead one,
// and a site still following may be applying more than it last said).
func PositionFinal(p Peer) (bool, string) {
	if !p.Follows {
		return true, ""
	}
	if p.Alive {
		return false, fmt.Sprintf("slave site %s still follows the master (its position is not final)", p.Site)
	}
	state := "declared down"
	if p.Suspect {
		state = "suspected"
	}
	if p.DownFor < SiblingDownFinal {
		return false, fmt.Sprintf("slave site %s, %s by gossip %v ago, was last seen following the master: it may still be applying its log "+
			"(a false down under load), its position %d is not final", p.Site, state, p.DownFor.Round(time.Millisecond), p.LogPos)
	}
	return true, ""
}

// ZooKeeperFact is what this site's ZooKeeper says about the brokerId's
// master node.
type ZooKeeperFact struct {
	Enabled bool
	// Err is why it could not be read ("" when it was).
	Err string
	// MasterRegistered: ids/<brokerId>/master exists, held by another
	// session than this site's; Path names it.
	MasterRegistered bool
	Path             string
}

// LossFacts are what a slave site knows when it asks whether its master is
// lost.
type LossFacts struct {
	Site string // this site
	// Connected: this site's replication link reaches the master.
	Connected bool
	// KnownGeneration is the generation this site followed.
	KnownGeneration uint64
	// FenceSites is [replication] fenceSites: the sites of this brokerId
	// counted for a majority when gossip knows fewer. ListedSites is the
	// number of sites [replication] sites lists (0 without the list),
	// counted likewise: gossip drops members it declared down a while
	// after, and a site cut off from the others must not take the sites
	// it still knows for the whole deployment.
	FenceSites  int
	ListedSites int
	Peers       []Peer
	ZooKeeper   ZooKeeperFact
	// DeadMaster is what this site knows about the master whose node
	// ZooKeeper may still hold (FenceDeadMaster).
	DeadMaster DeadMasterFacts
}

// MasterLost reports whether the master is gone, and why (or why not): a
// majority of the sites of this brokerId agree (by gossip: the master's
// bundle declared down, not merely suspected; slave sites that lost it),
// the master is a dead one by
// the rule a promote without -force follows (FenceDeadMaster: link down,
// gossip declared it down, silent past the acknowledgement bound), and
// this site's ZooKeeper agrees: it has no master node, or the node is held
// by that dead master's session (the promotion raises the generation and
// takes the node instead of waiting for the session to expire). With one
// ZooKeeper per site a missing node proves little (the master's mirror may
// not have reached this site's ensemble), hence the dead-master rule in
// every case. A master of a newer generation alive anywhere means the
// master is not lost: another site took over.
//
// The master declared down counts for its site only when another slave
// site backs it: one gossip has alive (the part of the deployment this
// site reaches declared the master down), or one whose last gossip, before
// it was declared down or suspected, said it had lost the master too. A
// site cut off from every other site's gossip and from its replication link
// sees every other bundle declared down, the master's included, whether
// they died or it is the one cut off; with the other slave sites last seen
// following the master, counting the master's site with its own made a
// majority of three out of that one site's view, and it deposed a master
// the other sites still reached (its raise wins where it reaches a majority
// of the ensembles). With two sites in all no third tells the two apart,
// and the master's site counts as before: automatic failover there takes
// the master's death from one site's view.
func MasterLost(f LossFacts) (bool, string) {
	if f.Connected {
		return false, "this site reaches its master"
	}
	sites, agree := map[string]bool{f.Site: true}, map[string]bool{f.Site: true}
	downMasters := map[string]bool{} // sites of master bundles gossip declared down
	backed := false                  // another slave site backs the master's loss
	for _, p := range f.Peers {
		if p.Self {
			continue
		}
		if p.Role == Master && p.Alive && p.Generation > f.KnownGeneration {
			return false, fmt.Sprintf("site %s is master of generation %d, newer than the %d this site followed", p.Site, p.Generation, f.KnownGeneration)
		}
		sites[p.Site] = true
		backed = backed || (p.Role == Slave && p.Site != f.Site && (p.Alive || !p.Follows))
		switch {
		case p.Role == Master && !p.Alive && !p.Suspect:
			// A master gossip only suspects (its probes failed on a
			// loaded machine or a slow link) is no vote: the dead-master
			// rule below would refuse it anyway, for not being declared
			// down.
			downMasters[p.Site] = true
		case p.Role == Slave && p.Alive && !p.Follows:
			agree[p.Site] = true
		}
	}
	total := max(len(sites), f.FenceSites, f.ListedSites)
	unbacked := ""
	if backed || total <= 2 {
		for site := range downMasters {
			agree[site] = true
		}
	} else if len(downMasters) > 0 {
		unbacked = "; the master's bundle declared down is not counted: no other slave site is alive in gossip or was last seen having lost the master, so this site may be the one cut off"
	}
	if !Majority(len(agree), total) {
		return false, fmt.Sprintf("%d of %d sites agree the master is lost%s", len(agree), total, unbacked)
	}
	if ok, why := FenceDeadMaster(f.DeadMaster); !ok {
		return false, fmt.Sprintf("%d of %d sites agree the master is lost, but it is not known to be dead: %s", len(agree), total, why)
	}
	z := f.ZooKeeper
	switch {
	case !z.Enabled:
		return false, "ZooKeeper is off: automatic failover needs this site's ZooKeeper to agree"
	case z.Err != "":
		return false, "this site's ZooKeeper cannot be read: " + z.Err
	case z.MasterRegistered:
		return true, fmt.Sprintf("%d of %d sites agree the master is lost, and the master node in this site's ZooKeeper (%s) is held by a dead master's session (fenced by generation)", len(agree), total, z.Path)
	}
	return true, fmt.Sprintf("%d of %d sites and this site's ZooKeeper agree the master is lost", len(agree), total)
}

// Majority reports whether votes of total is more than half.
func Majority(votes, total int) bool { return 2*votes > total }

// gossipedPos is a slave's own log position as gossip carries it to the
// other sites: a slave that runs no stream receiver (one waiting for a
// master node) has none, -1, and gossips 0. Each site must judge itself by
// the number the others judge it by: with -1 against its siblings' 0, every
// waiting site counted every other as ahead and named another site as the
// candidate (bj named gz, gz and hf named bj), and no site was ever
// promoted.
func gossipedPos(pos int64) int64 { return max(pos, 0) }

// Candidate is the slave site automatic failover promotes: of this site
// (at selfPos, read as gossip carries it: gossipedPos) and the slave
// sites that lost the master and are alive or only suspected, the one with the highest log position, ties to the
// lowest site name. A suspected sibling still counts: treating it as gone
// would let two sites each decide they are the candidate, and promote the
// one that is behind. So does one suspected or declared down whose
// position is not final (PositionFinal: last seen following the master,
// not down for long): it may be alive and ahead.
func Candidate(self string, selfPos int64, peers []Peer) string {
	best, bestPos := self, gossipedPos(selfPos)
	for _, p := range peers {
		if p.Self || p.Site == self || p.Role != Slave {
			continue
		}
		final, _ := PositionFinal(p)
		switch {
		case p.Alive && p.Follows: // it has not lost the master
			continue
		case !p.Alive && !p.Suspect && (final || restarted(p, peers)): // gone: DownSiblingAhead's
			continue
		}
		if p.LogPos > bestPos || (p.LogPos == bestPos && p.Site < best) {
			best, bestPos = p.Site, p.LogPos
		}
	}
	return best
}

// restarted reports whether the down bundle p's site has another bundle
// of the brokerId that gossip has alive or suspect: a restarted bundle
// gossips under a new member, and the old one lingers, down, until gossip
// reaps it. The site is judged by the live one.
func restarted(p Peer, peers []Peer) bool {
	for _, q := range peers {
		if q.Site == p.Site && (q.Alive || q.Suspect) {
			return true
		}
	}
	return false
}

// SiblingAhead is why this site, having applied the old master's log up to
// applied, is not the one to promote: an alive or suspected slave site that
// applied more after losing the master, or one whose position is not final
// (PositionFinal: it still follows the master, or gossip declared it down
// or suspects it while it was last seen following). "" when none is. A
// site down with a final position is DownSiblingAhead's.
func SiblingAhead(self string, applied int64, peers []Peer) string {
	applied = gossipedPos(applied)
	for _, p := range peers {
		if p.Self || p.Site == self || p.Role != Slave || (!p.Alive && !p.Suspect && restarted(p, peers)) {
			continue
		}
		if final, why := PositionFinal(p); !final {
			return why
		}
		if (p.Alive || p.Suspect) && p.LogPos > applied {
			return fmt.Sprintf("slave site %s applied the master's log up to %d, this site up to %d", p.Site, p.LogPos, applied)
		}
	}
	return ""
}

// DownSiblingAhead is why automatic failover must not promote this site,
// which applied the master's log of generation gen up to applied: a slave
// site of that generation that gossip declared down was last seen having
// applied more of it. Promoting this site would drop what only that site
// holds, synchronous puts the master acknowledged with it among them (the
// master needed one slave site, not this one). An operator who knows that
// site is gone for good promotes with -force. "" when none is.
func DownSiblingAhead(self string, applied int64, gen uint64, peers []Peer) string {
	applied = gossipedPos(applied)
	for _, p := range peers {
		if p.Self || p.Site == self || p.Role != Slave || p.Alive || p.Suspect || p.Generation != gen {
			continue
		}
		if p.LogPos > applied {
			return fmt.Sprintf("slave site %s, down now, was last seen having applied the master's log up to %d, this site up to %d: "+
				"it may hold acknowledged puts this site lacks; bring it back, or promote -force to drop them", p.Site, p.LogPos, applied)
		}
	}
	return ""
}

// AckFacts are what a master knows when it asks whether it may acknowledge
// a put.
type AckFacts struct {
	State State
	// Fenced: the shipper's lease is lost (fenceSites) or it saw a newer
	// generation.
	Fenced bool
	// ZooKeeper: the generation is read from ZooKeeper (it is on); then
	// ConfirmedAt is when a read last showed the generation this master
	// holds, and MaxUnconfirmed how old that may be.
	ZooKeeper      bool
	ConfirmedAt    time.Time
	MaxUnconfirmed time.Duration
	Now            time.Time
	// Standalone: no other site could have been promoted (no slave site
	// ever followed this master, no failover happened, no fenceSites): a
	// plain MetaQ broker keeps taking puts while its ZooKeeper is away.
	Standalone bool
	// Promoting: State is still the slave this site was, but a promotion
	// under way raised the generation and ships at it. A switchover's new
	// master opens its writes before ZooKeeper names it (the old master
	// passes its held puts on then): it acknowledges as that generation's
	// master, under the same checks, until the promotion sets its role.
	Promoting bool
}

// MayAcknowledge reports whether a master may acknowledge puts, and why
// not: a slave, a master that stepped down or is fenced, and a master that
// could not confirm its generation recently (another site may have been
// promoted meanwhile: a paused or cut-off master) acknowledge nothing.
func MayAcknowledge(f AckFacts) (bool, string) {
	switch {
	case f.State.Role != Master && !f.Promoting:
		return false, "this site is a slave"
	case f.State.SteppedDown:
		return false, "this master stepped down: " + f.State.Why
	case f.Fenced:
		return false, "this master is fenced"
	case !f.ZooKeeper, f.Standalone:
		return true, ""
	case f.ConfirmedAt.IsZero():
		return false, "this master has not confirmed its generation in ZooKeeper yet"
	case f.Now.Sub(f.ConfirmedAt) > f.MaxUnconfirmed:
		return false, fmt.Sprintf("this master could not confirm its generation %d in ZooKeeper for %v", f.State.Generation, f.Now.Sub(f.ConfirmedAt).Round(time.Millisecond))
	}
	return true, ""
}

// AwaitsConfirmation reports whether MayAcknowledge refuses f only for
// want of a recent confirmation of the generation: a master that did not
// step down, is not fenced, reads its generation from ZooKeeper and could
// have been replaced, and has not confirmed it yet (just started) or not
// recently (paused, cut off from its ZooKeeper). Such a master confirms
// it within moments as a rule, so its puts may wait for it (held, bounded)
// instead of being refused; any other refusal is answered at once.
func AwaitsConfirmation(f AckFacts) bool {
	if ok, _ := MayAcknowledge(f); ok {
		return false
	}
	return (f.State.Role == Master || f.Promoting) && !f.State.SteppedDown && !f.Fenced && f.ZooKeeper && !f.Standalone
}

// Follows reports whether the slave site p follows the master of
// generation gen, and why not: a bundle gossip does not see alive, one that
// is a master, one that does not reach its master, or one that still
// follows an older generation.
func Follows(p Peer, gen uint64) (bool, string) {
	switch {
	case !p.Alive:
		return false, "its bundle is not alive (gossip)"
	case p.Role == Master:
		return false, fmt.Sprintf("it is a master (generation %d), not a slave", p.Generation)
	case !p.Follows:
		return false, "it does not reach its master (gossip)"
	case p.Generation < gen:
		return false, fmt.Sprintf("it still follows the master of generation %d", p.Generation)
	}
	return true, ""
}

// DeadMasterFacts are what a slave site knows about a master whose node
// in its ZooKeeper is still held by a live session.
type DeadMasterFacts struct {
	// Connected: this site's replication link reaches the master.
	Connected bool
	// Gossip: gossip runs here; MasterDown: it declared the master's
	// bundle of this brokerId down (not merely suspect).
	Gossip, MasterDown bool
	// NoMaster: gossip has no member that is a master of this brokerId
	// (alive, suspect or down), while it has live members other than
	// this bundle: a master that restarted as a slave gossips under a new
	// node, and its old one is reaped GossipToTheDeadTime after it was
	// declared down, or was never known to a bundle that joined later.
	NoMaster bool
	// Unfinished: this site sees a generation newer than the one it
	// followed that no site is master of (a promotion raised it and never
	// finished), in an ensemble or followed by a site in gossip
	// (LeftUnfinished). Only then does NoMaster stand for a dead master: at a
	// cold start the slaves' gossip has no master either, until the
	// master, started after them, joins.
	Unfinished bool
	// Silent is how long the master has sent this site nothing (0 when
	// unknown); AckBound is how long a master acknowledges puts without
	// confirming its generation (MayAcknowledge's MaxUnconfirmed).
	Silent, AckBound time.Duration
	// NeverHeardFor is how long this site's receiver has run without
	// ever hearing from a master (0 when it heard from one, or is not
	// known): a lower bound of the master's silence when Silent is 0.
	NeverHeardFor time.Duration
}

// FenceDeadMaster reports whether a promotion may take the master node
// from the session that holds it, raising the generation instead of
// waiting for the session to expire, and why not. It may when the link is
// down, gossip declared the master down (or has no master of this
// brokerId at all while it has live members and a newer generation was
// left unfinished), and the master has been
// silent for longer than a master acknowledges without confirming its
// generation (a receiver that never heard from a master since it started
// counts the time since then): if it is in fact alive (paused, cut off),
// its confirmation is stale, it acknowledges nothing, and its next read
// shows the newer generation.
func FenceDeadMaster(f DeadMasterFacts) (bool, string) {
	silent := f.Silent
	if silent == 0 {
		silent = f.NeverHeardFor
	}
	switch {
	case f.Connected:
		return false, "the replication link to the master is up"
	case !f.Gossip:
		return false, "gossip is off: nothing but the session's expiry tells that the master is down"
	case !f.MasterDown && !f.NoMaster:
		return false, "gossip has not declared the master's bundle down"
	case !f.MasterDown && !f.Unfinished:
		return false, "gossip has no master of this brokerId, but no generation newer than the one this site followed was left unfinished: " +
			"a master that has not joined gossip yet (started after its slaves) is not a dead one"
	case silent == 0:
		return false, "this site does not know how long the master has been silent"
	case silent <= f.AckBound:
		return false, fmt.Sprintf("the master has been silent for %v, not longer than the %v a master acknowledges without confirming its generation", silent.Round(time.Millisecond), f.AckBound)
	}
	return true, ""
}

// RaiseTally is how a promotion's raise of the generation went across the
// deployment's ZooKeeper ensembles (one per site in deploy/'s layout): the
// number of distinct ensembles known (Ensembles, this site's included),
// how many this site reached, and in how many its compare-and-set from the
// generation it followed won.
type RaiseTally struct {
	Ensembles, Reached, Won int
	// Class is what the class rule needs to know about the raise (zero:
	// no [replication] sites list, the rule does not apply).
	Class ClassFacts
}

// RaiseWon decides whether a promotion that is not forced owns the
// generation it raised: only when it won the compare-and-set in a majority
// of all the deployment's ensembles, reached or not (each ensemble's
// compare-and-set has one winner, so two sites cannot both own it). With
// a single ensemble (one shared by every site) winning there is enough.
// need is the number of wins that make a majority.
//
// A majority is not enough when the raise did not win in every listed
// site's ensemble and its number is outside its site's class
// (ClassAllows): a forced raise cut off from that majority may own the
// same number in its own ensemble. The caller raises again at its class's
// number.
func RaiseWon(t RaiseTally) (ok bool, need int, why string) {
	total := max(t.Ensembles, 1)
	need = total/2 + 1
	if t.Won >= need {
		if ok, why := ClassAllows(t.Class); !ok {
			return false, need, fmt.Sprintf("won the generation in %d of %d ZooKeeper ensembles, but %s", t.Won, total, why)
		}
		return true, need, fmt.Sprintf("won the generation in %d of %d ZooKeeper ensembles (%d reached; %d make a majority)", t.Won, total, t.Reached, need)
	}
	return false, need, fmt.Sprintf("won the generation in %d of %d ZooKeeper ensembles (%d reached); %d make a majority", t.Won, total, t.Reached, need)
}

// EnsembleRaise is how one ZooKeeper ensemble answered a forced raise of
// the generation (promote -force, or a switchover's new master).
type EnsembleRaise int

const (
	// NotReached: the ensemble could not be written (no session, or the
	// write failed without ZooKeeper's answer that it was not applied).
	NotReached EnsembleRaise = iota
	// RaisedHere: the compare-and-set to the target generation won there.
	RaisedHere
	// TakenHere: the ensemble holds the target generation, or a newer one,
	// raised by someone else: the number is taken.
	TakenHere
	// UnknownHere: the answer was lost and reading back did not tell
	// whether the write committed.
	UnknownHere
)

// ForcedRaise is a forced raise's answers: its own site's ensemble's and
// the other ensembles' it tried, in the order it tried them.
type ForcedRaise struct {
	Own    EnsembleRaise
	Others []EnsembleRaise
	// Class is what the class rule needs to know about the raise (zero:
	// no [replication] sites list, the rule does not apply).
	Class ClassFacts
}

// ForcedVerdict is what a forced raise does with its answers.
type ForcedVerdict int

const (
	// ForcedOwns: the raise owns the generation.
	ForcedOwns ForcedVerdict = iota
	// ForcedRetry: another raise holds the number (or a newer one) in an
	// ensemble this one reached: give back every win and raise again above
	// the highest generation seen.
	ForcedRetry
	// ForcedFail: this site's own ensemble was not reached (nothing can be
	// registered without it): give back every win and fail.
	ForcedFail
	// ForcedUnknown: whether the raise committed in this site's own
	// ensemble is not known: give back the other wins; whoever reads the
	// own ensemble later learns it (registry.RaiseOutcome).
	ForcedUnknown
	// ForcedReclass: the raise would own its number without having won in
	// every listed site's ensemble, and the number is outside this site's
	// class (ClassAllows): give back every win and raise again at the
	// next number of this site's class (ClassGeneration).
	ForcedReclass
)

// ForcedRaiseVerdict decides a forced raise of the generation to one
// above every generation it saw. A forced promotion must work while other
// sites' ensembles are unreachable (that is what -force is for), so it
// does not need a majority; but it owns the number only when it won in
// its own ensemble and lost in none it reached: a number another raise
// holds anywhere this site reaches is never reused. Each ensemble's
// compare-and-set has one winner, so two forced raises of one number that
// reach a common ensemble never both own it (each tries its own site's
// ensemble first, and stops there when it did not raise it there, then the
// others in one order, by site). Ensembles not reached get
// the number later from the master's mirror. Two forced raises that reach
// no ensemble in common (a partition) never take one number when
// [replication] sites lists the deployment's sites: a raise that did not
// win in every listed site's ensemble owns only a number of its own
// site's class (ClassAllows; ForcedReclass otherwise). Without the list
// they can; a finisher that finds another site master of its generation
// gives it up then (SharedGeneration).
func ForcedRaiseVerdict(r ForcedRaise) (ForcedVerdict, string) {
	won, reached := 0, 0
	for _, e := range append([]EnsembleRaise{r.Own}, r.Others...) {
		switch e {
		case TakenHere:
			return ForcedRetry, "another raise holds the generation (or a newer one) in an ensemble this site reaches"
		case RaisedHere:
			won++
			reached++
		case UnknownHere:
			reached++
		}
	}
	switch r.Own {
	case NotReached:
		return ForcedFail, "this site's own ZooKeeper ensemble could not be written"
	case UnknownHere:
		return ForcedUnknown, "whether the raise committed in this site's own ZooKeeper ensemble is not known"
	}
	if ok, why := ClassAllows(r.Class); !ok {
		return ForcedReclass, why
	}
	return ForcedOwns, fmt.Sprintf("raised in %d of the %d ZooKeeper ensembles tried (%d not reached; the master's mirror carries it there)",
		won, 1+len(r.Others), 1+len(r.Others)-reached)
}

// NextForcedGeneration is the generation a forced raise tries: one above
// the generation this site knows and every generation it saw (in any
// ensemble it reaches, or gossiped by a master). A raise that cannot reach
// every listed site's ensemble tries ClassGeneration of it instead.
func NextForcedGeneration(known uint64, seen ...uint64) uint64 {
	top := known
	for _, g := range seen {
		top = max(top, g)
	}
	return top + 1
}

// SharedGenFacts are what the finisher of a promotion that raised
// generation Generation, and is not master yet, knows about another site
// holding the same number.
type SharedGenFacts struct {
	Site       string // this site
	Generation uint64
	// OtherMaster is a site other than this one that is master of
	// Generation (gossip), "" when none is known.
	OtherMaster string
	// OtherRaiser is a site other than this one that an ensemble this
	// site reaches names as the raiser of Generation (not given up), ""
	// when none does.
	OtherRaiser string
	// TookPuts: this site took puts at Generation (a switchover's held
	// puts reached it): it alone holds them.
	TookPuts bool
}

// SharedGenAction is what a finisher does about a shared generation.
type SharedGenAction int

const (
	// KeepFinishing: no other site holds the generation, or this one
	// keeps it (the other gives it up).
	KeepFinishing SharedGenAction = iota
	// GiveUpAndFollow: give the generation up and follow the other site.
	GiveUpAndFollow
	// RaiseAgain: raise a newer generation (forced rule) and finish at it.
	RaiseAgain
)

// SharedGeneration decides what the finisher of a promotion does when
// another site holds its generation (two forced raises that reached no
// ensemble in common). A finisher that took no puts at it gives it up
// and follows when the other site is master of it, or when the other is
// only its raiser and has the lower name (both finishers decide the same
// way, so exactly one keeps it). A finisher that took puts at it alone
// holds them: it raises a newer generation instead, and the other master
// steps down for it.
func SharedGeneration(f SharedGenFacts) (SharedGenAction, string) {
	other := f.OtherMaster
	if other == "" {
		other = f.OtherRaiser
	}
	switch {
	case other == "" || other == f.Site:
		return KeepFinishing, ""
	case f.TookPuts:
		return RaiseAgain, fmt.Sprintf("site %s holds generation %d too, and this site took puts at it: raising a newer generation", other, f.Generation)
	case f.OtherMaster != "" && f.OtherMaster != f.Site:
		return GiveUpAndFollow, fmt.Sprintf("site %s is master of generation %d, which this site raised too: giving it up and following %s", f.OtherMaster, f.Generation, f.OtherMaster)
	case f.OtherRaiser < f.Site:
		return GiveUpAndFollow, fmt.Sprintf("site %s raised generation %d too and keeps it (the lower name): giving it up and following", f.OtherRaiser, f.Generation)
	}
	return KeepFinishing, fmt.Sprintf("site %s raised generation %d too and gives it up (this site has the lower name)", f.OtherRaiser, f.Generation)
}

// ClassFacts are what the class rule (ClassAllows) knows about a raise of
// the generation to Generation by Site.
//
// With one ZooKeeper ensemble per site, a raise that cannot write every
// site's ensemble cannot tell that another site, cut off from it, raises
// the same number in the ensembles it does not reach (a partition with
// -force on both sides; a forced raise on one side, a majority on the
// other). [replication] sites lists the deployment's sites, the same file
// everywhere (configsync keeps it so): sorted, they give each site an
// ordinal, and the generations n with n mod len(Sites) == ordinal are that
// site's class. Two different sites' classes share no number, so two raises
// that each own only numbers of their own class, or that won in every
// listed site's ensemble (where each compare-and-set has one winner, so
// any other raise of that number lost somewhere), never own one number.
type ClassFacts struct {
	Site       string
	Sites      []string // [replication] sites; empty: not configured
	Generation uint64
	// Complete: the raise won in the ensemble of every site in Sites.
	Complete bool
}

// ClassAllows reports whether a raise may own its number by the class
// rule (see ClassFacts), and why not: it may when no list is configured,
// when it won in every listed site's ensemble, or when the number is in
// its site's class.
func ClassAllows(f ClassFacts) (bool, string) {
	if len(f.Sites) == 0 || f.Complete {
		return true, ""
	}
	ord, ok := SiteOrdinal(f.Site, f.Sites)
	if !ok {
		return false, fmt.Sprintf("site %s is not in [replication] sites %v: it may own no generation it did not win in every listed site's ZooKeeper ensemble", f.Site, f.Sites)
	}
	if m := uint64(len(f.Sites)); f.Generation%m != uint64(ord) {
		return false, fmt.Sprintf("it did not win generation %d in every listed site's ZooKeeper ensemble, and %d is not in this site's class (%d mod %d = %d, this site's ordinal in [replication] sites is %d)",
			f.Generation, f.Generation, f.Generation, m, f.Generation%m, ord)
	}
	return true, ""
}

// SiteOrdinal is site's index in the sorted list sites (which need not be
// sorted), false when it is not listed.
func SiteOrdinal(site string, sites []string) (int, bool) {
	ord, found := 0, false
	for _, s := range sites {
		if s == site {
			found = true
		} else if s < site {
			ord++
		}
	}
	return ord, found
}

// ClassGeneration is the smallest generation at or above next in site's
// class (see ClassFacts), and false when the class rule does not apply:
// sites is empty or does not list site (next is returned).
func ClassGeneration(next uint64, site string, sites []string) (uint64, bool) {
	ord, ok := SiteOrdinal(site, sites)
	if !ok {
		return next, false
	}
	m := uint64(len(sites))
	return next + (uint64(ord)+m-next%m)%m, true
}

// ConfirmFacts are what a master knows when it asks whether a round of
// reads of the generation confirms the one it holds, which lets it
// acknowledge puts for the acknowledgement bound (MayAcknowledge).
type ConfirmFacts struct {
	Site string
	// Sites is [replication] sites (empty: not configured).
	Sites []string
	// Generation is the generation this master holds.
	Generation uint64
	// Returning: this master has no confirmation within the bound, and
	// did not raise its generation itself just now: it was started (the
	// unit's command after a crash or a stop), or paused (SIGSTOP, a
	// frozen VM) or cut off from its ZooKeeper for longer than the bound.
	// Another site may have been promoted meanwhile, in ensembles this
	// site's does not hear from.
	Returning bool
	// Read is the generation this round read in each site's ensemble it
	// reached, by site: this site's own, a site that shares this site's
	// ensemble (the same read), and the other sites' ensembles it holds
	// a session to.
	Read map[string]uint64
}

// RoundState is where a round of reads of the generation (the other
// sites' ensembles read concurrently) stands: RoundWait for more answers,
// RoundGrace to give the reads still out a short grace and then decide
// without them, RoundDone to decide now.
type RoundState int

const (
	RoundWait RoundState = iota
	RoundGrace
	RoundDone
)

// ReadRound tells a round of generation reads whether it may stop waiting
// for the pending reads still out and decide (ConfirmsGeneration) with
// what it read (f.Read, this site's own ensemble included). It is done
// when nothing is pending, and when a read shows a generation newer than
// this master's (it steps down whatever the others say). With [replication]
// sites listed, once this site's own ensemble and a majority of the
// listed sites' ensembles answered, the rest get a grace (RoundGrace): a
// raise that won (a majority of ensembles) is seen in any majority, so
// waiting for a stalled ensemble, up to its read's timeout, adds nothing
// but time, and rounds that outlast the acknowledgement bound make a
// master with an answering majority refuse puts. The grace keeps a reply
// that is merely slower than the others (a forced raise written only
// where its site reached) in the round. Without the list every read is
// waited for (each up to its timeout).
func ReadRound(f ConfirmFacts, pending int) RoundState {
	if pending <= 0 {
		return RoundDone
	}
	if _, ok := f.Read[f.Site]; !ok {
		return RoundWait
	}
	for _, g := range f.Read {
		if g > f.Generation {
			return RoundDone
		}
	}
	if len(f.Sites) == 0 {
		return RoundWait
	}
	n := 0
	for _, s := range f.Sites {
		if _, ok := f.Read[s]; ok {
			n++
		}
	}
	if Majority(n, len(f.Sites)) {
		return RoundGrace
	}
	return RoundWait
}

// ConfirmsGeneration reports whether a round of reads confirms a master's
// generation, and why not. This site's own ensemble must have been read
// and no read may show a newer generation (the master steps down then).
// With [replication] sites listed, a returning master's generation must
// also be the newest in a majority of the listed sites' ensembles: its
// own ensemble may have missed the raise of a promotion that won in the
// others (its site was cut off when it was raised, and gossip and the
// replication link to the new master are cut), and a master that
// acknowledged on its own ensemble's word would take puts at a generation
// that was replaced. A master that keeps confirming within the bound, or
// that raised its generation itself (a promotion; a forced one must work
// while other ensembles are unreachable), keeps today's rule: its own
// ensemble suffices. Without the list the rule is the same for every
// master: its own ensemble.
func ConfirmsGeneration(f ConfirmFacts) (bool, string) {
	if _, ok := f.Read[f.Site]; !ok {
		return false, "this site's ZooKeeper was not read"
	}
	for site, g := range f.Read {
		if g > f.Generation {
			return false, fmt.Sprintf("site %s's ZooKeeper has generation %d, newer than this master's %d", site, g, f.Generation)
		}
	}
	if len(f.Sites) == 0 || !f.Returning {
		return true, ""
	}
	var confirmed, missing []string
	for _, s := range f.Sites {
		if _, ok := f.Read[s]; ok {
			confirmed = append(confirmed, s)
		} else {
			missing = append(missing, s)
		}
	}
	if !Majority(len(confirmed), len(f.Sites)) {
		return false, fmt.Sprintf("a returning master acknowledges only once its generation %d is the newest in a majority of the [replication] sites' ZooKeeper ensembles: "+
			"it is in %d of %d (%v); not read: %v", f.Generation, len(confirmed), len(f.Sites), confirmed, missing)
	}
	return true, ""
}
