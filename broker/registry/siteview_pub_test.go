package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPubForm: the producers' re-read decision and the form a view names
// a broker in. Producers are sent to read the brokers again only when a url
// they may still use, for another broker, is dead; the re-read then names
// the broker in a form no producer holds, so MetaQ 1.4.6's client never
// closes and reopens the same url (gecko can refuse the reopened
// connection); between re-reads the form producers may hold is kept.
func TestPubForm(t *testing.T) {
	const bj, hf, gz = "meta://bj:8123", "meta://hf:8123", "meta://gz:8123"
	const hfAlt = "meta://HF:8123"
	dead := func(urls ...string) func(string) bool {
		return func(u string) bool { return slices.Contains(urls, u) }
	}
	for _, c := range []struct {
		name       string
		held       []string
		url        string
		dead       func(string) bool
		wantForm   string
		wantReread bool
	}{
		{"no marker yet", nil, hf, nil, hf, false},
		{"steady", []string{hf}, hf, dead(), hf, false},
		{"moved from a live bundle: no re-read", []string{hf}, bj, dead(), bj, false},
		{"moved from a dead bundle", []string{hf}, bj, dead(hf), bj, true},
		{"moved while suspect, then dead: the other form", []string{hf, bj}, hf, dead(bj), hfAlt, true},
		{"the current url dead: re-reading changes nothing", []string{bj}, bj, dead(bj), bj, false},
		{"back to a live bundle", []string{hf, bj}, hf, dead(), hf, false},
		{"an older url died", []string{hf, bj, gz}, gz, dead(bj), "meta://GZ:8123", true},
		{"no dead predicate", []string{hf}, bj, nil, bj, false},
		{"the other form is kept between re-reads", []string{hfAlt, bj}, hf, dead(), hfAlt, false},
		{"a re-read from the other form goes back", []string{hfAlt, bj}, hf, dead(bj), hf, true},
		{"a dead name in the other case", []string{"meta://BJ:8123", hf}, hf,
			func(u string) bool { return strings.EqualFold(u, bj) }, hfAlt, true},
		{"an IPv4 url in the mapped form is dead", []string{"meta://[::ffff:10.0.0.1]:8123", hf}, hf, dead("meta://10.0.0.1:8123"), hfAlt, true},
	} {
		form, reread := pubForm(c.held, c.url, c.dead)
		if form != c.wantForm || reread != c.wantReread {
			t.Errorf("%s: pubForm(%v, %s) = %s, %t; want %s, %t", c.name, c.held, c.url, form, reread, c.wantForm, c.wantReread)
		}
	}
}

// TestAltURL: the second form of a url, and back.
func TestAltURL(t *testing.T) {
	for _, c := range []struct{ url, alt string }{
		{"meta://127.0.0.1:8123", "meta://[::ffff:127.0.0.1]:8123"},
		{"meta://metaq-1.hf.example.net:8123", "meta://METAQ-1.HF.EXAMPLE.NET:8123"},
		{"meta://METAQ-1:8123", "meta://metaq-1:8123"},
		{"meta://[::1]:8123", ""},
		{"meta://127.0.0.1", ""},
		{"http://127.0.0.1:80", ""},
	} {
		if got := altURL(c.url); got != c.alt {
			t.Errorf("altURL(%s) = %q, want %q", c.url, got, c.alt)
		}
		if c.alt != "" && strings.HasPrefix(c.alt, "meta://[") {
			if got := plainURL(c.alt); got != c.url {
				t.Errorf("plainURL(%s) = %q, want %q", c.alt, got, c.url)
			}
		}
	}
}

