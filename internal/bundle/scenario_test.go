package bundle

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestFailoverScenarios runs every script in testdata/scenarios on a fresh
// deployment from newSites, so that a failover scenario is a text file.
// A script is one command per line ('#' starts a comment):
//
//	sites bj hf gz [deploy] [perzk] [nogossip] [autofailover]
//	                                 the deployment (first line; first site is master)
//	produce <site> <topic> <n>       n puts through <site>'s ZooKeeper, all acknowledged
//	switchover <from> <to>           hand mastership over
//	promote <site> [force]           promote a slave site
//	kill <site> / restart <site>     kill -9, and start again by the unit's command
//	cut <site> / heal <site>         a slave site's link to the first master
//	cutzk <site> / healzk <site>     a site's connection to its ZooKeeper
//	caughtup <topic> [site...]       every running slave site (or the named ones) holds the
//	                                 master's log of topic
//	                                 (an asynchronous put acknowledged just before a kill may
//	                                 be lost otherwise: the documented RPO)
//	autopromoted <site>              <site> promoted itself (automatic failover), no operator action
//	converged <topic> [master]       one master, every running site byte-identical,
//	                                 every acknowledged put served (at master, when named)
//	role <site> master|slave         the site's role now
func TestFailoverScenarios(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site scenarios skipped in -short mode")
	}
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata/scenarios (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, file string) {
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var s *sites
	sc := bufio.NewScanner(fh)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		at := file + ":" + strconv.Itoa(line)
		if s == nil && f[0] != "sites" {
			t.Fatalf("%s: the first command must be sites", at)
		}
		t.Logf("%s: %s", at, strings.Join(f, " "))
		need := func(n int) {
			if len(f) < n+1 {
				t.Fatalf("%s: %s needs %d arguments", at, f[0], n)
			}
		}
		switch f[0] {
		case "sites":
			spec := sitesSpec{}
			for _, w := range f[1:] {
				switch w {
				case "deploy":
					spec.deploy = true
				case "perzk":
					spec.perSiteZK = true
				case "nogossip":
					spec.noGossip = true
				case "autofailover":
					// deploy/'s timing: 30 s sessions, gossip probing
					// every 500 ms, autoFailoverAfterMs=1000.
					auto := autoFailoverDeploy()
					spec.sessionTimeout, spec.probeInterval, spec.replication = auto.sessionTimeout, auto.probeInterval, auto.replication
				default:
					spec.sites = append(spec.sites, w)
				}
			}
			s = newSites(t, spec)
		case "produce":
			need(3)
			n, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatalf("%s: produce count %q: %v", at, f[3], err)
			}
			s.produce(f[1], f[2], n)
		case "switchover":
			need(2)
			rep := s.switchover(f[1], f[2])
			t.Logf("%s: switchover to %s, writes stopped %v, followers %+v", at, rep.To, rep.WritesStopped, rep.Followers)
		case "promote":
			need(1)
			rep := s.promote(f[1], len(f) > 2 && f[2] == "force")
			t.Logf("%s: %s promoted, generation %d", at, f[1], rep.Generation)
		case "kill":
			need(1)
			s.kill(f[1])
		case "restart":
			need(1)
			s.restart(f[1])
		case "cut":
			need(1)
			s.cut(f[1])
		case "heal":
			need(1)
			s.heal(f[1])
		case "cutzk":
			need(1)
			s.cutZK(f[1])
		case "healzk":
			need(1)
			s.healZK(f[1])
		case "caughtup":
			need(1)
			m := s.master()
			if m == "" {
				t.Fatalf("%s: no master to catch up with", at)
			}
			names := f[2:]
			if len(names) == 0 {
				names = s.running()
			}
			for _, n := range names {
				if n != m {
					waitCaughtUp(t, s.site(m), s.site(n), f[1], 30*time.Second)
				}
			}
		case "autopromoted":
			need(1)
			start := time.Now()
			testutil.Eventually(t, 25*time.Second, 20*time.Millisecond, func() error {
				if m := s.master(); m != f[1] {
					return fmt.Errorf("master %q, want %s", m, f[1])
				}
				return nil
			})
			t.Logf("%s: %s took puts %v later, by itself", at, f[1], time.Since(start).Round(time.Millisecond))
		case "converged":
			need(1)
			m := s.converged(f[1])
			if len(f) > 2 && m != f[2] {
				t.Fatalf("%s: converged with %s as master, want %s", at, m, f[2])
			}
		case "role":
			need(2)
			want, ok := map[string]siterole.Role{"master": siterole.Master, "slave": siterole.Slave}[f[2]]
			if !ok {
				t.Fatalf("%s: role %q: want master or slave", at, f[2])
			}
			if r := s.site(f[1]).Role(); r.Role != want {
				t.Fatalf("%s: %s's role is %v, want %s", at, f[1], r, f[2])
			}
		default:
			t.Fatalf("%s: unknown command %q", at, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
