package topology

import (
	"context"
	"testing"
	"time"

	"metaq/broker/client"
)

func BenchmarkEncodeMeta(b *testing.B) {
	m := Meta{Site: "bj", ServeURL: "meta://127.0.0.1:8123", ReplAddr: "127.0.0.1:8124", HTTPAddr: "127.0.0.1:8120", SlaveID: -1,
		Health: Health{true, true}}
	for i := range 4 {
		m.Lag = append(m.Lag, LagSummary{SlaveGroup: "meta-slave-group_" + string(rune('0'+i)), SlaveID: i, Partitions: 64,
			Bytes: 1 << 30, Messages: 1 << 20, Behind: time.Second, State: LagOK})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeMeta(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoute measures one routing decision from a pool of 30 bundles
// (10 broker ids, each a master and two slaves): the cost a consumer pays
// each time a partition asks the router again.
func BenchmarkRoute(b *testing.B) {
	var members []Member
	sites := []string{"bj", "hf", "sh"}
	for id := range 10 {
		var lag []LagSummary
		for s := 1; s < 3; s++ {
			lag = append(lag, LagSummary{SlaveGroup: "g", SlaveID: s - 1, State: LagOK})
		}
		members = append(members, Member{Name: DefaultName("bj", RoleMaster, id, -1), State: StateAlive,
			Meta: Meta{Site: "bj", BrokerID: id, SlaveID: -1, ServeURL: "meta://127.0.0.1:1", Health: Health{true, true}, Lag: lag}})
		for s := 1; s < 3; s++ {
			members = append(members, Member{Name: DefaultName(sites[s], RoleSlave, id, s-1), State: StateAlive,
				Meta: Meta{Site: sites[s], Role: RoleSlave, BrokerID: id, SlaveID: s - 1, ServeURL: "meta://127.0.0.1:2", Health: Health{true, true}}})
		}
	}
	t := &Topology{members: map[string]*Member{}}
	for i := range members {
		t.members[members[i].Name] = &members[i]
	}
	r := NewRouter(t)
	req := client.RouteRequest{Topic: "t", BrokerID: 7, Site: "hf", Preference: client.LocalFirst, MaxLag: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Route(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
