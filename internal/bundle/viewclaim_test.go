package bundle

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestViewClaimKeptThroughZooKeeperDisconnect: with one ZooKeeper ensemble
// per site, hf's bundle keeps hf's view. A brief cut of hf's connection to
// its own ensemble is a disconnect, not a session loss (the session and its
// ephemeral nodes live until the session timeout): hf keeps claiming its
// view and bj, which holds a session to hf's ensemble too, must not take
// it. Before, hf stopped claiming at its next reconcile, bj became the
// keeper, and hf's producers could bypass hf's gateway. Once the cut lasts
// past the session timeout the session is gone: bj keeps hf's view until
// hf has a session again.
func TestViewClaimKeptThroughZooKeeperDisconnect(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	const sessionTimeout = 10 * time.Second
	hfLog := newLineLog(t)
	// deploy/'s 1-s gossip probes: the tests' 100 ms declare a live
	// bundle down on a loaded machine, which hands its view over too.
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}, perSiteZK: true, sessionTimeout: sessionTimeout, probeInterval: time.Second,
		loggers: map[string]*slog.Logger{"hf": slog.New(slog.NewTextHandler(hfLog, &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	s.reachesAllEnsembles("bj", "hf")
	bjTopo := mustComp[*topologyComponent](t, s.site("bj")).Topology()
	hfTopo := mustComp[*topologyComponent](t, s.site("hf")).Topology()
	hfReg := s.site("hf").Registry
	keeperIs := func(want, why string, within time.Duration) {
		t.Helper()
		testutil.Eventually(t, within, 20*time.Millisecond, func() error {
			for _, topo := range []interface{ ViewKeeper(string) string }{bjTopo, hfTopo} {
				if k := topo.ViewKeeper("hf"); k != want {
					return fmt.Errorf("%s: hf's view keeper is %q, want %q", why, k, want)
				}
			}
			return nil
		})
	}
	keeperIs(hfTopo.Name(), "before the cut", 30*time.Second)
	session := hfReg.SessionID()

	// A brief disconnect: hf keeps its view throughout.
	s.cutEnsembleFrom("hf", "hf")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if hfReg.Connected() {
			return fmt.Errorf("hf still holds its connection to its own ZooKeeper")
		}
		return nil
	})
	// Several of hf's reconcile intervals (1 s here) and gossip rounds,
	// well inside the session timeout.
	const hold = 4 * time.Second
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if k := bjTopo.ViewKeeper("hf"); k != hfTopo.Name() {
			var hfSeen []string
			for _, m := range bjTopo.Members() {
				if m.Name == hfTopo.Name() {
					hfSeen = append(hfSeen, fmt.Sprintf("%s, reaching %v", m.State, m.Meta.Views))
				}
			}
			t.Fatalf("bj sees %q keep hf's view %v into a disconnect of hf from its ZooKeeper (session timeout %v), want hf's bundle %q (hf in bj's gossip: %v)",
				k, time.Since(end.Add(-hold)).Round(time.Millisecond), sessionTimeout, hfTopo.Name(), hfSeen)
		}
	}
	s.healEnsembles()
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !hfReg.Connected() {
			return fmt.Errorf("hf has not reconnected to its ZooKeeper")
		}
		return nil
	})
	if id := hfReg.SessionID(); id != session {
		t.Fatalf("hf's session changed across a brief disconnect: 0x%x, then 0x%x", session, id)
	}
	keeperIs(hfTopo.Name(), "after the brief cut", 10*time.Second)

	// A cut past the session timeout: the session is gone, bj takes the
	// view, and hf takes it back once it has a new session.
	s.cutEnsembleFrom("hf", "hf")
	keeperIs(bjTopo.Name(), "hf's session lost", sessionTimeout+30*time.Second)
	if hfReg.SessionMayBeAlive() {
		t.Error("hf's registry says its session may be alive after bj took its view")
	}
	s.healEnsembles()
	keeperIs(hfTopo.Name(), "hf back with a new session", 60*time.Second)
	if id := hfReg.SessionID(); id == session {
		t.Errorf("hf kept session 0x%x across a cut past the session timeout", id)
	}
}
