package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/georeplicator"
	"metaq/internal/testutil"
)

func TestChoose(t *testing.T) {
	okLag := LagSummary{State: LagOK, Behind: 100 * time.Millisecond}
	master := Replica{Site: "bj", Master: true, SlaveID: -1, Addr: "bj:1", Alive: true, Healthy: true}
	hf := Replica{Site: "hf", SlaveID: 0, Addr: "hf:1", Alive: true, Healthy: true, Lag: okLag, LagKnown: true}
	sh := Replica{Site: "sh", SlaveID: 1, Addr: "sh:1", Alive: true, Healthy: true, Lag: okLag, LagKnown: true}
	with := func(r Replica, f func(*Replica)) Replica { f(&r); return r }
	dead := func(r *Replica) { r.Alive = false }

	cases := []struct {
		name     string
		in       RouteInput
		want     string
		wantNone bool
	}{
		{"local first reads the local slave", RouteInput{Site: "hf", Preference: client.LocalFirst, Replicas: []Replica{master, hf, sh}}, "hf:1", false},
		{"local first in the master's site reads the master", RouteInput{Site: "bj", Preference: client.LocalFirst, Replicas: []Replica{master, hf, sh}}, "bj:1", false},
		{"local slave down: master", RouteInput{Site: "hf", Preference: client.LocalFirst, Replicas: []Replica{master, with(hf, dead), sh}}, "bj:1", false},
		{"local slave unhealthy storage: master", RouteInput{Site: "hf", Preference: client.LocalFirst,
			Replicas: []Replica{master, with(hf, func(r *Replica) { r.Healthy = false }), sh}}, "bj:1", false},
		{"local slave over max lag: master", RouteInput{Site: "hf", Preference: client.LocalFirst, MaxLag: 50 * time.Millisecond,
			Replicas: []Replica{master, hf, sh}}, "bj:1", false},
		{"local slave within max lag", RouteInput{Site: "hf", Preference: client.LocalFirst, MaxLag: time.Second,
			Replicas: []Replica{master, hf, sh}}, "hf:1", false},
		{"local slave stuck: master", RouteInput{Site: "hf", Preference: client.LocalFirst,
			Replicas: []Replica{master, with(hf, func(r *Replica) { r.Lag.State = LagStuck }), sh}}, "bj:1", false},
		{"local slave not connected per master: master", RouteInput{Site: "hf", Preference: client.LocalFirst,
			Replicas: []Replica{master, with(hf, func(r *Replica) { r.Lag.State = LagDown }), sh}}, "bj:1", false},
		{"lag unknown: master", RouteInput{Site: "hf", Preference: client.LocalFirst,
			Replicas: []Replica{master, with(hf, func(r *Replica) { r.LagKnown = false }), sh}}, "bj:1", false},
		{"master down, local slave usable", RouteInput{Site: "hf", Preference: client.LocalFirst, Replicas: []Replica{with(master, dead), hf, sh}}, "hf:1", false},
		{"master and local down: next site by order", RouteInput{Site: "hf", Preference: client.LocalFirst, SiteOrder: []string{"sh"},
			Replicas: []Replica{with(master, dead), with(hf, dead), sh}}, "sh:1", false},
		{"master only ignores healthy local slave", RouteInput{Site: "hf", Preference: client.MasterOnly, Replicas: []Replica{master, hf, sh}}, "bj:1", false},
		{"master only, master down: local slave as Java does", RouteInput{Site: "hf", Preference: client.MasterOnly,
			Replicas: []Replica{with(master, dead), hf, sh}}, "hf:1", false},
		{"nearest: own site first", RouteInput{Site: "sh", Preference: client.NearestHealthy, SiteOrder: []string{"hf", "bj"},
			Replicas: []Replica{master, hf, sh}}, "sh:1", false},
		{"nearest: next by order, before the master", RouteInput{Site: "sh", Preference: client.NearestHealthy, SiteOrder: []string{"hf", "bj"},
			Replicas: []Replica{master, hf, with(sh, dead)}}, "hf:1", false},
		{"nearest: consumer in a site without copies", RouteInput{Site: "gz", Preference: client.NearestHealthy, SiteOrder: []string{"bj", "hf"},
			Replicas: []Replica{master, hf, sh}}, "bj:1", false},
		{"only a lagging slave alive: read it", RouteInput{Site: "hf", Preference: client.LocalFirst, MaxLag: time.Millisecond,
			Replicas: []Replica{with(master, dead), hf}}, "hf:1", false},
		{"nothing alive", RouteInput{Site: "hf", Preference: client.LocalFirst, Replicas: []Replica{with(master, dead), with(hf, dead)}}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, ok := Choose(c.in)
			if c.wantNone {
				if ok {
					t.Fatalf("want no route, got %+v", d)
				}
				return
			}
			if !ok || d.Addr != c.want {
				t.Fatalf("got %+v ok=%v, want %s", d, ok, c.want)
			}
		})
	}
}

