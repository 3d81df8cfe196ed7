package topology

import "testing"

// TestViewKeeperNeedsASession checks who writes a site's view when bundles
// gossip which ensembles they reach: the site's own bundle first, then the
// first other bundle that reaches it; never a bundle that cannot.
func TestViewKeeperNeedsASession(t *testing.T) {
	m := func(name, site string, state MemberState, views ...string) Member {
		return Member{Name: name, State: state, Meta: Meta{Site: site, Views: views}}
	}
	cases := []struct {
		name    string
		members []Member
		want    string
	}{
		{"own site keeps it", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "hf", "gz"),
			m("hf-1-s1", "hf", StateAlive, "hf"),
		}, "hf-1-s1"},
		{"own site down: first other that reaches it", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "gz"),
			m("gz-1-s2", "gz", StateAlive, "gz", "hf"),
			m("hf-1-s1", "hf", StateDown, "hf"),
		}, "gz-1-s2"},
		{"own site alive but without a session", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "hf"),
			m("hf-1-s1", "hf", StateAlive),
			m("hf-2-s1", "hf", StateAlive, "bj"),
		}, "bj-1-m"},
		{"nobody reaches it", []Member{
			m("bj-1-m", "bj", StateAlive, "bj"),
			m("hf-1-s1", "hf", StateDown, "hf"),
		}, ""},
		{"no member gossips sessions: the old rule", []Member{
			m("bj-1-m", "bj", StateAlive),
			m("hf-1-s1", "hf", StateDown),
		}, "bj-1-m"},
	}
	for _, c := range cases {
		if got := viewKeeper(c.members, "hf"); got != c.want {
			t.Errorf("%s: keeper of hf = %q, want %q", c.name, got, c.want)
		}
	}
}
