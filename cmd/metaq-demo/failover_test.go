package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/bundle"
)

// fakeSites runs the failover steps against an imitation: the producer's
// messages are acknowledged by whichever site is master, and each test
// breaks one expectation.
type fakeSites struct {
	mu     sync.Mutex
	master string
	// lose is a message the new master lacks after a switchover (-1: none).
	lose int
	// staysMaster: the old master keeps taking puts after a switchover.
	staysMaster bool
	// promoteWhileReachable: promote succeeds although bj is reachable.
	promoteWhileReachable bool
	// siblingAhead: once bj is lost, promote without -force is refused
	// because gz holds more of bj's log.
	siblingAhead bool
	lost         bool
}

func (f *fakeSites) newProducer() *ackProducer {
	p := newAckProducer(sampleTopic, []string{"bj", "hf", "gz"}, nil)
	p.runner = func(ctx context.Context) {
		for ctx.Err() == nil {
			next, _ := p.position()
			f.mu.Lock()
			m := f.master
			f.mu.Unlock()
			p.record(ack{seq: next, site: m, at: time.Now()})
			time.Sleep(time.Millisecond)
		}
	}
	return p
}

func (f *fakeSites) commandsRun() string                 { return "" }
func (f *fakeSites) producerWhere() string               { return "in a test" }
func (f *fakeSites) replAddr(string) string              { return "127.0.0.1:1" }
func (f *fakeSites) confFile(string) string              { return "server.ini" }
func (f *fakeSites) tailDir(string) string               { return "" }
func (f *fakeSites) metaqAddr(string) string             { return "127.0.0.1:1" }
func (f *fakeSites) setMaster(string)                    {}
func (f *fakeSites) blockReplication(string, bool) error { return nil }

func (f *fakeSites) switchover(_ context.Context, from, to string) (bundle.SwitchoverReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.master = to
	return bundle.SwitchoverReport{To: to, Generation: 1, Following: true}, nil
}

func (f *fakeSites) promote(_ context.Context, site string, force bool) (bundle.PromoteReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.lost && f.siblingAhead && !force:
		return bundle.PromoteReport{}, fmt.Errorf("promote: %w: gz holds more; promote that site, or use -force", bundle.ErrSiblingAhead)
	case f.lost || f.promoteWhileReachable:
		f.master = site
		return bundle.PromoteReport{Generation: 3}, nil
	}
	return bundle.PromoteReport{}, bundle.ErrMasterReachable
}

func (f *fakeSites) kill(string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = true
	return "killed", nil
}

func (f *fakeSites) startSlave(context.Context, string, string) error { return nil }

func (f *fakeSites) held(context.Context, string) (map[int]bool, error) {
	held := map[int]bool{}
	for i := range 1 << 14 { // far more than the few hundred messages a run sends
		held[i] = i != f.lose
	}
	return held, nil
}

func (f *fakeSites) sameAs(context.Context, string, ...string) (uint32, int64, error) {
	return 1, 1, nil
}

func (f *fakeSites) refusal(_ context.Context, site string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if site == f.master || f.staysMaster {
		return "", nil
	}
	return "403: a slave", nil
}

func (f *fakeSites) listUnreplicated(context.Context, string, io.Writer) error { return nil }

// TestFailoverFailsLoudly: a step whose expectation does not hold ends the
// demo with an error that says which and what.
func TestFailoverFailsLoudly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sites *fakeSites
		want  string
	}{
		{"an acknowledged message lost", &fakeSites{master: "bj", lose: 5}, "failover step 1: hf lacks 1 acknowledged messages: 5"},
		{"the old master still takes puts", &fakeSites{master: "bj", lose: -1, staysMaster: true}, "failover step 1: bj is not a slave of hf"},
		{"promote while bj is reachable", &fakeSites{master: "bj", lose: -1, promoteWhileReachable: true}, "failover step 3: promote at hf while bj is reachable"},
		// Refused because gz is ahead, hf is promoted with -force; the
		// imitation then holds every message, which the demo rejects.
		{"nothing lost when bj was cut off", &fakeSites{master: "bj", lose: -1, siblingAhead: true}, "failover step 3: hf holds every message bj acknowledged while cut off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := runFailover(context.Background(), &out, tc.sites)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the demo waited for its deadline instead of failing: %v", err)
			}
			if tc.sites.siblingAhead && !strings.Contains(out.String(), "refused: "+bundle.ErrSiblingAhead.Error()+": gz holds more") ||
				tc.sites.siblingAhead && !strings.Contains(out.String(), "$ metaq-server promote -force -f") {
				t.Errorf("the refusal and the forced promotion are not shown:\n%s", out.String())
			}
		})
	}
}
