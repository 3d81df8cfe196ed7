package siterole

import (
	"strings"
	"testing"
	"time"
)

func TestMasterLost(t *testing.T) {
	zkGone := ZooKeeperFact{Enabled: true, Path: "/meta/brokers/ids/1/master"}
	master := func(alive bool, gen uint64) Peer {
		return Peer{Site: "bj", Role: Master, Alive: alive, Generation: gen}
	}
	slave := func(site string, alive, follows bool) Peer {
		return Peer{Site: site, Role: Slave, Alive: alive, Follows: follows}
	}
	self := Peer{Site: "hf", Self: true, Role: Slave, Alive: true}
	registered := ZooKeeperFact{Enabled: true, MasterRegistered: true, Path: "/x/master"}
	dead := DeadMasterFacts{Gossip: true, MasterDown: true, Silent: 5 * time.Second, AckBound: 3 * time.Second}
	suspect, recent := dead, dead
	suspect.MasterDown = false
	recent.Silent = 2 * time.Second
	for _, tc := range []struct {
		name string
		f    LossFacts
		lost bool
		why  string
	}{
		{"link up", LossFacts{Site: "hf", Connected: true, ZooKeeper: zkGone, DeadMaster: dead}, false, "reaches its master"},
		{"all agree", LossFacts{Site: "hf", Peers: []Peer{self, master(false, 0), slave("gz", true, false)}, ZooKeeper: zkGone, DeadMaster: dead}, true, "3 of 3"},
		{"master dead, gz still follows: 2 of 3", LossFacts{Site: "hf", Peers: []Peer{master(false, 0), slave("gz", true, true)}, ZooKeeper: zkGone, DeadMaster: dead}, true, "2 of 3"},
		{"master alive by gossip", LossFacts{Site: "hf", Peers: []Peer{master(true, 0), slave("gz", true, true)}, ZooKeeper: zkGone, DeadMaster: dead}, false, "1 of 3"},
		// Only suspected (a loaded machine): no vote, as if alive.
		{"master suspected by gossip", LossFacts{Site: "hf", Peers: []Peer{{Site: "bj", Role: Master, Suspect: true}, slave("gz", true, true)}, ZooKeeper: zkGone, DeadMaster: suspect}, false, "1 of 3"},
		{"fenceSites counts unseen sites", LossFacts{Site: "hf", FenceSites: 7, Peers: []Peer{master(false, 0), slave("gz", true, false)}, ZooKeeper: zkGone, DeadMaster: dead}, false, "3 of 7"},
		{"newer master elsewhere", LossFacts{Site: "hf", KnownGeneration: 2, Peers: []Peer{{Site: "gz", Role: Master, Alive: true, Generation: 3}}, ZooKeeper: zkGone, DeadMaster: dead}, false, "generation 3, newer"},
		{"a master of the generation followed is no newer one", LossFacts{Site: "hf", KnownGeneration: 3, Peers: []Peer{{Site: "gz", Role: Master, Alive: true, Generation: 3}, slave("sh", true, false)}, ZooKeeper: zkGone, DeadMaster: dead}, true, "2 of 3"},
		{"ZooKeeper off", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, DeadMaster: dead}, false, "ZooKeeper is off"},
		{"ZooKeeper unreadable", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: ZooKeeperFact{Enabled: true, Err: "timeout"}, DeadMaster: dead}, false, "cannot be read: timeout"},
		{"registered by a dead master's session", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: registered, DeadMaster: dead}, true, "held by a dead master's session"},
		// The dead-master rule holds whether or not this site's
		// ZooKeeper has the master node: with one ensemble per site a
		// missing node may be a mirror that never arrived.
		{"no master node, master only suspect", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: zkGone, DeadMaster: suspect}, false, "not declared the master's bundle down"},
		{"registered, master only suspect", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: registered, DeadMaster: suspect}, false, "not declared the master's bundle down"},
		{"no master node, silent within the bound", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: zkGone, DeadMaster: recent}, false, "not longer than"},
		{"no master node, no gossip", LossFacts{Site: "hf", Peers: []Peer{master(false, 0)}, ZooKeeper: zkGone, DeadMaster: DeadMasterFacts{Silent: time.Minute, AckBound: time.Second}}, false, "gossip is off"},
		// A master partitioned from this site only: gossip (through the
		// other sites' probes) keeps it alive, the other slave site still
		// follows it. No majority, however long the link stays cut.
		{"cut from this site only", LossFacts{Site: "hf", Peers: []Peer{master(true, 0), slave("gz", true, true)}, ZooKeeper: registered,
			DeadMaster: DeadMasterFacts{Gossip: true, Silent: time.Minute, AckBound: time.Second}}, false, "1 of 3"},
		// This site cut off from the other sites' gossip and from its
		// replication link, reaching every ensemble: every other bundle
		// is declared down in its gossip, the master's too, while the
		// master and gz may be alive and connected to each other. That
		// one view is no majority of three.
		{"cut from every site's gossip", LossFacts{Site: "hf", Peers: []Peer{self, master(false, 0), {Site: "gz", Role: Slave, Follows: true, DownFor: 40 * time.Second}},
			ZooKeeper: registered, DeadMaster: dead}, false, "1 of 3 sites agree the master is lost; the master's bundle declared down is not counted"},
		// gz's last gossip said it had lost the master too (the master
		// died, then hf and gz were cut from each other): it backs the
		// master's loss, whose site counts.
		{"gz down, last seen having lost the master", LossFacts{Site: "hf", Peers: []Peer{self, master(false, 0), {Site: "gz", Role: Slave, DownFor: time.Second}}, ZooKeeper: registered, DeadMaster: dead}, true, "2 of 3"},
		// gz already dropped from gossip: the listed sites still count.
		{"cut off, the third site dropped from gossip", LossFacts{Site: "hf", ListedSites: 3, Peers: []Peer{self, master(false, 0)}, ZooKeeper: registered, DeadMaster: dead}, false, "1 of 3"},
		{"cut off, fenceSites", LossFacts{Site: "hf", FenceSites: 3, Peers: []Peer{self, master(false, 0)}, ZooKeeper: registered, DeadMaster: dead}, false, "1 of 3"},
		// A slave site only suspected is no company: under a cut it is
		// suspected before it is declared down.
		{"cut off, gz suspected", LossFacts{Site: "hf", Peers: []Peer{self, master(false, 0), {Site: "gz", Role: Slave, Suspect: true, Follows: true}}, ZooKeeper: registered, DeadMaster: dead}, false, "1 of 3"},
		// Two sites in all: nothing tells the master's death from this
		// site's being cut off, the master's site counts.
		{"two sites", LossFacts{Site: "hf", ListedSites: 2, Peers: []Peer{self, master(false, 0)}, ZooKeeper: registered, DeadMaster: dead}, true, "2 of 2"},
		// gz alive in gossip, the master declared down by the part of
		// the deployment both reach: the master's site counts.
		{"gz alive and still following", LossFacts{Site: "hf", ListedSites: 3, Peers: []Peer{self, master(false, 0), slave("gz", true, true)}, ZooKeeper: registered, DeadMaster: dead}, true, "2 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, why := MasterLost(tc.f)
			if lost != tc.lost || !strings.Contains(why, tc.why) {
				t.Fatalf("MasterLost = %v, %q; want %v, containing %q", lost, why, tc.lost, tc.why)
			}
		})
	}
}

