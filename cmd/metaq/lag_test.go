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

	"metaq/georeplicator"
	"metaq/topology"
)

// startLagBundle starts a one-member gossip pool whose master reports a
// known backlog, and serves its /lag as the dashboard does.
func startLagBundle(t *testing.T, token string) string {
	t.Helper()
	tp, err := topology.New(topology.Options{
		Site: "bj", Role: topology.RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123",
		Key: []byte("0123456789abcdef"), Timing: topology.FastTiming(),
		Lag: topology.LagFunc(func() []georeplicator.GroupLag {
			return []georeplicator.GroupLag{{Group: "meta-slave-group_0", SlaveID: 0, Connected: true,
				Partitions: []georeplicator.PartitionLag{
					{Topic: "t", Partition: 0, MasterEnd: 9000, SlaveEnd: 8000, Bytes: 1000, Messages: 10, Behind: 1500 * time.Millisecond},
					{Topic: "t", Partition: 1, MasterEnd: 4000, SlaveEnd: 4000},
				}}}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	offsets := topology.OffsetFunc(func(ctx context.Context) ([]topology.ConsumerOffset, error) {
		return []topology.ConsumerOffset{{Root: "/meta-view-hf", Group: "audit", Topic: "t", BrokerID: 1, Partition: 0, Offset: 6000}}, nil
	})
	h := topology.NewLagHandler(tp, topology.LagHandlerOptions{Offsets: offsets, Gateway: func() *topology.GatewayReport {
		return &topology.GatewayReport{Forwarded: 7, Accepted: 40, Drained: 35, Deduplicated: 2,
			Outbox: &topology.OutboxReport{Entries: 5, Bytes: 512, OldestAgeSeconds: 2.5, MaxBytes: 1 << 20, MaxAgeSeconds: 3600, DrainError: "dial the master: refused"}}
	}})
	mux := http.NewServeMux()
	mux.HandleFunc("/lag", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestLagTable(t *testing.T) {
	addr := startLagBundle(t, "")
	var out, errw bytes.Buffer
	if err := run(context.Background(), []string{"lag", "-addr", addr}, nil, &out, &errw); err != nil {
		t.Fatalf("lag: %v\n%s", err, errw.String())
	}
	s := out.String()
	t.Logf("metaq lag:\n%s", s)
	for _, want := range []string{
		"SLAVE GROUP", "SECONDS BEHIND",
		// No slave 0 in the pool: its row is down, with the master's figures.
		"meta-slave-group_0  ?     1       2           1000   10        1.5             down",
		"audit           hf    /meta-view-hf  t      1       1           3000",
		// The bundle's write gateway and its store-and-forward outbox.
		"WRITE GATEWAY  FORWARDED  NOT SENT  UNKNOWN  ACCEPTED LOCALLY  REFUSED  DRAINED  OUTBOX ENTRIES  OUTBOX BYTES",
		"bj             7          0         0        40                0        35       5               512/1048576   2.5/3600    dial the master: refused",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestLagJSONAndToken(t *testing.T) {
	addr := startLagBundle(t, "s3cret")
	var out, errw bytes.Buffer
	if err := lagCommand(context.Background(), []string{"-addr", "http://" + addr, "-json", "-token", "s3cret"}, &out, &errw, nil); err != nil {
		t.Fatalf("lag -json: %v", err)
	}
	var doc topology.LagDocument
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(doc.Groups) != 1 || doc.Groups[0].Bytes != 1000 || doc.Groups[0].Messages != 10 || doc.Groups[0].SecondsBehind != 1.5 ||
		len(doc.Consumers) != 1 || doc.Consumers[0].Bytes != 3000 {
		t.Fatalf("document: %+v", doc)
	}
	err := lagCommand(context.Background(), []string{"-addr", addr, "-token", "wrong"}, &out, &errw, nil)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
}
