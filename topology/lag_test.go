package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// backlog is the known backlog the fake lag source reports: hf is 2 partitions
// behind by 1000+500 bytes, sh is caught up, a third group is stuck.
func backlog() []georeplicator.GroupLag {
	return []georeplicator.GroupLag{
		{Group: "g-hf", SlaveID: 0, Connected: true, Partitions: []georeplicator.PartitionLag{
			{Topic: "t", Partition: 0, MasterEnd: 5000, SlaveEnd: 4000, Bytes: 1000, Messages: 10, Behind: 7 * time.Second},
			{Topic: "t", Partition: 1, MasterEnd: 3000, SlaveEnd: 2500, Bytes: 500, Messages: 5, Behind: 2 * time.Second},
		}},
		{Group: "g-sh", SlaveID: 1, Connected: true, Partitions: []georeplicator.PartitionLag{
			{Topic: "t", Partition: 0, MasterEnd: 5000, SlaveEnd: 5000},
			{Topic: "t", Partition: 1, MasterEnd: 3000, SlaveEnd: 3000},
		}},
		{Group: "g-gz", SlaveID: 2, Connected: true, Partitions: []georeplicator.PartitionLag{
			{Topic: "t", Partition: 0, MasterEnd: 5000, SlaveEnd: 100, Bytes: 4900, Messages: 49, Behind: time.Minute, Stuck: true},
		}},
	}
}

func TestReportsMatchBacklog(t *testing.T) {
	bj, hf, sh := threeSites(t)
	bj.lag.set(backlog())

	check := func(reps []Report, detail bool) error {
		if len(reps) != 3 {
			return fmt.Errorf("%d reports: %+v", len(reps), reps)
		}
		want := map[string]Report{
			"g-hf": {Site: "hf", LagSummary: LagSummary{Partitions: 2, Bytes: 1500, Messages: 15, Behind: 7 * time.Second, State: LagLagging}},
			"g-sh": {Site: "sh", LagSummary: LagSummary{Partitions: 2, State: LagOK}},
			// No slave 2 in the pool: down whatever the master says.
			"g-gz": {Site: "", LagSummary: LagSummary{Partitions: 1, Bytes: 4900, Messages: 49, Behind: time.Minute, State: LagDown}},
		}
		for _, r := range reps {
			w := want[r.SlaveGroup]
			if r.Site != w.Site || r.Partitions != w.Partitions || r.Bytes != w.Bytes || r.Messages != w.Messages ||
				r.Behind != w.Behind || r.State != w.State || r.BrokerID != 1 || r.MasterSite != "bj" {
				return fmt.Errorf("%s: got %+v want %+v", r.SlaveGroup, r, w)
			}
			if detail != (r.Detail != nil) {
				return fmt.Errorf("%s: detail present=%v", r.SlaveGroup, r.Detail != nil)
			}
		}
		return nil
	}
	// On the master: fresh from the source, with detail.
	if err := check(bj.t.Reports(), true); err != nil {
		t.Fatal(err)
	}
	// Elsewhere: from gossip.
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error { return check(sh.t.Reports(), false) })

	// hf dies: its group is down everywhere, even before the master notices.
	hf.t.close(false)
	testutil.Eventually(t, sh.t.DetectionTime()+2*time.Second, 10*time.Millisecond, func() error {
		for _, r := range sh.t.Reports() {
			if r.SlaveGroup == "g-hf" && r.State != LagDown {
				return fmt.Errorf("g-hf is %v", r.State)
			}
		}
		return nil
	})
}

