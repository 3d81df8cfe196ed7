package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// switchable is a MastershipSource the test flips, as a switchover does.
type switchable struct {
	mu sync.Mutex
	m  Mastership
}

func (s *switchable) Mastership() Mastership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

func (s *switchable) set(m Mastership) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// lagBundle is one bundle of the two-broker-id layout: gossip plus its
// dashboard's /lag, served as the bundle serves it.
type lagBundle struct {
	n   *node
	ms  *switchable
	url string
}

// TestLagListsEveryBrokerIDAfterSwitchover is deploy/local-three-sites.sh's
// layout cut to two sites: bj runs the masters of broker ids 1 and 2, hf a
// slave of each. After a switchover to hf, /lag asked at any of the four
// bundles lists the consumer groups of both ids, each from its current
// master (hf's), once each; before it, the old masters' (bj's).
func TestLagListsEveryBrokerIDAfterSwitchover(t *testing.T) {
	// Every bundle reads the same offsets (its own site's ZooKeeper holds
	// both ids' groups); only a master of an id knows its end offsets.
	offsets := OffsetFunc(func(ctx context.Context) ([]ConsumerOffset, error) {
		return []ConsumerOffset{
			{Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 1, Partition: 0, Offset: 100},
			{Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 2, Partition: 0, Offset: 200},
			{Root: "/meta-view-hf", Group: "g2", Topic: "orders", BrokerID: 1, Partition: 0, Offset: 300},
			{Root: "/meta-view-hf", Group: "g2", Topic: "orders", BrokerID: 2, Partition: 0, Offset: 400},
		}, nil
	})
	// A master end of 1000 for id 1 and 2000 for id 2 at whichever site
	// is master: the figures do not depend on the site.
	ends := map[int]int64{1: 1000, 2: 2000}
	start := func(site string, id int, master bool, join []string) *lagBundle {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var h http.Handler
		var hmu sync.Mutex
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hmu.Lock()
			hh := h
			hmu.Unlock()
			if r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			hh.ServeHTTP(w, r)
		}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		ms := &switchable{m: Mastership{Role: RoleSlave, SlaveID: 0}}
		role, slaveID := RoleSlave, 0
		if master {
			ms.m = Mastership{Role: RoleMaster, SlaveID: -1, Generation: 1}
			role, slaveID = RoleMaster, -1
		}
		n := startNode(t, Options{Site: site, Role: role, BrokerID: id, SlaveID: slaveID, Mastership: ms,
			ServeURL: "meta://127.0.0.1:1", HTTPAddr: ln.Addr().String(), Join: join})
		n.lag.set([]georeplicator.GroupLag{{Group: "meta-slave-group-any", Connected: true,
			Partitions: []georeplicator.PartitionLag{{Topic: "orders", Partition: 0, MasterEnd: ends[id], SlaveEnd: ends[id]}}}})
		hmu.Lock()
		h = NewLagHandler(n.t, LagHandlerOptions{Offsets: offsets, Fetch: HTTPLagFetcher(nil, "http", "/lag", "tok")})
		hmu.Unlock()
		return &lagBundle{n: n, ms: ms, url: srv.URL + "/lag"}
	}
	bj1 := start("bj", 1, true, nil)
	bj2 := start("bj", 2, true, []string{bj1.n.t.Addr()})
	hf1 := start("hf", 1, false, []string{bj1.n.t.Addr()})
	hf2 := start("hf", 2, false, []string{bj1.n.t.Addr()})
	all := []*lagBundle{bj1, bj2, hf1, hf2}

	ask := func(b *lagBundle) (LagDocument, error) {
		var doc LagDocument
		req, _ := http.NewRequest(http.MethodGet, b.url, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return doc, err
		}
		defer resp.Body.Close()
		return doc, json.NewDecoder(resp.Body).Decode(&doc)
	}
	// rows are what every bundle must list, whichever site the masters are at.
	want := []string{
		"g1 /meta orders broker 1: 900",
		"g1 /meta orders broker 2: 1800",
		"g2 /meta-view-hf orders broker 1: 700",
		"g2 /meta-view-hf orders broker 2: 1600",
	}
	check := func(masterSite string) {
		t.Helper()
		for _, b := range all {
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				// Wait until this bundle's gossip shows the current masters.
				cm := CurrentMasters(b.n.t.Members())
				if len(cm) != 2 || cm[1].Meta.Site != masterSite || cm[2].Meta.Site != masterSite ||
					cm[1].State != StateAlive || cm[2].State != StateAlive {
					return fmt.Errorf("%s: masters not yet at %s: %v", b.n.t.Name(), masterSite, cm)
				}
				doc, err := ask(b)
				if err != nil {
					return err
				}
				var rows []string
				for _, c := range doc.Consumers {
					rows = append(rows, fmt.Sprintf("%s %s %s broker %d: %d", c.Group, c.Root, c.Topic, c.BrokerID, c.Bytes))
				}
				if !slices.Equal(rows, want) || doc.ConsumerError != "" {
					return fmt.Errorf("/lag at %s (masters at %s) lists:\n%s\nerror %q\nwant:\n%s",
						b.n.t.Name(), masterSite, strings.Join(rows, "\n"), doc.ConsumerError, strings.Join(want, "\n"))
				}
				// Slave groups: one row per broker id, from its current master.
				var groups []string
				for _, r := range doc.Groups {
					groups = append(groups, fmt.Sprintf("broker %d %s from %s", r.BrokerID, r.SlaveGroup, r.MasterSite))
				}
				wantGroups := []string{"broker 1 meta-slave-group-any from " + masterSite, "broker 2 meta-slave-group-any from " + masterSite}
				if !slices.Equal(groups, wantGroups) {
					return fmt.Errorf("/lag at %s lists slave groups %v, want %v", b.n.t.Name(), groups, wantGroups)
				}
				return nil
			})
		}
	}
	check("bj")

	// Switchover to hf: bj's bundles step down, hf's take generation 2.
	bj1.ms.set(Mastership{Role: RoleSlave, SlaveID: 0, Generation: 2})
	bj2.ms.set(Mastership{Role: RoleSlave, SlaveID: 0, Generation: 2})
	hf1.ms.set(Mastership{Role: RoleMaster, SlaveID: -1, Generation: 2})
	hf2.ms.set(Mastership{Role: RoleMaster, SlaveID: -1, Generation: 2})
	check("hf")

	// ?scope=local is one bundle's own: what the masters ask each other.
	req, _ := http.NewRequest(http.MethodGet, hf1.url+"?scope=local", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var local LagDocument
	if err := json.NewDecoder(resp.Body).Decode(&local); err != nil {
		t.Fatal(err)
	}
	for _, c := range local.Consumers {
		if c.BrokerID != 1 {
			t.Errorf("?scope=local at hf-1 lists broker %d's group %s", c.BrokerID, c.Group)
		}
	}
	if len(local.Consumers) != 2 || local.ConsumerScope != "" {
		t.Errorf("?scope=local at hf-1: %d groups, scope %q; want 2, \"\"", len(local.Consumers), local.ConsumerScope)
	}
}

