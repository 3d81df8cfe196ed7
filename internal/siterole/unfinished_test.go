package siterole

import (
	"strings"
	"testing"
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
		{"newer, no master of it", UnfinishedFacts{Known: 2, Seen: 3, SeenAt: "site bj's ZooKeeper"}, 3, "generation 3 (site bj's ZooKeeper) is newer than the 2"},
		{"several newer, no master", UnfinishedFacts{Known: 1, Seen: 5, SeenAt: "this site's ZooKeeper"}, 5, "never finished"},
		{"newer with a master in gossip", UnfinishedFacts{Known: 2, Seen: 3, MasterOfSeen: "hf"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, why := AutoRaiseFrom(tc.f)
			if from != tc.from || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Fatalf("AutoRaiseFrom(%+v) = %d, %q; want %d, %q", tc.f, from, why, tc.from, tc.why)
			}
		})
	}
}