func TestMajority(t *testing.T) {
	for _, tc := range []struct {
		votes, total int
		want         bool
	}{{0, 0, false}, {1, 1, true}, {1, 2, false}, {2, 3, true}, {2, 4, false}, {3, 4, true}, {3, 5, true}} {
		if got := Majority(tc.votes, tc.total); got != tc.want {
			t.Errorf("Majority(%d, %d) = %v, want %v", tc.votes, tc.total, got, tc.want)
		}
	}
}

func TestCandidate(t *testing.T) {
	lost := func(site string, pos int64) Peer { return Peer{Site: site, Role: Slave, Alive: true, LogPos: pos} }
	for _, tc := range []struct {
		name    string
		selfPos int64
		peers   []Peer
		want    string
	}{
		{"alone", 10, nil, "hf"},
		{"ahead", 10, []Peer{lost("gz", 20)}, "gz"},
		{"behind", 30, []Peer{lost("gz", 20)}, "hf"},
		{"tie to the lowest name", 20, []Peer{lost("gz", 20), lost("bj2", 20)}, "bj2"},
		{"tie, self lowest", 20, []Peer{lost("sh", 20)}, "hf"},
		{"dead sibling ignored", 10, []Peer{{Site: "gz", Role: Slave, LogPos: 99}}, "hf"},
		{"suspected sibling ahead still counts", 10, []Peer{{Site: "gz", Role: Slave, Suspect: true, LogPos: 99}}, "gz"},
		{"suspected sibling behind", 30, []Peer{{Site: "gz", Role: Slave, Suspect: true, LogPos: 20}}, "hf"},
		{"sibling that still follows ignored", 10, []Peer{{Site: "gz", Role: Slave, Alive: true, Follows: true, LogPos: 99}}, "hf"},
		{"masters ignored", 10, []Peer{{Site: "bj", Role: Master, Alive: true, LogPos: 99}}, "hf"},
		// A false "down" under load: gz was last seen following the
		// master and may be alive and ahead; its position is not final.
		{"declared down while following, ahead", 10, []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: 2 * time.Second, LogPos: 99}}, "gz"},
		{"suspected while following, ahead", 10, []Peer{{Site: "gz", Role: Slave, Suspect: true, Follows: true, DownFor: time.Second, LogPos: 99}}, "gz"},
		{"declared down while following, behind", 30, []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: 2 * time.Second, LogPos: 20}}, "hf"},
		{"down long enough to be gone", 10, []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: SiblingDownFinal, LogPos: 99}}, "hf"},
		{"restarted, the old member down while following", 10, []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: time.Second, LogPos: 99},
			{Site: "gz", Role: Slave, Alive: true, LogPos: 5}}, "hf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Candidate("hf", tc.selfPos, tc.peers); got != tc.want {
				t.Fatalf("Candidate = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPositionFinal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     Peer
		final bool
		why   string
	}{
		{"lost the master", Peer{Site: "gz", Role: Slave, Alive: true}, true, ""},
		{"follows", Peer{Site: "gz", Role: Slave, Alive: true, Follows: true}, false, "still follows"},
		{"down, lost the master first", Peer{Site: "gz", Role: Slave, DownFor: time.Second}, true, ""},
		{"down while following", Peer{Site: "gz", Role: Slave, Follows: true, DownFor: time.Second}, false, "declared down by gossip 1s ago"},
		{"suspected while following", Peer{Site: "gz", Role: Slave, Suspect: true, Follows: true}, false, "suspected by gossip"},
		{"down while following, gone by now", Peer{Site: "gz", Role: Slave, Follows: true, DownFor: SiblingDownFinal}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			final, why := PositionFinal(tc.p)
			if final != tc.final || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Fatalf("PositionFinal = %v, %q; want %v, %q", final, why, tc.final, tc.why)
			}
		})
	}
}

func TestSiblingAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		peers []Peer
		want  string
	}{
		{"none", nil, ""},
		{"behind", []Peer{{Site: "gz", Role: Slave, Alive: true, LogPos: 5}}, ""},
		{"equal", []Peer{{Site: "gz", Role: Slave, Alive: true, LogPos: 10}}, ""},
		{"ahead", []Peer{{Site: "gz", Role: Slave, Alive: true, LogPos: 11}}, "gz applied the master's log up to 11, this site up to 10"},
		{"still follows", []Peer{{Site: "gz", Role: Slave, Alive: true, Follows: true}}, "gz still follows"},
		{"dead", []Peer{{Site: "gz", Role: Slave, LogPos: 99}}, ""},
		{"self", []Peer{{Site: "hf", Self: true, Role: Slave, Alive: true, LogPos: 99}}, ""},
		// Declared down or suspected while it followed the master: its
		// last gossiped position is not final, behind or not.
		{"declared down while following", []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: 2 * time.Second, LogPos: 5}}, "gz, declared down by gossip 2s ago, was last seen following the master"},
		{"suspected while following", []Peer{{Site: "gz", Role: Slave, Suspect: true, Follows: true, DownFor: time.Second, LogPos: 5}}, "gz, suspected by gossip 1s ago"},
		{"down long enough to be gone", []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: SiblingDownFinal, LogPos: 99}}, ""},
		// Restarted: the old member lingers down; the live one counts.
		{"restarted, the old member down while following", []Peer{{Site: "gz", Role: Slave, Follows: true, DownFor: time.Second, LogPos: 99},
			{Site: "gz", Role: Slave, Alive: true, LogPos: 5}}, ""},
		{"suspected and ahead", []Peer{{Site: "gz", Role: Slave, Suspect: true, LogPos: 11}}, "gz applied the master's log up to 11"},
		{"suspected and behind", []Peer{{Site: "gz", Role: Slave, Suspect: true, LogPos: 9}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SiblingAhead("hf", 10, tc.peers)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("SiblingAhead = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDownSiblingAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		peers []Peer
		want  string
	}{
		{"none", nil, ""},
		{"down and ahead", []Peer{{Site: "hf", Role: Slave, Generation: 2, LogPos: 11}}, "hf, down now, was last seen having applied the master's log up to 11, this site up to 10"},
		{"down and behind", []Peer{{Site: "hf", Role: Slave, Generation: 2, LogPos: 9}}, ""},
		{"down, equal", []Peer{{Site: "hf", Role: Slave, Generation: 2, LogPos: 10}}, ""},
		{"alive and ahead is SiblingAhead's", []Peer{{Site: "hf", Role: Slave, Alive: true, Generation: 2, LogPos: 11}}, ""},
		{"suspect is not down", []Peer{{Site: "hf", Role: Slave, Suspect: true, Generation: 2, LogPos: 11}}, ""},
		{"an older generation's position", []Peer{{Site: "hf", Role: Slave, Generation: 1, LogPos: 99}}, ""},
		{"the dead master", []Peer{{Site: "bj", Role: Master, Generation: 2, LogPos: 99}}, ""},
		{"self", []Peer{{Site: "gz", Self: true, Role: Slave, Generation: 2, LogPos: 99}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DownSiblingAhead("gz", 10, 2, tc.peers)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("DownSiblingAhead = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMayAcknowledge(t *testing.T) {
	now := time.Unix(1000, 0)
	m := State{Role: Master, Generation: 4}
	for _, tc := range []struct {
		name string
		f    AckFacts
		ok   bool
		why  string
	}{
		{"slave", AckFacts{State: State{Role: Slave}}, false, "slave"},
		{"stepped down", AckFacts{State: State{Role: Master, SteppedDown: true, Why: "generation 5"}}, false, "stepped down: generation 5"},
		{"fenced", AckFacts{State: m, Fenced: true}, false, "fenced"},
		{"no ZooKeeper", AckFacts{State: m}, true, ""},
		{"never confirmed", AckFacts{State: m, ZooKeeper: true, Now: now, MaxUnconfirmed: time.Second}, false, "not confirmed"},
		{"confirmed recently", AckFacts{State: m, ZooKeeper: true, ConfirmedAt: now.Add(-500 * time.Millisecond), Now: now, MaxUnconfirmed: time.Second}, true, ""},
		{"standalone: nothing could have been promoted", AckFacts{State: m, ZooKeeper: true, Standalone: true, ConfirmedAt: now.Add(-time.Hour), Now: now, MaxUnconfirmed: time.Second}, true, ""},
		{"confirmation too old (paused, or ZooKeeper unreadable)", AckFacts{State: m, ZooKeeper: true, ConfirmedAt: now.Add(-3 * time.Second), Now: now, MaxUnconfirmed: time.Second}, false, "could not confirm its generation 4"},
		// A switchover's new master takes puts before its role is set.
		{"promoting, confirmed", AckFacts{State: State{Role: Slave}, Promoting: true, ZooKeeper: true, ConfirmedAt: now.Add(-500 * time.Millisecond), Now: now, MaxUnconfirmed: time.Second}, true, ""},
		{"promoting, not confirmed yet", AckFacts{State: State{Role: Slave}, Promoting: true, ZooKeeper: true, Now: now, MaxUnconfirmed: time.Second}, false, "not confirmed"},
		{"promoting, fenced", AckFacts{State: State{Role: Slave}, Promoting: true, Fenced: true, ZooKeeper: true, ConfirmedAt: now, Now: now, MaxUnconfirmed: time.Second}, false, "fenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := MayAcknowledge(tc.f)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("MayAcknowledge = %v, %q; want %v, %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

func TestFollows(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Peer
		ok   bool
		why  string
	}{
		{"follows", Peer{Role: Slave, Alive: true, Follows: true, Generation: 3}, true, ""},
		{"follows a newer one", Peer{Role: Slave, Alive: true, Follows: true, Generation: 4}, true, ""},
		{"dead", Peer{Role: Slave, Follows: true, Generation: 3}, false, "not alive"},
		{"a master", Peer{Role: Master, Alive: true, Generation: 2}, false, "is a master (generation 2)"},
		{"cut off", Peer{Role: Slave, Alive: true, Generation: 3}, false, "does not reach its master"},
		{"old master", Peer{Role: Slave, Alive: true, Follows: true, Generation: 2}, false, "generation 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := Follows(tc.p, 3)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("Follows = %v, %q; want %v, %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

func TestFenceDeadMaster(t *testing.T) {
	dead := DeadMasterFacts{Gossip: true, MasterDown: true, Silent: 5 * time.Second, AckBound: 3 * time.Second}
	for _, tc := range []struct {
		name string
		mod  func(*DeadMasterFacts)
		ok   bool
		why  string
	}{
		{"dead", func(*DeadMasterFacts) {}, true, ""},
		{"link up", func(f *DeadMasterFacts) { f.Connected = true }, false, "link to the master is up"},
		{"no gossip", func(f *DeadMasterFacts) { f.Gossip = false }, false, "gossip is off"},
		{"only suspect", func(f *DeadMasterFacts) { f.MasterDown = false }, false, "not declared"},
		{"silence unknown", func(f *DeadMasterFacts) { f.Silent = 0 }, false, "does not know"},
		{"silent within the bound", func(f *DeadMasterFacts) { f.Silent = 2 * time.Second }, false, "silent for 2s"},
		{"silent exactly the bound", func(f *DeadMasterFacts) { f.Silent = 3 * time.Second }, false, "not longer"},
		// A master that restarted as a slave gossips under a new node; its
		// old one is reaped, or unknown to a bundle that joined later.
		{"no master in gossip, live members", func(f *DeadMasterFacts) { f.MasterDown, f.NoMaster, f.Unfinished = false, true, true }, true, ""},
		// A cold start: the slaves' gossip has no master until the master,
		// started after them, joins; no generation was left unfinished.
		{"no master in gossip, nothing unfinished", func(f *DeadMasterFacts) { f.MasterDown, f.NoMaster = false, true }, false, "not joined gossip yet"},
		{"no master in gossip, never heard, nothing unfinished", func(f *DeadMasterFacts) {
			f.MasterDown, f.NoMaster, f.Silent, f.NeverHeardFor = false, true, 0, time.Minute
		}, false, "not joined gossip yet"},
		{"no master in gossip, link up", func(f *DeadMasterFacts) {
			f.MasterDown, f.NoMaster, f.Unfinished, f.Connected = false, true, true, true
		}, false, "link to the master is up"},
		{"no master in gossip, silent within the bound", func(f *DeadMasterFacts) {
			f.MasterDown, f.NoMaster, f.Unfinished, f.Silent = false, true, true, time.Second
		}, false, "silent for 1s"},
		// A receiver that never heard from a master since it started: the
		// time since then is a lower bound of the master's silence.
		{"never heard, past the bound", func(f *DeadMasterFacts) { f.Silent, f.NeverHeardFor = 0, 4*time.Second }, true, ""},
		{"never heard, within the bound", func(f *DeadMasterFacts) { f.Silent, f.NeverHeardFor = 0, 2*time.Second }, false, "silent for 2s"},
		{"never heard, exactly the bound", func(f *DeadMasterFacts) { f.Silent, f.NeverHeardFor = 0, 3*time.Second }, false, "not longer"},
		{"heard recently beats never heard", func(f *DeadMasterFacts) { f.Silent, f.NeverHeardFor = time.Second, time.Minute }, false, "silent for 1s"},
		{"never heard, no master in gossip", func(f *DeadMasterFacts) {
			f.MasterDown, f.NoMaster, f.Unfinished, f.Silent, f.NeverHeardFor = false, true, true, 0, 10*time.Second
		}, true, ""},
		{"never heard, master only suspect", func(f *DeadMasterFacts) { f.MasterDown, f.Silent, f.NeverHeardFor = false, 0, 10*time.Second }, false, "not declared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := dead
			tc.mod(&f)
			ok, why := FenceDeadMaster(f)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("FenceDeadMaster = %v, %q; want %v, %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

func TestRaiseWon(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    RaiseTally
		ok   bool
		need int
	}{
		{"one shared ensemble, won", RaiseTally{Ensembles: 1, Reached: 1, Won: 1}, true, 1},
		{"one shared ensemble, lost", RaiseTally{Ensembles: 1, Reached: 1, Won: 0}, false, 1},
		{"no ensemble known counts as one", RaiseTally{Ensembles: 0, Reached: 1, Won: 1}, true, 1},
		{"three sites, won all", RaiseTally{Ensembles: 3, Reached: 3, Won: 3}, true, 2},
		{"three sites, won two", RaiseTally{Ensembles: 3, Reached: 3, Won: 2}, true, 2},
		{"three sites, won own only", RaiseTally{Ensembles: 3, Reached: 3, Won: 1}, false, 2},
		{"three sites, two reached and won", RaiseTally{Ensembles: 3, Reached: 2, Won: 2}, true, 2},
		{"three sites, cut off from the others", RaiseTally{Ensembles: 3, Reached: 1, Won: 1}, false, 2},
		{"two sites need both", RaiseTally{Ensembles: 2, Reached: 2, Won: 1}, false, 2},
		{"two sites, both won", RaiseTally{Ensembles: 2, Reached: 2, Won: 2}, true, 2},
		{"five sites, three won", RaiseTally{Ensembles: 5, Reached: 4, Won: 3}, true, 3},
		{"five sites, two won", RaiseTally{Ensembles: 5, Reached: 5, Won: 2}, false, 3},
		// [replication] sites = bj, gz, hf: bj's class is 0, 3, 6...,
		// gz's 1, 4, 7..., hf's 2, 5, 8...
		{"sites listed, won all listed", RaiseTally{Ensembles: 3, Reached: 3, Won: 3,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2, Complete: true}}, true, 2},
		{"sites listed, a majority at a number of another site's class", RaiseTally{Ensembles: 3, Reached: 2, Won: 2,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2}}, false, 2},
		{"sites listed, a majority at a number of its own class", RaiseTally{Ensembles: 3, Reached: 2, Won: 2,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 4}}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, need, why := RaiseWon(tc.t)
			if ok != tc.ok || need != tc.need || why == "" {
				t.Fatalf("RaiseWon(%+v) = %v, %d, %q; want %v, %d", tc.t, ok, need, why, tc.ok, tc.need)
			}
		})
	}
}

func TestForcedRaiseVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    ForcedRaise
		want ForcedVerdict
	}{
		{"one shared ensemble, won", ForcedRaise{Own: RaisedHere}, ForcedOwns},
		{"one shared ensemble, taken", ForcedRaise{Own: TakenHere}, ForcedRetry},
		{"won everywhere", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{RaisedHere, RaisedHere}}, ForcedOwns},
		{"others unreachable: -force still works", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{NotReached, NotReached}}, ForcedOwns},
		{"taken in another site's ensemble", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{RaisedHere, TakenHere}}, ForcedRetry},
		{"taken in another, own not tried yet", ForcedRaise{Own: NotReached, Others: []EnsembleRaise{TakenHere}}, ForcedRetry},
		{"own unreachable", ForcedRaise{Own: NotReached, Others: []EnsembleRaise{RaisedHere, RaisedHere}}, ForcedFail},
		{"own unknown", ForcedRaise{Own: UnknownHere, Others: []EnsembleRaise{RaisedHere}}, ForcedUnknown},
		{"another unknown counts as no loss", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{UnknownHere}}, ForcedOwns},
		// [replication] sites = bj, gz, hf. hf and gz cut off from each
		// other, each raising from generation 1 in its own ensemble:
		// before the class rule both owned 2.
		{"partition: hf at 2, its class", ForcedRaise{Own: RaisedHere,
			Class: ClassFacts{Site: "hf", Sites: listed, Generation: 2}}, ForcedOwns},
		{"partition: gz at 2, hf's class", ForcedRaise{Own: RaisedHere,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2}}, ForcedReclass},
		{"partition: gz at 4, its class", ForcedRaise{Own: RaisedHere,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 4}}, ForcedOwns},
		{"every listed ensemble won: any number", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{RaisedHere, RaisedHere},
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2, Complete: true}}, ForcedOwns},
		{"taken comes before the class", ForcedRaise{Own: RaisedHere, Others: []EnsembleRaise{TakenHere},
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2}}, ForcedRetry},
		{"own unreachable comes before the class", ForcedRaise{Own: NotReached,
			Class: ClassFacts{Site: "gz", Sites: listed, Generation: 2}}, ForcedFail},
		{"a site the list lacks owns nothing incomplete", ForcedRaise{Own: RaisedHere,
			Class: ClassFacts{Site: "sh", Sites: listed, Generation: 3}}, ForcedReclass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := ForcedRaiseVerdict(tc.r); got != tc.want || why == "" {
				t.Fatalf("ForcedRaiseVerdict(%+v) = %v, %q; want %v", tc.r, got, why, tc.want)
			}
		})
	}
}

