package siterole

import (
	"strings"
	"testing"
	"time"
)

func TestAutoRaiseFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    UnfinishedFacts
		from uint64
		why  string
	}{
		{"nothing newer", UnfinishedFacts{Known: 2, Seen: 2}, 2, ""},
		{"nothing raised yet", UnfinishedFacts{Known: 0, Seen: 0}, 0, ""},
		{"older seen (an ensemble behind)", UnfinishedFacts{Known: 3, Seen: 2}, 3, ""},
		{"newer, no master of it", UnfinishedFacts{Known: 2, Seen: 3, SeenAt: "site bj's ZooKeeper", SeenFor: UnfinishedAfter}, 3, "generation 3 (site bj's ZooKeeper) is newer than the 2"},
		{"several newer, no master", UnfinishedFacts{Known: 1, Seen: 5, SeenAt: "this site's ZooKeeper", SeenFor: time.Minute}, 5, "never finished"},
		{"newer with a master in gossip", UnfinishedFacts{Known: 2, Seen: 3, MasterOfSeen: "hf"}, 2, ""},
		// Seed 941025: a forced raise of 3 was given back after bj's master
		// stepped down for it; bj follows 3, no ensemble holds it.
		{"newer followed in gossip, given back everywhere", UnfinishedFacts{Known: 2, Seen: 2, Followed: 3, FollowedBy: "bj", SeenFor: UnfinishedAfter}, 3, "generation 3 (followed by site bj in gossip)"},
		{"followed in gossip with a master of it", UnfinishedFacts{Known: 2, Seen: 2, Followed: 3, FollowedBy: "bj", MasterOfSeen: "gz"}, 2, ""},
		{"followed in gossip, not newer", UnfinishedFacts{Known: 3, Seen: 2, Followed: 3, FollowedBy: "bj"}, 3, ""},
		{"ensemble newer than gossip", UnfinishedFacts{Known: 2, Seen: 5, SeenAt: "site hf's ZooKeeper", Followed: 3, FollowedBy: "bj", SeenFor: UnfinishedAfter}, 5, "generation 5 (site hf's ZooKeeper)"},
		// Seed 941021: bj raised 6 (bj's and gz's ensembles) while cut off
		// from hf; hf read it in gz's ensemble at once, with no master of
		// it in its gossip, and raised 8 above it. A raise that young may
		// be a promotion in progress: the raise is from the generation
		// this site followed, and loses the compare-and-set to it.
		{"newer, no master, just raised", UnfinishedFacts{Known: 4, Seen: 6, SeenAt: "site gz's ZooKeeper", SeenFor: 40 * time.Millisecond}, 4, ""},
		// Soak finding 22, left over: hf and gz partitioned after the
		// master was lost; gz won generation 6 in its own and bj's
		// ensembles and registered there, hf (gz down in its gossip) reads
		// 6 in bj's ensemble. gz's registration there says 6 is finished.
		{"newer, no master in gossip, registered in an ensemble", UnfinishedFacts{Known: 4, Seen: 6, SeenAt: "site bj's ZooKeeper", Registered: "bj", SeenFor: time.Minute}, 4, ""},
		{"newer, no master, seen a moment less than the bound", UnfinishedFacts{Known: 4, Seen: 6, SeenAt: "site gz's ZooKeeper", SeenFor: UnfinishedAfter - time.Millisecond}, 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, why := AutoRaiseFrom(tc.f)
			if from != tc.from || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Fatalf("AutoRaiseFrom(%+v) = %d, %q; want %d, %q", tc.f, from, why, tc.from, tc.why)
			}
		})
	}
}

func TestLeftUnfinished(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    UnfinishedFacts
		want bool
	}{
		{"cold start: everyone at the master's generation", UnfinishedFacts{Known: 2, Seen: 2, Followed: 2, FollowedBy: "bj"}, false},
		{"fresh deployment", UnfinishedFacts{}, false},
		{"newer in an ensemble", UnfinishedFacts{Known: 2, Seen: 3, SeenFor: UnfinishedAfter}, true},
		{"newer in an ensemble, just seen (a promotion on its way)", UnfinishedFacts{Known: 2, Seen: 3, SeenFor: time.Second}, false},
		{"newer only in gossip (given back in every ensemble)", UnfinishedFacts{Known: 2, Seen: 2, Followed: 3, FollowedBy: "bj", SeenFor: time.Minute}, true},
		{"newer only in gossip, just seen", UnfinishedFacts{Known: 2, Seen: 2, Followed: 3, FollowedBy: "bj"}, false},
		{"newer with a master of it", UnfinishedFacts{Known: 2, Seen: 2, Followed: 3, FollowedBy: "bj", MasterOfSeen: "gz"}, false},
		{"a site behind this one", UnfinishedFacts{Known: 3, Seen: 3, Followed: 2, FollowedBy: "gz"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LeftUnfinished(tc.f); got != tc.want {
				t.Fatalf("LeftUnfinished(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}