// TestSiteViewProducersMarker: against ZooKeeper, the view's
// topics-pub/<topic> gets the producers' marker view<id> before its
// <id>-m entry; a move of the entry between live addresses changes only the
// marker's data (no children event for producers); a move away from an
// address Dead reports wakes the producers watching topics-pub/<topic>
// exactly once, by re-creating the marker; and the marker is invisible to
// this package's readers and to what MetaQ's Java producer parses (its
// name has no '-').
func TestSiteViewProducersMarker(t *testing.T) {
	root := testRoot(t)
	viewRoot := root + "-view-bj"
	cleanupRoot(t, root)
	cleanupRoot(t, viewRoot)
	ctx := context.Background()

	o := testOptions(t, root)
	o.BrokerID, o.SlaveID, o.Port = 0, -1, 8123
	master := newRegistry(t, o)
	if err := master.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := master.RegisterTopic(ctx, "t", 2, true, true); err != nil {
		t.Fatal(err)
	}
	tool := newRegistry(t, testOptions(t, root))
	var deadURLs []string
	v, err := NewSiteView(tool, SiteViewOptions{ViewRoot: viewRoot, Dead: func(u string) bool { return slices.Contains(deadURLs, u) }})
	if err != nil {
		t.Fatal(err)
	}
	vp := Paths{Root: viewRoot}
	pub := vp.TopicsPub() + "/t"
	marker := pub + "/view0"
	local, masterURL := "meta://127.0.0.1:9123", "meta://127.0.0.1:8123"

	// watch arms a children watch on topics-pub/t, as a producer does.
	watch := func() <-chan struct{} { return watchChildren(t, tool, pub) }
	woke := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(500 * time.Millisecond):
			return false
		}
	}
	held := func() string {
		t.Helper()
		data, _, err := tool.Get(ctx, marker)
		if err != nil {
			t.Fatalf("%s: %v", marker, err)
		}
		return strings.ReplaceAll(string(data), "\n", " ")
	}

	// The view names bj's own bundle.
	if _, err := v.Apply(ctx, map[int]string{0: local}); err != nil {
		t.Fatal(err)
	}
	if got := held(); got != local {
		t.Fatalf("marker holds %q, want %q", got, local)
	}
	_, mst, err := tool.Get(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	_, est, err := tool.Get(ctx, pub+"/0-m")
	if err != nil {
		t.Fatal(err)
	}
	if mst.Czxid >= est.Czxid {
		t.Fatalf("the marker (zxid %d) was created after 0-m (zxid %d): a producer could see the entry, then be woken by the marker", mst.Czxid, est.Czxid)
	}
	tbs, err := tool.TopicBrokers(ctx, TreeTopicsPub, "t")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tbs) != fmt.Sprint([]TopicBroker{{Broker: "0-m", BrokerID: 0, SlaveID: -1, NumParts: 2}}) {
		t.Fatalf("the view's topics-pub/t reads as %+v", tbs)
	}
	kids, err := tool.Children(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if got := javaProducerBrokers(kids); fmt.Sprint(got) != "[0]" {
		t.Fatalf("children %v parse, as MetaQ's producer does, to brokers %v, want [0]", kids, got)
	}

	// bj's bundle is suspect: the entry moves to the master, producers are
	// left alone (the marker's data records the new url).
	w := watch()
	if _, err := v.Apply(ctx, map[int]string{0: masterURL}); err != nil {
		t.Fatal(err)
	}
	if woke(w) {
		t.Fatal("a move away from a live address woke the producers")
	}
	if got := held(); got != local+" "+masterURL {
		t.Fatalf("marker holds %q, want both urls", got)
	}

	// Declared dead: one children event, the marker holds the master alone.
	// Consumers (topics-sub) are not woken: the address did not change.
	deadURLs = []string{local}
	_, cw, err := tool.ChildrenW(ctx, vp.TopicsSub()+"/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Apply(ctx, map[int]string{0: masterURL}); err != nil {
		t.Fatal(err)
	}
	if !woke(w) {
		t.Fatal("the producers were not woken when an address they may use died")
	}
	// The producers may hold masterURL (named since their last re-read):
	// the re-read names the master in its other form, so MetaQ's client
	// does not close and reopen the same url.
	masterAlt := "meta://[::ffff:127.0.0.1]:8123"
	if got := held(); got != masterAlt {
		t.Fatalf("marker holds %q, want %q", got, masterAlt)
	}
	if woke(cw) {
		t.Fatal("a change of the master's form alone woke the consumers")
	}
	if data, _, err := tool.Get(ctx, vp.Broker(0, -1)); err != nil || string(data) != masterAlt {
		t.Fatalf("the view's master entry is %q (%v), want %q", data, err, masterAlt)
	}
	kids, _ = tool.Children(ctx, pub)
	slices.Sort(kids)
	if fmt.Sprint(kids) != "[0-m view0]" {
		t.Fatalf("topics-pub/t children %v", kids)
	}
	// Steady afterwards: no more events.
	w = watch()
	if _, err := v.Apply(ctx, map[int]string{0: masterURL}); err != nil {
		t.Fatal(err)
	}
	if woke(w) {
		t.Fatal("a steady apply woke the producers")
	}
	if got := held(); got != masterAlt {
		t.Fatalf("after a steady apply the marker holds %q, want the form producers hold, %q", got, masterAlt)
	}
	if data, _, err := tool.Get(ctx, vp.Broker(0, -1)); err != nil || string(data) != masterAlt {
		t.Fatalf("after a steady apply the view's master entry is %q (%v), want %q", data, err, masterAlt)
	}
}

// javaProducerBrokers is what MetaQ 1.4.6's MetaZookeeper makes of a
// topics-pub/<topic> children list: getMasterBrokersByTopic keeps names
// ending in "-m", getPartitionsForTopicsFromMaster names split on '-' into
// two with "m" second.
func javaProducerBrokers(kids []string) []string {
	var out []string
	for _, k := range kids {
		f := strings.Split(k, "-")
		if strings.HasSuffix(k, "-m") && len(f) == 2 && f[1] == "m" {
			out = append(out, f[0])
		}
	}
	return out
}

