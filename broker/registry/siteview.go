package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
)

// SiteViewRoot is the ZooKeeper root of a site's consumer view: a Java
// consumer in that site sets zkRoot to it (and nothing else) to read from its
// own site's replica.
func SiteViewRoot(site string) string { return "/meta-view-" + site }

// SiteViewOptions configure a SiteView.
type SiteViewOptions struct {
	// ViewRoot is the view's root, e.g. SiteViewRoot("hf"). It must differ
	// from the registry's own (real) root.
	ViewRoot string
	// Sources are other registries whose real roots are read together with
	// the view registry's own. With one ZooKeeper ensemble per site, a bundle
	// of another site that keeps this site's view (its own bundles being
	// down, their registrations expired) adds its own registry: that is where
	// it finds the master's entry and the topics' partition counts.
	Sources []*Registry
	// Dead reports whether the broker serving a url (meta://host:port) is
	// known to be dead, not merely unreachable for a moment (gossip declared
	// its bundle down). Producers on the view that may still use a dead url
	// are made to read the brokers again (see SiteView); nil: never.
	Dead func(url string) bool
	// NotAlive reports whether the broker serving a url is not known alive
	// now (gossip holds it suspect or declared it down). Producers are not
	// made to read the brokers again while any entry of the view names such
	// a url (see SiteView); nil: every url is alive.
	NotAlive func(url string) bool
	// Logger receives the view's logs; nil discards.
	Logger *slog.Logger
}

// SiteView writes a per-site copy of the broker and topic nodes of the real
// root under another root, in which each broker id's master entry points at
// the address the caller chose (that site's replica while it is healthy and
// caught up, the real master otherwise). Unmodified MetaQ consumers that use
// the view root as zkRoot then read from that address.
//
// What it writes under ViewRoot, all persistent (the view must outlive the
// bundle that wrote it last, so any bundle can take over keeping it):
//
//	brokers/ids/<id>                     = chosen url (for old clients)
//	brokers/ids/<id>/master              = chosen url
//	brokers/topics-sub/<topic>/<id>-m    = {"numParts":n,"broker":"<id>-m"}
//	brokers/topics-pub/<topic>/<id>-m    = the same (producers, pull consumers)
//	brokers/topics-pub/<topic>/view<id>  = the urls producers may use (below)
//	brokers/topics/<topic>/<id>-m        = n
//
// where n is the largest partition count any of id's registrations (master
// or slaves) has for the topic in the real root. Slave entries are not
// copied: the view's master entry is the choice. consumers/ is left to the
// consumers themselves, so a group's offsets live under the view root.
//
// A Java consumer only re-reads brokers/ids when the children of a
// topics-sub/<topic> node it watches change. So when an id's url changes,
// SiteView toggles a marker child "view<id>" (no '-', which the consumer
// skips as an invalid broker name) under each of the id's topics: the
// consumer rebalances, finds its partitions unchanged, sees the cluster
// changed, and reconnects to the new address.
//
// A Java producer (MetaQ 1.4.6's ProducerZooKeeper) likewise re-reads
// brokers/ids only when the children of topics-pub/<topic> change, and then
// closes its connections and opens them again, failing the send it has in
// flight. A move between the site's replica and the master needs no re-read
// (with forwardPuts a site's bundle carries puts to the master, and the
// master takes them), so producers are sent to re-read only when an address
// they may still use is dead: the marker "view<id>" under topics-pub/<topic>
// holds, one a line, the urls id's entry has named since the producers last
// re-read; when one of them, for another broker, is dead (Options.Dead) the
// marker is deleted and created again, in one multi with the topic's other
// markers (below), which wakes every producer watching the topic once.
//
// A woken producer reads the master entry of every broker id of the topic
// and waits up to 10 s on ZooKeeper's event thread for each address it
// cannot connect to (ProducerZooKeeper.syncedUpdateBrokersInfo). So the view
// wakes its producers only while no entry it names is an address
// Options.NotAlive reports: when a whole site dies its broker ids are
// declared dead one by one, and a producer woken for the first must not
// read the next one's dead master (the real root leaves superseded masters
// out of topics-pub for the same reason: ensureMasterPubLocked). The
// markers keep the dead urls meanwhile, so the wake follows at the first
// Apply after every entry names a live address.
//
// On that re-read the producer closes its connection to every broker id of
// the topic, not only the one that moved, and connects to what the view
// names. If that were the very string it used, gecko (MetaQ 1.4.6's
// transport, one connection per url) could refuse the new connection while
// the closing one still counts ("连接数(…)超过设定值1") and leave the
// producer with none ("无可用连接") for good. So a wake of a topic's
// producers names every broker id of that topic in a form none of the
// topic's markers holds: the other form (an IPv4 host as [::ffff:a.b.c.d],
// a host name with its letters' case flipped: the same address to the Java
// and Go clients, a different url to gecko) when they hold the current one,
// and the view keeps naming it in that form, in brokers/ids too, until the
// next wake (SameViewURL compares the forms); a change of form alone does
// not toggle the consumers' marker. A woken topic's markers are reset in
// one multi (one children change, so each producer re-reads once), each
// holding its id's new form alone. The entry brokers/ids/<id>/master is
// shared by every topic on the id: producers of another topic, not woken,
// keep their connection in the old form (the Java client closes a url only
// when its last reference goes, so a producer of both topics loses
// nothing) and their marker records the new form too. A broker with no
// other form (an IPv6 literal), or whose two forms the woken producers may
// both hold, is named as before. The marker
// is created before the topic's first <id>-m entry, so a new view costs no
// re-read; a view written before markers existed gets its marker, and its
// producers one re-read, at the first Apply. Java producers and consumers,
// the Go client and this package's readers skip the name (it has no '-').
//
// Apply is safe for concurrent use (calls are serialised).
type SiteView struct {
	r        *Registry
	sources  []*Registry // r first, then SiteViewOptions.Sources
	src      Paths
	view     Paths
	dead     func(url string) bool
	notAlive func(url string) bool
	log      *slog.Logger
	mu       sync.Mutex
	waitFor  string // under mu: the url the last deferred wake waited for, "" when none
}