func TestReplicasOfUsesMasterLag(t *testing.T) {
	members := []Member{
		{Name: "bj-1-m", State: StateAlive, Meta: Meta{Site: "bj", BrokerID: 1, SlaveID: -1, ServeURL: "meta://bj:1",
			Health: Health{true, true}, Lag: []LagSummary{{SlaveGroup: "g0", SlaveID: 0, Behind: time.Second, State: LagOK}}}},
		{Name: "hf-1-s0", State: StateAlive, Meta: Meta{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://hf:1", Health: Health{true, true}}},
		{Name: "sh-1-s1", State: StateSuspect, Meta: Meta{Site: "sh", Role: RoleSlave, BrokerID: 1, SlaveID: 1, ServeURL: "meta://sh:1", Health: Health{true, true}}},
		{Name: "bj-2-m", State: StateAlive, Meta: Meta{Site: "bj", BrokerID: 2, SlaveID: -1, ServeURL: "meta://bj:2"}},
	}
	reps := replicasOf(members, 1)
	if len(reps) != 3 {
		t.Fatalf("replicas of 1: %+v", reps)
	}
	for _, r := range reps {
		switch r.Addr {
		case "bj:1":
			if !r.Master || !r.Alive {
				t.Errorf("master: %+v", r)
			}
		case "hf:1":
			if !r.LagKnown || r.Lag.Behind != time.Second || !r.Alive || !r.Healthy {
				t.Errorf("hf: %+v", r)
			}
		case "sh:1":
			if r.LagKnown || r.Alive {
				t.Errorf("sh (suspect, no lag entry): %+v", r)
			}
		}
	}
}

// TestReplicasOfLeavesOutSupersededMaster: after a failover the old master
// may still run, and gossip, as a master of an older generation (it stepped
// down and is not demoted yet): no read and no site view goes there, and
// the lag figures are the new master's.
func TestReplicasOfLeavesOutSupersededMaster(t *testing.T) {
	members := []Member{
		{Name: "bj-0-m", State: StateAlive, Meta: Meta{Site: "bj", BrokerID: 0, SlaveID: -1, ServeURL: "meta://bj:0",
			Health: Health{true, true}, Lag: []LagSummary{{SlaveGroup: "g-gz", SlaveID: 2, State: LagStuck}}}},
		{Name: "hf-0-s1", State: StateAlive, Meta: Meta{Site: "hf", BrokerID: 0, SlaveID: -1, Generation: 1, ServeURL: "meta://hf:0",
			Health: Health{true, true}, Lag: []LagSummary{{SlaveGroup: "g-gz", SlaveID: 2, State: LagOK}}}},
		{Name: "gz-0-s2", State: StateAlive, Meta: Meta{Site: "gz", Role: RoleSlave, BrokerID: 0, SlaveID: 2, ServeURL: "meta://gz:0", Health: Health{true, true}}},
	}
	reps := replicasOf(members, 0)
	if len(reps) != 2 {
		t.Fatalf("replicas %+v, want hf's master and gz's slave", reps)
	}
	for _, r := range reps {
		if r.Addr == "bj:0" {
			t.Fatalf("the superseded master is a replica: %+v", r)
		}
		if r.Addr == "gz:0" && (!r.LagKnown || r.Lag.State != LagOK) {
			t.Fatalf("gz's lag %+v, want the new master's report", r)
		}
	}
	for _, site := range []string{"bj", "hf"} {
		if got := viewTargets(members, site, time.Minute)[0]; got != "meta://hf:0" {
			t.Errorf("%s's view points at %s, want the new master", site, got)
		}
	}
	if got := viewTargets(members, "gz", time.Minute)[0]; got != "meta://gz:0" {
		t.Errorf("gz's view points at %s, want gz's caught-up replica", got)
	}
}

// TestRouterFollowsSiteHealth: a LocalFirst consumer in hf is pinned to hf's
// slave, moves to the master when hf's bundle dies, and back when it returns;
// a lag over the consumer's limit also moves it.
func TestRouterFollowsSiteHealth(t *testing.T) {
	bj, hf, sh := threeSites(t)
	setLag := func(behind time.Duration) {
		bj.lag.set([]georeplicator.GroupLag{
			{Group: "g-hf", SlaveID: 0, Connected: true, Partitions: []georeplicator.PartitionLag{{Topic: "t", Behind: behind}}},
			{Group: "g-sh", SlaveID: 1, Connected: true, Partitions: []georeplicator.PartitionLag{{Topic: "t"}}},
		})
	}
	setLag(0)
	r := NewRouter(sh.t) // the router of a bundle in sh serving a consumer that says it is in hf
	req := client.RouteRequest{Topic: "t", BrokerID: 1, Partition: 0, Group: "g", Site: "hf",
		Preference: client.LocalFirst, MaxLag: time.Second}
	routeIs := routesTo(r, &req)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:28123"))

	died := time.Now()
	hf.t.close(false)
	testutil.Eventually(t, sh.t.DetectionTime()+2*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:18123"))
	t.Logf("moved to the master %v after hf died", time.Since(died))

	hf.start(t)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:28123"))

	// Lag over the consumer's 1s limit: master; back under: hf.
	setLag(3 * time.Second)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:18123"))
	setLag(0)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:28123"))

	// Unknown broker id: no opinion, the client falls back.
	req.BrokerID = 9
	if _, err := r.Route(context.Background(), req); !errors.Is(err, client.ErrNoRoute) {
		t.Fatalf("unknown broker id: err = %v", err)
	}
}

// TestRemoteRouter: a consumer outside the pool routes from bundles' /lag
// documents, falling over to another site's bundle when its own site's is
// gone, and gives up (client fallback) when no document is fresh.
func TestRemoteRouter(t *testing.T) {
	bj, hf, _ := threeSites(t)
	bj.lag.set([]georeplicator.GroupLag{{Group: "g-hf", SlaveID: 0, Connected: true, Partitions: []georeplicator.PartitionLag{{Topic: "t"}}}})
	hfSrv := httptest.NewServer(Handler(hf.t, nil))
	defer hfSrv.Close()
	bjSrv := httptest.NewServer(Handler(bj.t, nil))
	defer bjSrv.Close()

	rr, err := NewRemoteRouter(RemoteRouterOptions{URLs: []string{hfSrv.URL + "/lag", bjSrv.URL + "/lag"}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	req := client.RouteRequest{Topic: "t", BrokerID: 1, Site: "hf", Preference: client.LocalFirst}
	routeIs := routesTo(rr, &req)
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:28123"))

	// hf's site goes dark: its bundle and its endpoint.
	hf.t.close(false)
	hfSrv.Close()
	testutil.Eventually(t, bj.t.DetectionTime()+3*time.Second, 10*time.Millisecond, routeIs("127.0.0.1:18123"))

	// No endpoint answers: after MaxAge the router has no opinion.
	bjSrv.Close()
	testutil.Eventually(t, 3*time.Second, 10*time.Millisecond, func() error {
		if _, err := rr.Route(context.Background(), req); !errors.Is(err, client.ErrNoRoute) {
			return fmt.Errorf("stale view still routes: %v", err)
		}
		return nil
	})
}

// TestMasterOutsideThePool: a broker id whose master is not a gossip member
// (a Java broker) keeps its ZooKeeper master for routing and for the view,
// even though its slave in hf gossips.
func TestMasterOutsideThePool(t *testing.T) {
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 5, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123"})
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error { return wantAlive(hf.t, "hf-5-s0") })
	r := NewRouter(hf.t)
	req := client.RouteRequest{Topic: "t", BrokerID: 5, Site: "hf", Preference: client.LocalFirst,
		Replicas: []client.Replica{{Addr: "127.0.0.1:18123", Master: true, SlaveID: -1}, {Addr: "127.0.0.1:28123", SlaveID: 0}}}
	got, err := r.Route(context.Background(), req)
	if err != nil || got != "127.0.0.1:18123" {
		t.Fatalf("route = %q %v, want the ZooKeeper master", got, err)
	}
	if tg := hf.t.ViewTargets("hf", 0); len(tg) != 0 {
		t.Fatalf("view targets for a master outside the pool: %v", tg)
	}
	// Without a master anywhere (ZooKeeper lists none either), the alive slave serves.
	req.Replicas = req.Replicas[1:]
	if got, err := r.Route(context.Background(), req); err != nil || got != "127.0.0.1:28123" {
		t.Fatalf("route without master = %q %v", got, err)
	}
}

// routesTo returns a check, for testutil.Eventually, that r routes *req
// (read at each call) to want.
func routesTo(r client.Router, req *client.RouteRequest) func(want string) func() error {
	return func(want string) func() error {
		return func() error {
			got, err := r.Route(context.Background(), *req)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("routed to %s, want %s", got, want)
			}
			return nil
		}
	}
}

// TestViewTargetsKeepReplicaWhenMasterWentSilent: right after kill -9 of a
// master, its slave in gz says its link is down while gossip still holds
// the master alive with its last report (gz ok): gz's view keeps gz's
// replica instead of naming the master, which may be dead (producers on the
// view would wait 10 s for it). Once the master, alive, reports the slave
// down, or the slave is behind for another reason, the view names the master.
func TestViewTargetsKeepReplicaWhenMasterWentSilent(t *testing.T) {
	members := func(lag LagState, gzHealth Health) []Member {
		return []Member{
			{Name: "bj-1-m", State: StateAlive, Meta: Meta{Site: "bj", BrokerID: 1, SlaveID: -1, ServeURL: "meta://bj:1",
				Health: Health{true, true}, Lag: []LagSummary{{SlaveGroup: "g-gz", SlaveID: 2, State: lag}}}},
			{Name: "gz-1-s2", State: StateAlive, Meta: Meta{Site: "gz", Role: RoleSlave, BrokerID: 1, SlaveID: 2, ServeURL: "meta://gz:1", Health: gzHealth}},
		}
	}
	cases := []struct {
		name     string
		lag      LagState
		gzHealth Health
		want     string
	}{
		{"caught up", LagOK, Health{true, true}, "meta://gz:1"},
		{"link down, the master's report still ok", LagOK, Health{true, false}, "meta://gz:1"},
		{"link down, the master reports it down", LagDown, Health{true, false}, "meta://bj:1"},
		{"lagging, link up", LagLagging, Health{true, true}, "meta://bj:1"},
		{"storage failed", LagOK, Health{false, false}, "meta://bj:1"},
	}
	for _, c := range cases {
		if got := viewTargets(members(c.lag, c.gzHealth), "gz", time.Minute)[1]; got != c.want {
			t.Errorf("%s: gz's view names %s, want %s", c.name, got, c.want)
		}
	}
}
