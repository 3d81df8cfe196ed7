package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
	"metaq/topology"
)

// TestPerSiteZKPartitionedSlaveSiteDoesNotRaiseAboveARegisteredMaster:
// soak finding 22's leftover. The master (bj) is killed; the two slave
// sites lose it and are then cut off from each other (gossip, replication,
// each other's ZooKeeper ensemble; both still reach bj's). One of them wins
// the automatic raise in a majority of the ensembles (its own and bj's)
// and registers there; the other loses, sees the newer generation in bj's
// ensemble and, its gossip having the winner down, no master of it. On the
// code before it counted that generation as left unfinished once it had
// seen it for siterole.UnfinishedAfter, raised above it in its own and
// bj's ensembles, and the winner stepped down for it: a partition longer
// than 10 s let the second side raise. The winner's registration in bj's
// ensemble (a master node created after the raise) now tells the loser
// that the generation is finished.
func TestPerSiteZKPartitionedSlaveSiteDoesNotRaiseAboveARegisteredMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, autoFailoverDeploy())
	stop := s.watchMasters()
	defer stop()
	s.reachesAllEnsembles("hf", "gz")
	s.produce("bj", "orders", 5)
	// orders is asynchronous: bj's puts reach the winner only if it holds
	// them before the kill, and the end checks the winner serves them.
	for _, n := range []string{"hf", "gz"} {
		waitCaughtUp(t, s.site("bj"), s.site(n), "orders", 60*time.Second)
	}
	s.kill("bj")
	// Both lost the master, and gossip says so, before the cut: each has
	// the other's last facts as a site that lost it, not one following.
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		for _, pair := range [][2]string{{"hf", "gz"}, {"gz", "hf"}} {
			m, ok := gossipMember(s.site(pair[0]), pair[1])
			if !ok || m.State != topology.StateAlive || m.Meta.Health.ReplicationOK {
				return fmt.Errorf("%s's gossip has %s %v, following %v; want it alive, not following", pair[0], pair[1], m.State, m.Meta.Health.ReplicationOK)
			}
		}
		return nil
	})
	s.cutGossip("hf", "gz")
	s.cutEnsembleFrom("hf", "gz")
	s.cutEnsembleFrom("gz", "hf")
	s.cutReplication("hf", "gz")
	cut := time.Now()

	var winner string
	var gen uint64
	testutil.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() error {
		var masters []string
		for _, n := range []string{"hf", "gz"} {
			if r := s.site(n).Role(); r.IsMaster() && !r.SteppedDown {
				masters = append(masters, n)
				winner, gen = n, r.Generation
			}
		}
		if len(masters) != 1 {
			return fmt.Errorf("masters %v %v after the cut, want one", masters, time.Since(cut).Round(time.Millisecond))
		}
		return nil
	})
	loser := map[string]string{"hf": "gz", "gz": "hf"}[winner]
	t.Logf("%s is master of generation %d %v after the cut", winner, gen, time.Since(cut).Round(time.Millisecond))

	// The partition lasts past the bound after which a masterless
	// generation counts as unfinished (and the failover delay): the loser
	// must not raise above the winner's generation meanwhile.
	regs := s.ensembleClients()
	hold := time.Now().Add(siterole.UnfinishedAfter + 15*time.Second)
	for time.Now().Before(hold) {
		if r := s.site(winner).Role(); !r.IsMaster() || r.SteppedDown || r.Generation != gen {
			t.Fatalf("%s is %v %v after the cut; want it still master of generation %d (%s raised above it?)",
				winner, r, time.Since(cut).Round(time.Millisecond), gen, loser)
		}
		if r := s.site(loser).Role(); r.IsMaster() {
			t.Fatalf("%s is %v %v after the cut, with %s master of generation %d", loser, r, time.Since(cut).Round(time.Millisecond), winner, gen)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		g, err := regs["bj"].Generation(ctx, s.site(winner).Config().System.BrokerID)
		cancel()
		if err == nil && g > gen {
			t.Fatalf("bj's ensemble has generation %d %v after the cut, above %s's %d", g, time.Since(cut).Round(time.Millisecond), winner, gen)
		}
		time.Sleep(200 * time.Millisecond)
	}

	s.healGossip("hf", "gz")
	s.healEnsembles()
	s.healReplication("hf", "gz")
	s.produce(winner, "orders", 5)
	if m := s.converged("orders"); m != winner {
		t.Fatalf("converged on %s, want %s", m, winner)
	}
}