func TestConsumerLagAndHTTP(t *testing.T) {
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	bj.lag.set(backlog())
	offsets := OffsetFunc(func(ctx context.Context) ([]ConsumerOffset, error) {
		return []ConsumerOffset{
			{Root: "/meta", Group: "orders", Topic: "t", BrokerID: 1, Partition: 0, Offset: 4500},
			{Root: "/meta", Group: "orders", Topic: "t", BrokerID: 1, Partition: 1, Offset: 3000},
			{Root: "/meta-view-hf", Group: "audit", Topic: "t", BrokerID: 1, Partition: 0, Offset: 0},
			{Root: "/meta-view-hf", Group: "audit", Topic: "t", BrokerID: 1, Partition: 1, Offset: 3500}, // past the end: 0
			{Root: "/meta", Group: "orders", Topic: "t", BrokerID: 2, Partition: 0, Offset: 1},           // another master's
			{Root: "/meta", Group: "orders", Topic: "u", BrokerID: 1, Partition: 0, Offset: 1},           // no end known
		}, nil
	})
	cl, err := bj.t.ConsumerLag(context.Background(), offsets)
	if err != nil {
		t.Fatal(err)
	}
	want := []ConsumerLagReport{
		{Site: "", Root: "/meta", Group: "orders", Topic: "t", BrokerID: 1, Partitions: 2, Bytes: 500},
		{Site: "hf", Root: "/meta-view-hf", Group: "audit", Topic: "t", BrokerID: 1, Partitions: 2, Bytes: 5000},
	}
	if fmt.Sprint(cl) != fmt.Sprint(want) {
		t.Fatalf("consumer lag\n got %+v\nwant %+v", cl, want)
	}

	srv := httptest.NewServer(Handler(bj.t, offsets))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/lag")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc LagDocument
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Site != "bj" || len(doc.Groups) != 3 || len(doc.Consumers) != 2 || doc.Sites["bj"] != "up" {
		t.Fatalf("document: %+v", doc)
	}
	for _, g := range doc.Groups {
		if g.SlaveGroup == "g-hf" && (g.Bytes != 1500 || g.SecondsBehind != 7 || g.State != LagDown) {
			// No hf member in this single-node pool: down.
			t.Fatalf("g-hf over HTTP: %+v", g)
		}
	}
	if resp, err := http.Post(srv.URL+"/lag", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", resp.StatusCode, err)
	}
}

func TestCollector(t *testing.T) {
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	bj.lag.set(backlog())
	offsets := OffsetFunc(func(ctx context.Context) ([]ConsumerOffset, error) {
		return []ConsumerOffset{{Root: "/meta-view-hf", Group: "audit", Topic: "t", BrokerID: 1, Partition: 0, Offset: 1000}}, nil
	})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(bj.t, offsets)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if bj.t.Sites()["bj"] != StateAlive {
			return fmt.Errorf("local site not up yet")
		}
		return nil
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += "," + l.GetName() + "=" + l.GetValue()
			}
			got[k] = m.GetGauge().GetValue()
		}
	}
	for k, v := range map[string]float64{
		"metaq_replication_lag_bytes,broker_id=1,site=,slave_group=g-hf":                      1500,
		"metaq_replication_lag_messages,broker_id=1,site=,slave_group=g-gz":                   49,
		"metaq_replication_lag_seconds,broker_id=1,site=,slave_group=g-hf":                    7,
		"metaq_replication_state,broker_id=1,site=,slave_group=g-gz,state=down":               1,
		"metaq_consumer_lag_bytes,broker_id=1,group=audit,root=/meta-view-hf,site=hf,topic=t": 4000,
		"metaq_site_up,site=bj":            1,
		"metaq_gossip_members,state=alive": 1,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestReportsAfterFailover: after hf was promoted (generation 1) the old
// master bj's last gossip (down) still lists the groups it had; only the
// current master's groups are reported, each once, none of bj's as down.
func TestReportsAfterFailover(t *testing.T) {
	group := func(name string, id int, st LagState) LagSummary {
		return LagSummary{SlaveGroup: name, SlaveID: id, Partitions: 2, State: st, Behind: 421 * time.Second}
	}
	members := []Member{
		{Name: "bj-0-m", State: StateDown, Meta: Meta{Site: "bj", Role: RoleMaster, SlaveID: -1,
			Lag: []LagSummary{group("meta-slave-group-hf", 1, LagOK), group("meta-slave-group-gz", 2, LagOK)}}},
		{Name: "hf-0-s1", State: StateAlive, Meta: Meta{Site: "hf", Role: RoleMaster, SlaveID: -1, Generation: 1,
			Lag: []LagSummary{group("meta-slave-group-gz", 2, LagOK), group("meta-slave-group-bj", 3, LagOK)}}},
		{Name: "gz-0-s2", State: StateAlive, Meta: Meta{Site: "gz", Role: RoleSlave, SlaveID: 2, Generation: 1}},
		{Name: "bj-0-s3", State: StateAlive, Meta: Meta{Site: "bj", Role: RoleSlave, SlaveID: 3, Generation: 1}},
	}
	got := buildReports(members, "gz-0-s2", nil, time.Minute)
	var rows []string
	for _, r := range got {
		rows = append(rows, fmt.Sprintf("%s@%s from %s: %s", r.SlaveGroup, r.Site, r.MasterSite, r.State))
	}
	want := []string{"meta-slave-group-bj@bj from hf: ok", "meta-slave-group-gz@gz from hf: ok"}
	if !slices.Equal(rows, want) {
		t.Fatalf("reports after the failover:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	// Before any promotion the master that is down still reports its groups
	// (as down): nobody else can.
	got = buildReports(members[:1], "x", nil, time.Minute)
	if len(got) != 2 || got[0].State != LagDown || got[1].State != LagDown {
		t.Fatalf("reports of a lost master: %+v", got)
	}
}