// listed is a [replication] sites list, as written (unsorted).
var listed = []string{"hf", "bj", "gz"}

func TestClassAllows(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    ClassFacts
		ok   bool
		why  string
	}{
		{"no list", ClassFacts{Site: "gz", Generation: 2}, true, ""},
		{"complete", ClassFacts{Site: "gz", Sites: listed, Generation: 2, Complete: true}, true, ""},
		{"bj owns 0 mod 3", ClassFacts{Site: "bj", Sites: listed, Generation: 6}, true, ""},
		{"gz owns 1 mod 3", ClassFacts{Site: "gz", Sites: listed, Generation: 7}, true, ""},
		{"hf owns 2 mod 3", ClassFacts{Site: "hf", Sites: listed, Generation: 5}, true, ""},
		{"gz not 2 mod 3", ClassFacts{Site: "gz", Sites: listed, Generation: 5}, false, "not in this site's class"},
		{"bj not 1 mod 3", ClassFacts{Site: "bj", Sites: listed, Generation: 1}, false, "not in this site's class"},
		{"site not listed", ClassFacts{Site: "sh", Sites: listed, Generation: 3}, false, "not in [replication] sites"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := ClassAllows(tc.f)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("ClassAllows(%+v) = %v, %q; want %v, containing %q", tc.f, ok, why, tc.ok, tc.why)
			}
		})
	}
}

