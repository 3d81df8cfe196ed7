package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"metaq/topology"
)

// serveLagDoc serves doc at /lag, with its HTTPAddr-bearing members filled
// in by the caller after the servers exist.
func serveLagDoc(t *testing.T, doc *topology.LagDocument) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/lag", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(doc)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func lagMember(name, site string, role topology.Role, broker int, gen uint64, state topology.MemberState, httpAddr string) topology.Member {
	slave := -1
	if role == topology.RoleSlave {
		slave = 0
	}
	return topology.Member{Name: name, Addr: "127.0.0.1:1", State: state, Meta: topology.Meta{Site: site, Role: role,
		BrokerID: broker, SlaveID: slave, Generation: gen, HTTPAddr: httpAddr}}
}

// TestLagAfterFailoverListsEveryGroupOnce is the operator's view after a
// kill and promote: bj's bundles, restarted, are slaves of hf's. Asked at a
// bj bundle (a slave, which knows no master end offsets), `metaq lag` lists
// the consumer groups of every broker id, as their current masters report
// them, once each; the old master's last gossip is not asked.
func TestLagAfterFailoverListsEveryGroupOnce(t *testing.T) {
	now := time.Now().UTC()
	hf1 := &topology.LagDocument{Time: now, Node: "hf-1-s1", Site: "hf", Consumers: []topology.ConsumerLagReport{
		{Site: "bj", Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 1, Partitions: 4, Bytes: 10},
		{Site: "hf", Root: "/meta-view-hf", Group: "g2", Topic: "orders", BrokerID: 1, Partitions: 4, Bytes: 11},
	}}
	hf2 := &topology.LagDocument{Time: now, Node: "hf-2-s1", Site: "hf", Consumers: []topology.ConsumerLagReport{
		{Site: "bj", Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 2, Partitions: 4, Bytes: 20},
		{Site: "hf", Root: "/meta-view-hf", Group: "g2", Topic: "orders", BrokerID: 2, Partitions: 4, Bytes: 21},
	}}
	// A stale master (not demoted yet in the gossip) that must not be asked.
	stale := &topology.LagDocument{Time: now, Node: "gz-old", Site: "gz", Consumers: []topology.ConsumerLagReport{
		{Site: "bj", Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 2, Partitions: 4, Bytes: 999},
	}}
	bj1 := &topology.LagDocument{Time: now, Node: "bj-1", Site: "bj", Consumers: []topology.ConsumerLagReport{}}
	hf1Addr, hf2Addr, staleAddr := serveLagDoc(t, hf1), serveLagDoc(t, hf2), serveLagDoc(t, stale)
	members := []topology.Member{
		lagMember("bj-1", "bj", topology.RoleSlave, 1, 3, topology.StateAlive, ""),
		lagMember("bj-2", "bj", topology.RoleSlave, 2, 3, topology.StateAlive, ""),
		lagMember("hf-1-s1", "hf", topology.RoleMaster, 1, 3, topology.StateAlive, hf1Addr),
		lagMember("hf-2-s1", "hf", topology.RoleMaster, 2, 3, topology.StateAlive, hf2Addr),
		lagMember("gz-old", "gz", topology.RoleMaster, 2, 2, topology.StateAlive, staleAddr),
	}
	members[0].Local = true
	for _, d := range []*topology.LagDocument{hf1, hf2, stale, bj1} {
		d.Members = members
	}
	addr := serveLagDoc(t, bj1)

	var out, errw bytes.Buffer
	if err := lagCommand(context.Background(), []string{"-addr", addr, "-token", "tok"}, &out, &errw, nil); err != nil {
		t.Fatalf("lag: %v\n%s", err, errw.String())
	}
	s := out.String()
	t.Logf("metaq lag:\n%s", s)
	for _, want := range []string{
		"g1              bj    /meta          orders  1       4           10",
		"g2              hf    /meta-view-hf  orders  1       4           11",
		"g1              bj    /meta          orders  2       4           20",
		"g2              hf    /meta-view-hf  orders  2       4           21",
	} {
		if strings.Count(s, want) != 1 {
			t.Errorf("output has %d rows %q, want 1:\n%s", strings.Count(s, want), want, s)
		}
	}
	if strings.Contains(s, "999") {
		t.Errorf("output lists the stale master's figures:\n%s", s)
	}

	out.Reset()
	if err := lagCommand(context.Background(), []string{"-addr", addr, "-token", "tok", "-json"}, &out, &errw, nil); err != nil {
		t.Fatalf("lag -json: %v", err)
	}
	var doc topology.LagDocument
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(doc.Consumers) != 4 {
		t.Errorf("-json lists %d consumer groups, want 4: %+v", len(doc.Consumers), doc.Consumers)
	}
}