// TestSiteViewWakesProducersOnlyWhenEveryEntryIsAlive: a whole site dies,
// and the view had named its masters of broker ids 0 and 1 (the site's own
// replicas were behind). Gossip declares master 0 dead while master 1 is
// still suspect: the view names the live replica for 0 but does not wake
// its producers yet, since a woken MetaQ 1.4.6 producer would read id 1's
// entry, still the suspect master, and wait 10 s for it. Once id 1's entry
// names a live address too, the producers are woken once, and read live
// addresses only.
func TestSiteViewWakesProducersOnlyWhenEveryEntryIsAlive(t *testing.T) {
	const m0, m1 = "meta://127.0.0.1:8120", "meta://127.0.0.1:8121" // bj's masters
	const r0, r1 = "meta://127.0.0.1:9120", "meta://127.0.0.1:9121" // gz's replicas
	wv := newWakeView(t, []string{"t"}, []string{"t"})
	// entries is what a woken producer reads: each id's master entry,
	// in the plain form.
	entries := func() []string {
		t.Helper()
		var out []string
		for _, e := range wv.entries() {
			out = append(out, plainURL(e))
		}
		return out
	}

	wv.apply(map[int]string{0: r0, 1: r1})
	wv.apply(map[int]string{0: m0, 1: m1}) // the replicas fell behind
	w := wv.watch("t")

	// bj is killed: master 0 declared down, master 1 still suspect.
	wv.dead, wv.notAlive = []string{m0}, []string{m0, m1}
	wv.apply(map[int]string{0: r0, 1: m1})
	if wokeWithin(w, 500*time.Millisecond) {
		t.Fatalf("the producers were woken while id 1's entry names suspect %s: they read %v", m1, entries())
	}

	// Master 1 is declared down too: one wake, live addresses only.
	wv.dead = []string{m0, m1}
	wv.apply(map[int]string{0: r0, 1: r1})
	if !wokeWithin(w, 10*time.Second) {
		t.Fatal("the producers were not woken once every entry named a live address")
	}
	if got := entries(); fmt.Sprint(got) != fmt.Sprint([]string{r0, r1}) {
		t.Fatalf("woken producers read %v, want %v", got, []string{r0, r1})
	}
	w = wv.watch("t")
	wv.apply(map[int]string{0: r0, 1: r1})
	if wokeWithin(w, 500*time.Millisecond) {
		t.Fatal("a steady apply woke the producers again")
	}
}

// watchChildren arms a children watch on path through r, as a MetaQ
// producer watches topics-pub/<topic>; the channel closes when it fires.
func watchChildren(t *testing.T, r *Registry, path string) <-chan struct{} {
	t.Helper()
	_, w, err := r.ChildrenW(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		<-w
		close(ch)
	}()
	return ch
}