// TestClassGeneration: the number a raise that cannot reach every listed
// site's ensemble tries, and that no two sites' classes share one.
func TestClassGeneration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		next  uint64
		site  string
		sites []string
		want  uint64
		ok    bool
	}{
		{"no list", 2, "gz", nil, 2, false},
		{"not listed", 2, "sh", listed, 2, false},
		{"hf's class holds 2", 2, "hf", listed, 2, true},
		{"gz's next is 4", 2, "gz", listed, 4, true},
		{"bj's next is 3", 2, "bj", listed, 3, true},
		{"bj from 0", 0, "bj", listed, 0, true},
		{"gz from 0", 0, "gz", listed, 1, true},
		{"one site: every number", 7, "bj", []string{"bj"}, 7, true},
		{"two sites", 7, "bj", []string{"hf", "bj"}, 8, true},
		{"large", 1 << 40, "hf", listed, 1<<40 + 1, true}, // 2^40 mod 3 = 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ClassGeneration(tc.next, tc.site, tc.sites)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ClassGeneration(%d, %s, %v) = %d, %v; want %d, %v", tc.next, tc.site, tc.sites, got, ok, tc.want, tc.ok)
			}
		})
	}
	taken := map[uint64]string{}
	for _, site := range listed {
		for next := uint64(0); next < 50; next++ {
			g, _ := ClassGeneration(next, site, listed)
			if g < next || g >= next+uint64(len(listed)) {
				t.Fatalf("ClassGeneration(%d, %s) = %d, not within [next, next+%d)", next, site, g, len(listed))
			}
			if ok, why := ClassAllows(ClassFacts{Site: site, Sites: listed, Generation: g}); !ok {
				t.Fatalf("ClassGeneration(%d, %s) = %d, which ClassAllows refuses: %s", next, site, g, why)
			}
			if other, dup := taken[g]; dup && other != site {
				t.Fatalf("generation %d is in the classes of %s and %s", g, other, site)
			}
			taken[g] = site
		}
	}
}

