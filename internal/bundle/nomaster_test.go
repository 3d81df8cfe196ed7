package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// TestAutoFailoverAfterUnfinishedRaiseAndRestarts reaches the state a
// fault schedule (seed 920231) ended in, with deploy/'s layout and
// automatic failover on: a promotion at hf raised generation 1 in every
// ensemble and died before it recorded anything (it is raised here by
// hand with hf as its raiser); then every site was killed and restarted
// by its unit's command. bj, the configured master, starts as a slave
// (ZooKeeper's generation is newer than its own); hf and gz start as
// slaves that never reach a master. No site is master, the generation in
// ZooKeeper is newer than any living site's, no gossip member is the old
// master (every site's gossip node is new), and no receiver has heard
// from a master since it started.
//
// Within the bound exactly one site becomes master, automatically, at a
// generation above the unfinished one; the others follow it and take its
// log; never two masters of one generation.
func TestAutoFailoverAfterUnfinishedRaiseAndRestarts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	spec := autoFailoverDeploy()
	spec.keepPorts = true // deploy/'s units restart on the same ports
	s := newSites(t, spec)
	stop := s.watchMasters()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	token, err := registry.NewRaiseToken()
	if err != nil {
		t.Fatal(err)
	}
	by := registry.Raiser{Generation: 1, Site: "hf", Token: token}
	for name, zc := range s.ensembleClients() {
		if g, err := zc.RaiseGenerationFromAs(ctx, 0, 0, by); err != nil || g != 1 {
			t.Fatalf("raise generation 1 in %s's ensemble as hf: %d, %v", name, g, err)
		}
	}
	for _, n := range []string{"bj", "hf", "gz"} {
		s.kill(n)
	}
	for _, n := range []string{"bj", "hf", "gz"} {
		s.restart(n)
	}
	for _, n := range []string{"bj", "hf", "gz"} {
		if r := s.site(n).Role(); r.Role != siterole.Slave {
			t.Fatalf("%s restarted as %v, want a slave (generation 1 is newer than every site's)", n, r)
		}
	}
	restarted := time.Now()

	var master string
	testutil.Eventually(t, 45*time.Second, 50*time.Millisecond, func() error {
		if master = s.master(); master == "" {
			var whys []string
			for _, n := range s.running() {
				b := s.site(n)
				_, why := b.masterLost(ctx, mustComp[*topologyComponent](t, b).Topology())
				whys = append(whys, n+": "+why)
			}
			return fmt.Errorf("no site is master %v after the restarts: %v", time.Since(restarted).Round(time.Millisecond), whys)
		}
		return nil
	})
	gen := s.site(master).Role().Generation
	t.Logf("%s became master of generation %d, %v after the restarts, with no operator action", master, gen, time.Since(restarted).Round(time.Millisecond))
	if gen <= 1 {
		t.Fatalf("%s is master of generation %d, want one above the unfinished generation 1", master, gen)
	}
	s.produce(master, "orders", 10)
	for _, n := range s.running() {
		if n == master {
			continue
		}
		b := s.site(n)
		if r := b.Role(); r.Role != siterole.Slave {
			t.Fatalf("%s is %v while %s is master, want a slave", n, r, master)
		}
		waitCaughtUp(t, s.site(master), b, "orders", 30*time.Second)
	}
	if m := s.master(); m != master {
		t.Fatalf("master %q after the others followed, want %s", m, master)
	}
}
