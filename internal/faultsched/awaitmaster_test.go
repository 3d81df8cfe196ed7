package faultsched

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// statusSites serves /status on each site's admin address of a fresh
// layout: mode(site) says what each answer reports ("" answers 503).
func statusSites(t *testing.T, mode func(site string) string) *Cluster {
	t.Helper()
	base, err := freeBase()
	if err != nil {
		t.Fatal(err)
	}
	l := &Layout{Dir: t.TempDir(), Base: base, Token: "t"}
	for _, s := range Sites {
		ln, err := net.Listen("tcp", l.AdminAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m := mode(s)
			if m == "" {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			json.NewEncoder(w).Encode(SiteStatus{Mode: m, Healthy: true})
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return NewCluster(l, "", "")
}

// TestAwaitMasterWaitsForAMaster: in seed 941054 the checker looked once,
// right after the sites converged, while bj's forced promotion was still
// being finished, and reported no master; bj was master 2 s later. Now it
// asks again until a site reports master (here bj, from its fourth
// answer), and reports none only after its bound.
func TestAwaitMasterWaitsForAMaster(t *testing.T) {
	var asked atomic.Int32
	c := statusSites(t, func(site string) string {
		switch {
		case site == "hf":
			return "" // a site whose status fails meanwhile
		case site == "bj" && asked.Add(1) >= 4:
			return "master"
		}
		return "slave"
	})
	masters, errs := c.AwaitMaster(context.Background(), time.Minute, 10*time.Millisecond)
	if len(masters) != 1 || masters[0] != "bj" {
		t.Fatalf("masters %v, want [bj]", masters)
	}
	if errs["hf"] == "" || len(errs) != 1 {
		t.Fatalf("status errors %v, want hf's alone", errs)
	}

	c = statusSites(t, func(string) string { return "slave" })
	masters, errs = c.AwaitMaster(context.Background(), 300*time.Millisecond, 10*time.Millisecond)
	if len(masters) != 0 || len(errs) != 0 {
		t.Fatalf("with no master: masters %v, errors %v, want none", masters, errs)
	}

	c = statusSites(t, func(s string) string {
		if s == "gz" {
			return "slave"
		}
		return "master"
	})
	masters, _ = c.AwaitMaster(context.Background(), time.Minute, 10*time.Millisecond)
	if len(masters) != 2 {
		t.Fatalf("masters %v, want bj and hf (two masters are reported, not waited out)", masters)
	}
}