func TestNextForcedGeneration(t *testing.T) {
	for _, tc := range []struct {
		known uint64
		seen  []uint64
		want  uint64
	}{
		{0, nil, 1},
		{3, []uint64{3, 3}, 4},
		{3, []uint64{4, 2}, 5}, // another site's ensemble holds 4: never reuse it
		{5, []uint64{0, 4}, 6},
	} {
		if got := NextForcedGeneration(tc.known, tc.seen...); got != tc.want {
			t.Errorf("NextForcedGeneration(%d, %v) = %d, want %d", tc.known, tc.seen, got, tc.want)
		}
	}
}

func TestSharedGeneration(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    SharedGenFacts
		want SharedGenAction
	}{
		{"nobody else", SharedGenFacts{Site: "gz", Generation: 3}, KeepFinishing},
		{"another site is master of it", SharedGenFacts{Site: "gz", Generation: 3, OtherMaster: "hf", OtherRaiser: "hf"}, GiveUpAndFollow},
		{"another master with a higher name still wins", SharedGenFacts{Site: "bj", Generation: 3, OtherMaster: "hf"}, GiveUpAndFollow},
		{"took puts: raise again", SharedGenFacts{Site: "gz", Generation: 3, OtherMaster: "hf", TookPuts: true}, RaiseAgain},
		{"raiser only, lower name keeps it", SharedGenFacts{Site: "hf", Generation: 3, OtherRaiser: "gz"}, GiveUpAndFollow},
		{"raiser only, this site has the lower name", SharedGenFacts{Site: "bj", Generation: 3, OtherRaiser: "hf"}, KeepFinishing},
		{"itself", SharedGenFacts{Site: "gz", Generation: 3, OtherMaster: "gz"}, KeepFinishing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := SharedGeneration(tc.f)
			if got != tc.want || (got != KeepFinishing && why == "") {
				t.Fatalf("SharedGeneration(%+v) = %v, %q; want %v", tc.f, got, why, tc.want)
			}
		})
	}
}