func TestMemberLagURL(t *testing.T) {
	m := func(httpAddr, gossip string) Member {
		return Member{Addr: gossip, Meta: Meta{HTTPAddr: httpAddr}}
	}
	for _, c := range []struct {
		m    Member
		want string
	}{
		{m("198.51.100.7:8120", "198.51.100.7:7946"), "http://198.51.100.7:8120/lag"},
		{m("0.0.0.0:8120", "198.51.100.7:7946"), "http://198.51.100.7:8120/lag"},
		{m("[::]:8120", "[2001:db8::7]:7946"), "http://[2001:db8::7]:8120/lag"},
		{m(":8120", "bj.example:7946"), "http://bj.example:8120/lag"},
		{m("0.0.0.0:8120", ""), "http://0.0.0.0:8120/lag"},
	} {
		if got := MemberLagURL("", c.m, "/lag"); got != c.want {
			t.Errorf("MemberLagURL(%+v) = %s, want %s", c.m, got, c.want)
		}
	}
}

// TestMergeConsumersNamesWrongAnswerer: a master whose dashboard listens on
// loopback, asked from another host, is answered by whatever bundle listens
// there; its rows are not taken and the mix-up is named.
func TestMergeConsumersNamesWrongAnswerer(t *testing.T) {
	master := func(name string, id int) Member {
		return Member{Name: name, State: StateAlive, Meta: Meta{Role: RoleMaster, BrokerID: id, SlaveID: -1, HTTPAddr: "127.0.0.1:8120"}}
	}
	doc := LagDocument{Node: "hf-1-m", Members: []Member{master("hf-1-m", 1), master("bj-2-m", 2)},
		Consumers: []ConsumerLagReport{{Group: "g", Root: "/meta", Topic: "t", BrokerID: 1, Bytes: 1}}}
	fetch := func(ctx context.Context, m Member) (LagDocument, error) {
		return LagDocument{Node: "gz-2-s2", Consumers: []ConsumerLagReport{{Group: "g", Root: "/meta", Topic: "t", BrokerID: 2, Bytes: 99}}}, nil
	}
	if !MergeConsumers(context.Background(), &doc, fetch) {
		t.Fatal("doc not changed")
	}
	if len(doc.Consumers) != 1 || doc.Consumers[0].BrokerID != 1 {
		t.Errorf("consumers %+v, want hf-1-m's own only", doc.Consumers)
	}
	if !strings.Contains(doc.ConsumerError, "gz-2-s2 answered") || doc.ConsumerScope != ScopePool {
		t.Errorf("consumer error %q scope %q", doc.ConsumerError, doc.ConsumerScope)
	}
}