// TestSiteViewWakeFlipsEveryEntryOfTheTopic: topic t lives on broker ids 0
// and 1, topic u on id 1 alone. Id 0's entry moves off its site's replica,
// which then dies: the view wakes t's producers. A woken MetaQ 1.4.6
// producer closes and reopens its connection to every broker id of t, so
// every entry it reads, id 1's unchanged one too, must be in a string form
// other than the one it held (gecko refuses a reopened url while the closing
// connection still counts); u's producers are not woken, keep their
// connection in the old form, and u's marker records the new one.
func TestSiteViewWakeFlipsEveryEntryOfTheTopic(t *testing.T) {
	const m0, m1 = "meta://127.0.0.1:8120", "meta://127.0.0.1:8121"
	const r0 = "meta://127.0.0.1:9120"
	wv := newWakeView(t, []string{"t"}, []string{"t", "u"})
	marker := func(topic string, id int) string {
		t.Helper()
		data, _, err := wv.tool.Get(context.Background(), fmt.Sprintf("%s/%s/view%d", wv.vp.TopicsPub(), topic, id))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(data), "\n", " ")
	}
	// wake makes the view wake t's producers and checks that each entry
	// they read changed form and nothing else, that u's producers slept,
	// and that t's markers hold what the producers now use.
	wake := func(targets map[int]string) []string {
		t.Helper()
		before := wv.entries()
		wt := wv.watch("t")
		wu := wv.watch("u")
		wv.apply(targets)
		if !wokeWithin(wt, 10*time.Second) {
			t.Fatal("t's producers were not woken")
		}
		after := wv.entries()
		for id := range 2 {
			if after[id] == before[id] || !SameViewURL(after[id], before[id]) {
				t.Errorf("id %d's entry was %s before the wake and is %s after: a woken producer reopens the url it held (want the same address in the other form)", id, before[id], after[id])
			}
			if got := marker("t", id); got != after[id] {
				t.Errorf("t's marker of id %d holds %q after the wake, want %q", id, got, after[id])
			}
		}
		if wokeWithin(wu, 500*time.Millisecond) {
			t.Error("u's producers were woken: u has no dead url")
		}
		return after
	}

	wv.apply(map[int]string{0: r0})
	wv.apply(map[int]string{0: m0}) // gz's replica of 0 fell behind: no wake
	wv.dead = []string{r0}          // and died: t's producers may still use it
	after := wake(map[int]string{0: m0})
	if want := []string{altURL(m0), altURL(m1)}; fmt.Sprint(after) != fmt.Sprint(want) {
		t.Fatalf("entries after the wake %v, want %v", after, want)
	}
	if got, want := marker("u", 1), m1+" "+altURL(m1); got != want {
		t.Fatalf("u's marker of id 1 holds %q, want %q (u's producers hold the first, may read the second)", got, want)
	}

	// A steady apply keeps the forms and wakes nobody.
	wt := wv.watch("t")
	wv.apply(map[int]string{0: m0})
	if wokeWithin(wt, 500*time.Millisecond) {
		t.Fatal("a steady apply woke t's producers")
	}
	if got := wv.entries(); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Fatalf("a steady apply changed the entries to %v, want %v", got, after)
	}

	// Back to the replica, then master 0 dies: the next wake flips every
	// entry of t back; id 1 goes to the form t's producers do not hold,
	// though u's producers hold it (their connection stays theirs).
	wv.dead = nil
	wv.apply(map[int]string{0: r0})
	wv.dead = []string{m0}
	after = wake(map[int]string{0: r0})
	if want := []string{altURL(r0), m1}; fmt.Sprint(after) != fmt.Sprint(want) {
		t.Fatalf("entries after the second wake %v, want %v", after, want)
	}
}

// wokeWithin reports whether ch (a producer's watch) fired within d.
func wokeWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// applyView applies targets to the site view v, failing the test on error.
func applyView(t *testing.T, v *SiteView, targets map[int]string) {
	t.Helper()
	if _, err := v.Apply(context.Background(), targets); err != nil {
		t.Fatal(err)
	}
}

// wakeView is the set-up of the site-view wake tests: a master of each
// broker id i (port 8120+i) registered on a fresh root with topics[i], two
// partitions each, and a site view of that root whose Dead and NotAlive
// report the urls in dead and notAlive.
type wakeView struct {
	t              *testing.T
	tool           *Registry
	v              *SiteView
	vp             Paths
	ids            int // broker ids 0 to ids-1
	dead, notAlive []string
}

// newWakeView registers a master for each entry of topics and builds the
// view; Dead and NotAlive report nothing until the test sets dead and
// notAlive.
func newWakeView(t *testing.T, topics ...[]string) *wakeView {
	t.Helper()
	root := testRoot(t)
	viewRoot := root + "-view-gz"
	cleanupRoot(t, root)
	cleanupRoot(t, viewRoot)
	ctx := context.Background()
	for id, ts := range topics {
		o := testOptions(t, root)
		o.BrokerID, o.SlaveID, o.Port = id, -1, 8120+id
		master := newRegistry(t, o)
		if err := master.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		for _, topic := range ts {
			if err := master.RegisterTopic(ctx, topic, 2, true, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	wv := &wakeView{t: t, tool: newRegistry(t, testOptions(t, root)), vp: Paths{Root: viewRoot}, ids: len(topics)}
	v, err := NewSiteView(wv.tool, SiteViewOptions{ViewRoot: viewRoot,
		Dead:     func(u string) bool { return slices.Contains(wv.dead, u) },
		NotAlive: func(u string) bool { return slices.Contains(wv.notAlive, u) }})
	if err != nil {
		t.Fatal(err)
	}
	wv.v = v
	return wv
}

// apply applies targets to the view.
func (wv *wakeView) apply(targets map[int]string) { applyView(wv.t, wv.v, targets) }

// watch arms a children watch on the view's topics-pub/<topic>, as the
// topic's producers do.
func (wv *wakeView) watch(topic string) <-chan struct{} {
	return watchChildren(wv.t, wv.tool, wv.vp.TopicsPub()+"/"+topic)
}

// entries is each broker id's master entry in the view, as written.
func (wv *wakeView) entries() []string {
	wv.t.Helper()
	var out []string
	for id := range wv.ids {
		data, _, err := wv.tool.Get(context.Background(), wv.vp.Broker(id, -1))
		if err != nil {
			wv.t.Fatal(err)
		}
		out = append(out, string(data))
	}
	return out
}
