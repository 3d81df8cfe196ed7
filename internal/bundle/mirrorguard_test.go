package bundle

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// lineLog keeps the lines a site logs, and passes them on to the test's log.
type lineLog struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
	done  bool
}

func newLineLog(t testing.TB) *lineLog {
	l := &lineLog{t: t}
	t.Cleanup(func() { l.mu.Lock(); l.done = true; l.mu.Unlock() })
	return l
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := strings.TrimRight(string(p), "\n")
	l.lines = append(l.lines, line)
	if !l.done {
		l.t.Log(line)
	}
	return len(p), nil
}

// since returns the lines logged after the first n.
func (l *lineLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[n:]...)
}

func (l *lineLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// TestPausedMasterMirrorsRegisterNothing: bj, master with one ZooKeeper
// per site (deploy/'s layout), mirrors its registration into hf's and gz's
// ensembles. It is paused past its sessions' timeout (its ZooKeeper,
// replication and gossip traffic cut, as a SIGSTOP does) while hf is
// promoted, then runs again: its sessions to hf's and gz's ensembles are
// renewed, and they write nothing as master there. Before, each of them
// re-registered bj's master node at once, waited out hf's node there
// (zk.zkSessionTimeoutMs, 30 s in deploy/), logged `REGISTRY:
// re-registration failed` as an ERROR, and only then let bj's step-down
// remove its mirror.
func TestPausedMasterMirrorsRegisterNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	bjLog := newLineLog(t)
	s := newSites(t, sitesSpec{deploy: true, perSiteZK: true,
		loggers: map[string]*slog.Logger{"bj": slog.New(slog.NewTextHandler(bjLog, &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	views := mustComp[*topologyComponent](t, s.site("bj")).views
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, site := range []string{"hf", "gz"} {
			if st := views.status()[site]; !st.MasterRegistered {
				return fmt.Errorf("bj's registration is not mirrored into %s's ensemble yet: %+v", site, st)
			}
		}
		return nil
	})

	paused := time.Now()
	s.cutZK("bj")
	s.cut("hf")
	s.cut("gz")
	s.cutGossip("bj", "hf")
	s.cutGossip("bj", "gz")
	s.promote("hf", true)
	// Every ensemble expires bj's sessions once it heard nothing from them
	// for the session timeout (the tests' 5 s).
	time.Sleep(time.Until(paused.Add(5*time.Second + 2*time.Second)))
	from := bjLog.len()
	s.healZK("bj")
	s.heal("hf")
	s.heal("gz")
	s.healGossip("bj", "hf")
	s.healGossip("bj", "gz")

	// bj follows hf, and its renewed sessions to hf's and gz's ensembles
	// are done re-registering.
	const renewed = "component=topology component=registry"
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if r := s.site("bj").Role(); r.Role != siterole.Slave {
			return fmt.Errorf("bj is %v", r)
		}
		done := 0
		for _, line := range bjLog.since(from) {
			if strings.Contains(line, renewed) && (strings.Contains(line, "REGISTRY: registered again") ||
				strings.Contains(line, "REGISTRY: not registering again as master")) {
				done++
			}
		}
		if done < 2 {
			return fmt.Errorf("%d of bj's two sessions to the other ensembles renewed and done re-registering", done)
		}
		return nil
	})
	for _, line := range bjLog.since(from) {
		if !strings.Contains(line, renewed) {
			continue
		}
		if strings.Contains(line, "REGISTRY: registering broker") && strings.Contains(line, "/master ") ||
			strings.Contains(line, "waiting for it to expire") || strings.Contains(line, "level=ERROR") {
			t.Errorf("bj, replaced by hf, wrote or waited to write as master in another site's ensemble: %s", line)
		}
	}
	s.converged("orders")
}
