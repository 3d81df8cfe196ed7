package topology

import "testing"

// TestViewKeeperNeedsASession checks who writes a site's view when bundles
// gossip which ensembles they reach: the site's own bundle first, then the
// first other bundle that reaches it; never a bundle that cannot. A bundle
// another suspects (it sees itself alive) keeps its site's view: another
// site takes it only once it is down.
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
		{"own site suspect here: it keeps it still", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "hf", "gz"),
			m("hf-1-s1", "hf", StateSuspect, "hf"),
		}, "hf-1-s1"},
		{"own site's first suspect here, alive at the others: the same keeper", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "hf"),
			m("hf-1-s1", "hf", StateSuspect, "hf"),
			m("hf-2-s1", "hf", StateAlive, "hf"),
		}, "hf-1-s1"},
		{"suspect but without a session", []Member{
			m("bj-1-m", "bj", StateAlive, "bj", "hf"),
			m("hf-1-s1", "hf", StateSuspect, "bj"),
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

// TestConsumerLagSiteLabel: offsets carry their site, whatever the root is
// called, and groups of the same name at two sites stay apart.
func TestConsumerLagSiteLabel(t *testing.T) {
	ends := map[TopicPartition]int64{{"t", 0}: 100}
	offs := []ConsumerOffset{
		{Root: "/prod-view-hf", Site: "hf", Group: "g", Topic: "t", BrokerID: 1, Partition: 0, Offset: 40},
		{Root: "/meta", Site: "gz", Group: "g", Topic: "t", BrokerID: 1, Partition: 0, Offset: 90},
		{Root: "/meta", Site: "bj", Group: "g", Topic: "t", BrokerID: 1, Partition: 0, Offset: 100},
		{Root: "/meta-view-sh", Group: "g", Topic: "t", BrokerID: 1, Partition: 0, Offset: 0},
	}
	got := map[string]int64{}
	for _, r := range consumerLag(1, ends, offs) {
		got[r.Site+" "+r.Root] = r.Bytes
	}
	want := map[string]int64{"hf /prod-view-hf": 60, "gz /meta": 10, "bj /meta": 0, "sh /meta-view-sh": 100}
	if len(got) != len(want) {
		t.Fatalf("reports %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d bytes, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// TestServeURLDown: an address is down only when gossip declared a member
// serving it down and none serving it is alive or suspect (a bundle
// restarted on the same port appears again under a new name).
func TestServeURLDown(t *testing.T) {
	m := func(name, url string, state MemberState) Member {
		return Member{Name: name, State: state, Meta: Meta{ServeURL: url}}
	}
	master := func(name, url string, gen uint64, state MemberState) Member {
		return Member{Name: name, State: state, Meta: Meta{ServeURL: url, Role: RoleMaster, Generation: gen}}
	}
	const bj, hf = "meta://127.0.0.1:8123", "meta://127.0.0.1:9123"
	cases := []struct {
		name    string
		members []Member
		url     string
		want    bool
	}{
		{"alive", []Member{m("bj-1", bj, StateAlive)}, bj, false},
		{"suspect is not down", []Member{m("bj-1", bj, StateSuspect)}, bj, false},
		{"down", []Member{m("bj-1", bj, StateDown), m("hf-1", hf, StateAlive)}, bj, true},
		{"without the scheme", []Member{m("bj-1", bj, StateDown)}, "127.0.0.1:8123", true},
		{"restarted on the same address", []Member{m("bj-1", bj, StateDown), m("bj-2", bj, StateAlive)}, bj, false},
		{"restarted, the new one suspect", []Member{m("bj-1", bj, StateDown), m("bj-2", bj, StateSuspect)}, bj, false},
		{"unknown address", []Member{m("hf-1", hf, StateDown)}, bj, false},
		{"empty url", []Member{m("x", "", StateDown)}, "", false},
		// A killed master replaced before gossip's suspicion of it ran out.
		{"suspect master superseded", []Member{master("bj-1", bj, 0, StateSuspect), master("hf-1", hf, 1, StateAlive)}, bj, true},
		{"suspect master superseded by a down one", []Member{master("bj-1", bj, 0, StateSuspect), master("hf-1", hf, 1, StateDown)}, bj, false},
		{"suspect master not superseded", []Member{master("bj-1", bj, 1, StateSuspect), master("hf-1", hf, 1, StateAlive)}, bj, false},
		{"alive master superseded", []Member{master("bj-1", bj, 0, StateAlive), master("hf-1", hf, 1, StateAlive)}, bj, false},
	}
	for _, c := range cases {
		if got := serveURLDown(c.members, c.url); got != c.want {
			t.Errorf("%s: serveURLDown(%s) = %t, want %t", c.name, c.url, got, c.want)
		}
	}
}

// TestServeURLNotAlive: an address a site view may not wake its producers
// with is one whose every member gossip holds suspect or down.
func TestServeURLNotAlive(t *testing.T) {
	m := func(name, url string, state MemberState) Member {
		return Member{Name: name, State: state, Meta: Meta{ServeURL: url}}
	}
	const bj, hf = "meta://127.0.0.1:8123", "meta://127.0.0.1:9123"
	cases := []struct {
		name    string
		members []Member
		url     string
		want    bool
	}{
		{"alive", []Member{m("bj-1", bj, StateAlive)}, bj, false},
		{"suspect", []Member{m("bj-1", bj, StateSuspect)}, bj, true},
		{"down", []Member{m("bj-1", bj, StateDown)}, bj, true},
		{"restarted on the same address", []Member{m("bj-1", bj, StateDown), m("bj-2", bj, StateAlive)}, bj, false},
		{"in another case", []Member{m("bj-1", "meta://Bj:1", StateSuspect)}, "meta://bJ:1", true},
		{"unknown address", []Member{m("hf-1", hf, StateDown)}, bj, false},
	}
	for _, c := range cases {
		if got := serveURLNotAlive(c.members, c.url); got != c.want {
			t.Errorf("%s: serveURLNotAlive(%s) = %t, want %t", c.name, c.url, got, c.want)
		}
	}
}