// NewSiteView returns a SiteView that mirrors r's root into opts.ViewRoot.
func NewSiteView(r *Registry, opts SiteViewOptions) (*SiteView, error) {
	root := NormalizeRoot(opts.ViewRoot)
	if opts.ViewRoot == "" || root == "" {
		return nil, errors.New("registry: site view needs a view root")
	}
	if root == r.Paths().Root {
		return nil, fmt.Errorf("registry: site view root %s is the real root", root)
	}
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	sources := append([]*Registry{r}, opts.Sources...)
	return &SiteView{r: r, sources: sources, src: r.Paths(), view: Paths{Root: root}, dead: opts.Dead,
		notAlive: opts.NotAlive, log: l.With("component", "siteview", "view", root)}, nil
}

// Root returns the view's root.
func (v *SiteView) Root() string { return v.view.Root }

// SiteViewChange reports one broker id whose url Apply changed.
type SiteViewChange struct {
	BrokerID int
	Old, New string // "" when absent
}

// Apply reconciles the view with the real root and targets: targets maps a
// broker id to the url (meta://host:port) its view master entry must hold;
// ids without a target keep the real root's master (or, while the master is
// absent, its first slave, as the Java client would pick). Ids that exist in
// neither are removed. It returns the ids whose url changed.
func (v *SiteView) Apply(ctx context.Context, targets map[int]string) ([]SiteViewChange, error) {
	v.mu.Lock()
	defer v.mu.Unlock()

	want, parts, err := v.readSources(ctx, targets)
	if err != nil {
		return nil, err
	}
	// The form of each url the view names (see SiteView) and whether its
	// producers must read the brokers again.
	pw, err := v.pubForms(ctx, want, parts[TreeTopicsPub])
	if err != nil {
		return nil, err
	}

	// Broker entries.
	var changes []SiteViewChange
	have, err := v.childInts(ctx, v.view.BrokerIDs())
	if err != nil {
		return nil, err
	}
	for id, url := range want {
		old, err := v.get(ctx, v.view.Broker(id, -1))
		if err != nil {
			return nil, err
		}
		if old != url {
			if err := v.set(ctx, v.view.Broker(id, -1), url); err != nil {
				return nil, err
			}
			changes = append(changes, SiteViewChange{BrokerID: id, Old: old, New: url})
		}
		if cur, err := v.get(ctx, v.view.BrokerID(id)); err != nil {
			return nil, err
		} else if cur != url {
			if err := v.set(ctx, v.view.BrokerID(id), url); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range have {
		if _, ok := want[id]; ok {
			continue
		}
		old, _ := v.get(ctx, v.view.Broker(id, -1))
		if err := v.deleteTree(ctx, v.view.BrokerID(id)); err != nil {
			return nil, err
		}
		changes = append(changes, SiteViewChange{BrokerID: id, Old: old})
	}

	// Topic entries, per tree.
	changed := map[int]bool{}
	for _, c := range changes {
		// A change of form alone (pubForm) is the same address: consumers
		// need not re-read for it.
		if c.New != "" && SameViewURL(c.Old, c.New) {
			continue
		}
		changed[c.BrokerID] = true
	}
	for _, tree := range viewTrees {
		dir := v.view.Root + "/brokers/" + string(tree)
		viewTopics, err := v.children(ctx, dir)
		if err != nil {
			return nil, err
		}
		topics := map[string]bool{}
		for _, t := range viewTopics {
			topics[t] = true
		}
		for t := range parts[tree] {
			topics[t] = true
		}
		for topic := range topics {
			if err := v.syncTopic(ctx, tree, dir+"/"+topic, parts[tree][topic], changed, want, pw.topics[topic]); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range changes {
		v.log.Info("SITEVIEW("+v.view.Root+"): broker master entry changed", "brokerId", c.BrokerID, "from", c.Old, "to", c.New)
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].BrokerID < changes[j].BrokerID })
	return changes, nil
}

var viewTrees = []Tree{TreeTopicsSub, TreeTopicsPub, TreeTopics}

// readSources reads the brokers and topic registrations of every source's
// real root and returns each broker id's url (a master entry found in any
// source wins over slave entries; targets win over both) and, per tree, topic
// and broker id, the largest partition count registered.
func (v *SiteView) readSources(ctx context.Context, targets map[int]string) (map[int]string, map[Tree]map[string]map[int]int, error) {
	masters := map[int]string{}
	slaves := map[int]map[int]string{}
	for _, src := range v.sources {
		brokers, err := src.Brokers(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("registry: site view %s: read %s: %w", v.view.Root, src.opts.Connect, err)
		}
		for _, b := range brokers {
			if b.Master != "" && masters[b.ID] == "" {
				masters[b.ID] = b.Master
			}
			for s, url := range b.Slaves {
				if slaves[b.ID] == nil {
					slaves[b.ID] = map[int]string{}
				}
				if _, ok := slaves[b.ID][s]; !ok {
					slaves[b.ID][s] = url
				}
			}
		}
	}
	want := map[int]string{}
	for id, url := range masters {
		want[id] = url
	}
	for id, ss := range slaves {
		if _, ok := want[id]; ok || len(ss) == 0 {
			continue
		}
		// As the Java client would pick while the master is absent: the
		// first slave.
		want[id] = ss[slices.Min(slices.Collect(maps.Keys(ss)))]
	}
	for id, url := range targets {
		if url != "" {
			want[id] = url
		}
	}

	// Topic registrations per tree: topic -> id -> numParts.
	parts := map[Tree]map[string]map[int]int{}
	for _, tree := range viewTrees {
		parts[tree] = map[string]map[int]int{}
		for _, src := range v.sources {
			topics, err := src.Topics(ctx, tree)
			if err != nil {
				return nil, nil, fmt.Errorf("registry: site view %s: %w", v.view.Root, err)
			}
			for _, topic := range topics {
				tbs, err := src.TopicBrokers(ctx, tree, topic)
				if err != nil {
					return nil, nil, fmt.Errorf("registry: site view %s: %w", v.view.Root, err)
				}
				for _, tb := range tbs {
					if _, ok := want[tb.BrokerID]; !ok {
						continue
					}
					m := parts[tree][topic]
					if m == nil {
						m = map[int]int{}
						parts[tree][topic] = m
					}
					m[tb.BrokerID] = max(m[tb.BrokerID], tb.NumParts)
				}
			}
		}
	}
	return want, parts, nil
}

// syncTopic makes one view topic directory hold exactly <id>-m for each id
// in want, toggles the consumers' marker of every changed id that stays
// (topics-sub), and keeps the producers' marker of every id (topics-pub,
// syncPubMarker, wakePub); urls is each id's url in the view, wake whether
// the topic's producers must read the brokers again.
func (v *SiteView) syncTopic(ctx context.Context, tree Tree, dir string, want map[int]int, changed map[int]bool, urls map[int]string, wake bool) error {
	kids, err := v.children(ctx, dir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, k := range kids {
		present[k] = true
	}
	if tree == TreeTopicsPub && wake {
		// Before the <id>-m entries, as syncPubMarker.
		if err := v.wakePub(ctx, dir, want, urls); err != nil {
			return err
		}
	}
	for id, n := range want {
		name := BrokerString(id, -1)
		val := TopicJSON(n, name)
		if tree == TreeTopics {
			val = strconv.Itoa(n)
		}
		if tree == TreeTopicsPub && !wake {
			// Before <id>-m: a producer that finds the entry finds the
			// marker too, and its creation wakes nobody.
			if err := v.syncPubMarker(ctx, dir, id, urls[id]); err != nil {
				return err
			}
		}
		if cur, err := v.get(ctx, dir+"/"+name); err != nil {
			return err
		} else if cur != val {
			if err := v.set(ctx, dir+"/"+name, val); err != nil {
				return err
			}
		}
		if tree == TreeTopicsSub && changed[id] && present[name] {
			// Only a node that was already there needs the marker: a new
			// <id>-m is itself a children change.
			marker := dir + "/view" + strconv.Itoa(id)
			if present["view"+strconv.Itoa(id)] {
				err = v.r.Delete(ctx, marker)
			} else {
				err = v.r.SetPersistent(ctx, marker, nil)
			}
			if err != nil {
				return fmt.Errorf("registry: site view marker %s: %w", marker, err)
			}
		}
	}
	for _, k := range kids {
		id, slave, ok := ParseBrokerString(k)
		if ok && slave < 0 {
			if _, keep := want[id]; keep {
				continue
			}
		}
		if !ok && strings.HasPrefix(k, "view") {
			if _, keep := want[atoiOr(k[len("view"):], -1)]; keep {
				continue
			}
		}
		if err := v.r.Delete(ctx, dir+"/"+k); err != nil {
			return fmt.Errorf("registry: site view delete %s/%s: %w", dir, k, err)
		}
	}
	return nil
}

// pubWake is what an Apply does to the view's producers (see SiteView):
// the topics whose producers it wakes (pubForms writes the forms into want).
type pubWake struct {
	topics map[string]bool // topics-pub topics whose producers are woken
}

// pubForms decides, for each broker id in want, the form of its url the
// view names, and which topics' producers must read the brokers again, from
// the urls the producers' markers in the view's topics-pub hold (pubParts:
// topic -> ids). It rewrites want's urls to the chosen forms.
//
// A topic's producers are woken when an id of the topic needs it (pubForm,
// a dead url among the id's held ones). A woken MetaQ 1.4.6 producer closes
// and reopens its connection to every broker id of the topic, so every id
// of a woken topic is named in a form its producers do not hold (the other
// form when they hold the first); a producer of another topic, not woken,
// keeps its connection in the old form (RemotingClientWrapper closes a url
// only when its last reference goes) and its marker records the new form.
func (v *SiteView) pubForms(ctx context.Context, want map[int]string, pubParts map[string]map[int]int) (pubWake, error) {
	heldBy := map[string]map[int][]string{} // topic -> id -> urls; absent: no marker
	held := map[int][]string{}
	for topic, ids := range pubParts {
		for id := range ids {
			if _, ok := want[id]; !ok {
				continue
			}
			marker := v.view.TopicsPub() + "/" + topic + "/view" + strconv.Itoa(id)
			data, _, err := v.r.Get(ctx, marker)
			if errors.Is(err, ErrNoNode) {
				continue
			}
			if err != nil {
				return pubWake{}, fmt.Errorf("registry: site view read %s: %w", marker, err)
			}
			if heldBy[topic] == nil {
				heldBy[topic] = map[int][]string{}
			}
			urls := strings.Fields(string(data))
			heldBy[topic][id] = urls
			held[id] = append(held[id], urls...)
		}
	}
	reread := map[int]bool{}
	forms := map[int]string{}
	wake := false
	for id, url := range want {
		forms[id], reread[id] = pubForm(held[id], url, v.dead)
		wake = wake || reread[id]
	}
	if wait := v.wakeBlocker(want); wake && wait != "" {
		// Not yet: a woken producer would wait 10 s for that address.
		for id, url := range want {
			forms[id], reread[id] = pubForm(held[id], url, nil)
		}
		wake = false
		if v.waitFor != wait {
			v.log.Info("SITEVIEW("+v.view.Root+"): producers not made to read the brokers again yet: an entry names an address gossip does not hold alive", "url", wait)
		}
		v.waitFor = wait
	} else {
		v.waitFor = ""
	}
	pw := pubWake{topics: map[string]bool{}}
	if wake {
		for topic, ids := range pubParts {
			for id := range ids {
				// A topic with no marker yet (a new one) has no
				// producers to wake: syncPubMarker creates its markers.
				if reread[id] && heldBy[topic] != nil {
					pw.topics[topic] = true
				}
			}
		}
		// Every id a woken producer reads: a form none of the woken
		// topics' producers holds.
		heldWoken := map[int][]string{}
		for topic := range pw.topics {
			for id := range pubParts[topic] {
				if _, ok := want[id]; !ok {
					continue
				}
				urls, ok := heldBy[topic][id]
				if !ok {
					// No marker yet: the producers hold what the entry
					// names now.
					cur, err := v.get(ctx, v.view.Broker(id, -1))
					if err != nil {
						return pubWake{}, err
					}
					if cur != "" {
						urls = []string{cur}
					}
				}
				heldWoken[id] = append(heldWoken[id], urls...)
			}
		}
		for id, h := range heldWoken {
			forms[id] = freshForm(h, want[id])
		}
	}
	maps.Copy(want, forms)
	return pw, nil
}

// wakeBlocker returns a url among want's that Options.NotAlive reports,
// the smallest, or "" when there is none.
func (v *SiteView) wakeBlocker(want map[int]string) string {
	if v.notAlive == nil {
		return ""
	}
	var out []string
	for _, url := range want {
		if v.notAlive(url) || v.notAlive(plainURL(url)) {
			out = append(out, url)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return slices.Min(out)
}

// syncPubMarker keeps the producers' marker of broker id under a
// topics-pub/<topic> directory of the view (see SiteView) while its
// producers are not woken: it records url among the urls producers may use.
func (v *SiteView) syncPubMarker(ctx context.Context, dir string, id int, url string) error {
	if url == "" {
		return nil
	}
	marker := dir + "/view" + strconv.Itoa(id)
	data, st, err := v.r.Get(ctx, marker)
	if errors.Is(err, ErrNoNode) {
		// Its creation is the children change that makes producers
		// already watching read the brokers.
		if err := v.r.SetPersistent(ctx, marker, []byte(url)); err != nil {
			return fmt.Errorf("registry: site view producers' marker %s: %w", marker, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("registry: site view read %s: %w", marker, err)
	}
	held := strings.Fields(string(data))
	if slices.Contains(held, url) {
		return nil
	}
	// A data change: producers watch children only, so nobody wakes.
	val := []byte(strings.Join(append(held, url), "\n"))
	if err := v.r.call(ctx, func() error { _, err := v.r.conn.Set(marker, val, st.Version); return err }); err != nil {
		return fmt.Errorf("registry: site view producers' marker %s: %w", marker, err)
	}
	return nil
}

// wakePub wakes the producers of one topics-pub/<topic> directory of the
// view (see SiteView) with one children change: in one multi, the marker of
// the topic's smallest id that has one is deleted and created again, every
// id's marker (ids: id -> numParts) ends holding that id's url alone (urls),
// the form every woken producer reads, and a missing one is created.
func (v *SiteView) wakePub(ctx context.Context, dir string, ids map[int]int, urls map[int]string) error {
	var ops []any
	held := map[int][]string{}
	named := map[int]string{}
	toggled := false
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		url := urls[id]
		if url == "" {
			continue
		}
		named[id] = url
		marker := dir + "/view" + strconv.Itoa(id)
		data, st, err := v.r.Get(ctx, marker)
		switch {
		case errors.Is(err, ErrNoNode):
			ops = append(ops, &zk.CreateRequest{Path: marker, Data: []byte(url), Acl: openACL})
			continue
		case err != nil:
			return fmt.Errorf("registry: site view read %s: %w", marker, err)
		case !toggled:
			toggled = true
			ops = append(ops, &zk.DeleteRequest{Path: marker, Version: st.Version},
				&zk.CreateRequest{Path: marker, Data: []byte(url), Acl: openACL})
		case string(data) != url:
			ops = append(ops, &zk.SetDataRequest{Path: marker, Data: []byte(url), Version: st.Version})
		}
		held[id] = strings.Fields(string(data))
	}
	if len(ops) == 0 {
		return nil
	}
	if err := v.r.call(ctx, func() error { _, err := v.r.conn.Multi(ops...); return err }); err != nil {
		return fmt.Errorf("registry: site view wake producers of %s: %w", dir, err)
	}
	v.log.Info("SITEVIEW("+v.view.Root+"): producers read the brokers again: an address they may still use is dead",
		"topic", dir[strings.LastIndexByte(dir, '/')+1:], "held", held, "urls", named)
	return nil
}

// pubForm decides how a site view names one broker id whose chosen url is
// url (meta://host:port), given held, the urls its producers' markers have
// recorded since its producers last read the brokers (every string a
// producer on the view can be using), and dead (nil: none is). It returns
// the string to write and whether the producers must read the brokers
// again: when a held url for another broker is dead.
//
// MetaQ 1.4.6's producer, on a re-read, closes its connection and connects
// to what the view names; when that is the string it already used, gecko
// can refuse the new connection while the closing one still counts against
// the url's one connection ("连接数(…)超过设定值1"), and the producer is left
// with none. So a re-read names the broker in a form no producer holds
// (altURL: the same address written differently), and between re-reads
// the view keeps whichever form the producers may hold.
func pubForm(held []string, url string, dead func(string) bool) (form string, reread bool) {
	alt := altURL(url)
	same := func(h string) bool { return h == url || (alt != "" && h == alt) }
	for _, h := range held {
		if !same(h) && dead != nil && (dead(h) || dead(plainURL(h))) {
			reread = true
			break
		}
	}
	if reread {
		return freshForm(held, url), true
	}
	for i := len(held) - 1; i >= 0; i-- {
		if same(held[i]) {
			return held[i], false
		}
	}
	return url, false
}

// freshForm is the form a re-read names a broker in: url, or its other
// form when held (the urls the re-reading producers may hold) has url and
// not the other form; url when both or neither are held.
func freshForm(held []string, url string) string {
	alt := altURL(url)
	if !slices.Contains(held, url) || alt == "" || slices.Contains(held, alt) {
		return url
	}
	return alt
}

// altURL is url (meta://host:port) written in a second form that MetaQ
// 1.4.6's Java client (Broker.getZKString keeps URI.getHost's text) and the
// Go client both reach at the same address: an IPv4 host as its
// IPv4-mapped IPv6 literal ([::ffff:a.b.c.d], which Java and Go resolve to
// the IPv4 address, so the connection is the same IPv4 one), a host name
// with its letters' case flipped (names resolve case-insensitively). ""
// when there is none (an IPv6 literal, a name without letters).
func altURL(url string) string {
	rest, ok := strings.CutPrefix(url, "meta://")
	if !ok {
		return ""
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || strings.ContainsAny(port, "/?#") {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Is4() {
			return ""
		}
		return "meta://[::ffff:" + host + "]:" + port
	}
	alt := strings.ToUpper(host)
	if alt == host {
		alt = strings.ToLower(host)
	}
	if alt == host {
		return ""
	}
	return "meta://" + alt + ":" + port
}

// plainURL undoes altURL's IPv4 form (a name's case is left: comparisons
// of names fold case).
func plainURL(url string) string {
	rest, ok := strings.CutPrefix(url, "meta://[::ffff:")
	if !ok {
		return url
	}
	host, port, ok := strings.Cut(rest, "]:")
	if ip, err := netip.ParseAddr(host); !ok || err != nil || !ip.Is4() {
		return url
	}
	return "meta://" + host + ":" + port
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

func (v *SiteView) get(ctx context.Context, path string) (string, error) {
	b, _, err := v.r.Get(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("registry: site view read %s: %w", path, err)
	}
	return string(b), nil
}

func (v *SiteView) set(ctx context.Context, path, val string) error {
	if err := v.r.SetPersistent(ctx, path, []byte(val)); err != nil {
		return fmt.Errorf("registry: site view write %s: %w", path, err)
	}
	return nil
}

func (v *SiteView) children(ctx context.Context, path string) ([]string, error) {
	kids, err := v.r.Children(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: site view list %s: %w", path, err)
	}
	return kids, nil
}

func (v *SiteView) childInts(ctx context.Context, path string) ([]int, error) {
	kids, err := v.children(ctx, path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, k := range kids {
		if n, err := strconv.Atoi(k); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

func (v *SiteView) deleteTree(ctx context.Context, path string) error {
	if err := v.r.DeleteTree(ctx, path); err != nil {
		return fmt.Errorf("registry: site view delete %s: %w", path, err)
	}
	return nil
}

// GroupOffset is one saved consumer offset together with its group and the
// root it was read under.
type GroupOffset struct {
	Root  string
	Group string
	Offset
}

// OffsetsUnder reads every consumer group's saved offsets under root (the
// real root or a site view root), sorted by group, topic, broker id and
// partition. Consumers pointed at a view root save their offsets there.
func (r *Registry) OffsetsUnder(ctx context.Context, root string) ([]GroupOffset, error) {
	p := Paths{Root: NormalizeRoot(root)}
	groups, err := r.Children(ctx, p.Consumers())
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list groups under %s: %w", p.Root, err)
	}
	sort.Strings(groups)
	var out []GroupOffset
	for _, g := range groups {
		topics, err := r.Children(ctx, p.Consumers()+"/"+g+"/offsets")
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registry: offsets of group %s under %s: %w", g, p.Root, err)
		}
		sort.Strings(topics)
		for _, t := range topics {
			offs, err := r.topicOffsets(ctx, p.ConsumerOffsets(g, t), t)
			if err != nil {
				return nil, err
			}
			sort.Slice(offs, func(i, j int) bool {
				if offs[i].BrokerID != offs[j].BrokerID {
					return offs[i].BrokerID < offs[j].BrokerID
				}
				return offs[i].Part < offs[j].Part
			})
			for _, o := range offs {
				out = append(out, GroupOffset{Root: p.Root, Group: g, Offset: o})
			}
		}
	}
	return out, nil
}

// SeedOffsets copies group's saved offsets from the real root into the view
// for every partition the view has no offset for yet, so that a group moved
// onto the view (its consumers' zkRoot changed) continues where it was
// instead of starting over. Offsets already under the view are never
// overwritten. It returns how many were copied. Run it before the group's
// consumers start on the view.
func (v *SiteView) SeedOffsets(ctx context.Context, group string) (int, error) {
	src, err := v.r.OffsetsUnder(ctx, v.src.Root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range src {
		if o.Group != group {
			continue
		}
		path := v.view.ConsumerOffsets(group, o.Topic) + "/" + o.Partition
		ok, _, err := v.r.Exists(ctx, path)
		if err != nil {
			return n, fmt.Errorf("registry: site view seed %s: %w", path, err)
		}
		if ok {
			continue
		}
		if err := v.set(ctx, path, FormatOffset(o.MsgID, o.Offset.Offset)); err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		v.log.Info("SITEVIEW("+v.view.Root+"): seeded consumer offsets from the real root", "group", group, "partitions", n)
	}
	return n, nil
}

// SameViewURL reports whether a and b (meta://host:port) name the same
// broker address in any of the forms a site view writes (see pubForm):
// a view's entry for a broker is url or its other form.
func SameViewURL(a, b string) bool {
	return strings.EqualFold(plainURL(a), plainURL(b))
}