func TestConfirmsGeneration(t *testing.T) {
	sites := []string{"bj", "gz", "hf"}
	for _, tc := range []struct {
		name string
		f    ConfirmFacts
		want bool
	}{
		{"own ensemble not read", ConfirmFacts{Site: "bj", Generation: 2, Read: map[string]uint64{"hf": 2, "gz": 2}}, false},
		{"no list: own ensemble suffices", ConfirmFacts{Site: "bj", Generation: 2, Returning: true, Read: map[string]uint64{"bj": 2}}, true},
		{"no list: a newer generation elsewhere", ConfirmFacts{Site: "bj", Generation: 0, Read: map[string]uint64{"bj": 0, "hf": 2}}, false},
		{"list, confirmed within the bound: own ensemble suffices", ConfirmFacts{Site: "bj", Sites: sites, Generation: 0, Read: map[string]uint64{"bj": 0}}, true},
		{"list, returning, own ensemble only: the raise may have won in the others", ConfirmFacts{Site: "bj", Sites: sites, Generation: 0, Returning: true, Read: map[string]uint64{"bj": 0}}, false},
		{"list, returning, majority of ensembles", ConfirmFacts{Site: "bj", Sites: sites, Generation: 0, Returning: true, Read: map[string]uint64{"bj": 0, "gz": 0}}, true},
		{"list, returning, another ensemble lags (older generation)", ConfirmFacts{Site: "hf", Sites: sites, Generation: 2, Returning: true, Read: map[string]uint64{"hf": 2, "bj": 0}}, true},
		{"list, returning, majority read but one is newer", ConfirmFacts{Site: "bj", Sites: sites, Generation: 0, Returning: true, Read: map[string]uint64{"bj": 0, "gz": 0, "hf": 2}}, false},
		{"list, returning, a site outside the list does not count", ConfirmFacts{Site: "bj", Sites: sites, Generation: 0, Returning: true, Read: map[string]uint64{"bj": 0, "sh": 0}}, false},
		{"list of five, returning, three read", ConfirmFacts{Site: "a", Sites: []string{"a", "b", "c", "d", "e"}, Generation: 4, Returning: true, Read: map[string]uint64{"a": 4, "c": 4, "e": 3}}, true},
		{"list of four, returning, two read: no majority", ConfirmFacts{Site: "a", Sites: []string{"a", "b", "c", "d"}, Generation: 4, Returning: true, Read: map[string]uint64{"a": 4, "c": 4}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := ConfirmsGeneration(tc.f)
			if got != tc.want || (!got && why == "") {
				t.Fatalf("ConfirmsGeneration(%+v) = %v, %q; want %v", tc.f, got, why, tc.want)
			}
		})
	}
}

func TestAwaitsConfirmation(t *testing.T) {
	now := time.Unix(1000, 0)
	m := State{Role: Master, Generation: 4}
	for _, tc := range []struct {
		name string
		f    AckFacts
		want bool
	}{
		{"slave", AckFacts{State: State{Role: Slave}, ZooKeeper: true, Now: now}, false},
		{"stepped down", AckFacts{State: State{Role: Master, SteppedDown: true}, ZooKeeper: true, Now: now}, false},
		{"fenced", AckFacts{State: m, Fenced: true, ZooKeeper: true, Now: now}, false},
		{"no ZooKeeper", AckFacts{State: m, Now: now}, false},
		{"standalone", AckFacts{State: m, ZooKeeper: true, Standalone: true, Now: now}, false},
		{"confirmed recently: acknowledges", AckFacts{State: m, ZooKeeper: true, ConfirmedAt: now.Add(-500 * time.Millisecond), Now: now, MaxUnconfirmed: time.Second}, false},
		{"just started, never confirmed", AckFacts{State: m, ZooKeeper: true, Now: now, MaxUnconfirmed: time.Second}, true},
		{"confirmation stale (paused, ZooKeeper away)", AckFacts{State: m, ZooKeeper: true, ConfirmedAt: now.Add(-3 * time.Second), Now: now, MaxUnconfirmed: time.Second}, true},
		{"promoting, not confirmed yet: held", AckFacts{State: State{Role: Slave}, Promoting: true, ZooKeeper: true, Now: now, MaxUnconfirmed: time.Second}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AwaitsConfirmation(tc.f); got != tc.want {
				t.Fatalf("AwaitsConfirmation(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}

func TestReadRound(t *testing.T) {
	sites := []string{"bj", "gz", "hf"}
	five := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name    string
		f       ConfirmFacts
		pending int
		want    RoundState
	}{
		{"nothing pending", ConfirmFacts{Site: "bj", Sites: sites, Read: map[string]uint64{"bj": 0}}, 0, RoundDone},
		{"own ensemble not read yet", ConfirmFacts{Site: "bj", Sites: sites, Read: map[string]uint64{"gz": 0, "hf": 0}}, 1, RoundWait},
		{"a newer generation: step down now", ConfirmFacts{Site: "bj", Sites: sites, Generation: 1, Read: map[string]uint64{"bj": 1, "hf": 2}}, 1, RoundDone},
		{"newer without a list too", ConfirmFacts{Site: "bj", Generation: 1, Read: map[string]uint64{"bj": 1, "hf": 2}}, 3, RoundDone},
		{"own only of three: wait", ConfirmFacts{Site: "bj", Sites: sites, Generation: 1, Read: map[string]uint64{"bj": 1}}, 2, RoundWait},
		{"own and one of three: a majority, grace for the third", ConfirmFacts{Site: "bj", Sites: sites, Generation: 1, Read: map[string]uint64{"bj": 1, "gz": 1}}, 1, RoundGrace},
		{"an older generation counts as an answer", ConfirmFacts{Site: "hf", Sites: sites, Generation: 2, Read: map[string]uint64{"hf": 2, "bj": 0}}, 1, RoundGrace},
		{"a site outside the list is no vote", ConfirmFacts{Site: "bj", Sites: sites, Generation: 1, Read: map[string]uint64{"bj": 1, "sh": 1}}, 2, RoundWait},
		{"no list: every read is waited for", ConfirmFacts{Site: "bj", Generation: 1, Read: map[string]uint64{"bj": 1, "gz": 1}}, 1, RoundWait},
		{"five: own and one is no majority", ConfirmFacts{Site: "a", Sites: five, Generation: 3, Read: map[string]uint64{"a": 3, "c": 3}}, 3, RoundWait},
		{"five: own and two is a majority", ConfirmFacts{Site: "a", Sites: five, Generation: 3, Read: map[string]uint64{"a": 3, "c": 3, "e": 2}}, 2, RoundGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadRound(tc.f, tc.pending); got != tc.want {
				t.Fatalf("ReadRound(%+v, %d) = %v, want %v", tc.f, tc.pending, got, tc.want)
			}
		})
	}
}

// Seed 944112: after the heal every site was a slave whose receiver waited
// for a master node (appliedPos -1, gossiped as 0). Each must name the same
// candidate, and that one must not find its waiting siblings ahead of it.
func TestCandidateAgreesWhenNoSiteRunsAStream(t *testing.T) {
	sites := []string{"bj", "gz", "hf"}
	peersOf := func(self string) []Peer {
		var out []Peer
		for _, s := range sites {
			out = append(out, Peer{Site: s, Self: s == self, Role: Slave, Alive: true, Generation: 5, LogPos: 0})
		}
		return out
	}
	for _, self := range sites {
		if got := Candidate(self, -1, peersOf(self)); got != "bj" {
			t.Errorf("Candidate at %s = %s, want bj (every site applied nothing)", self, got)
		}
	}
	if why := SiblingAhead("bj", -1, peersOf("bj")); why != "" {
		t.Errorf("SiblingAhead at bj = %q, want none ahead", why)
	}
	down := append(peersOf("bj")[:1], Peer{Site: "gz", Role: Slave, Generation: 5, LogPos: 0, DownFor: time.Minute})
	if why := DownSiblingAhead("bj", -1, 5, down); why != "" {
		t.Errorf("DownSiblingAhead at bj = %q, want none ahead", why)
	}
}
