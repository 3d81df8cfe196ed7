package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestPerSiteZKMasterSteppedDownForAGivenBackRaise: soak seeds 942071 and
// 942074. A forced raise won in the master's own ensemble (bj's, here
// written as gz's raise), the master read it and stepped down to follow
// that generation, then the raise was given back (it could not write
// every listed site's ensemble and the number was outside its site's
// class) and the promotion failed. Every ensemble holds the old
// generation again and no site is master: the one that stepped down
// follows a generation nothing else names. Its role is the only trace of
// it, so it must be gossiped and counted as left unfinished, and a slave
// site is then promoted automatically.
func TestPerSiteZKMasterSteppedDownForAGivenBackRaise(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, autoFailoverDeploy())
	stop := s.watchMasters()
	defer stop()
	bj := s.site("bj")
	waitConfirmed(t, bj)
	brokerID := bj.Config().System.BrokerID
	known := bj.Role().Generation
	raise := s.raiseIn("bj", "gz", brokerID, known)
	gen := raise.gen
	s.steppedDown("bj")
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		id := bj.failover.openedIdentity()
		if id == nil || followedGeneration(id) != gen {
			return fmt.Errorf("bj's role does not follow generation %d yet", gen)
		}
		return nil
	})
	raise.giveBack()
	givenBack := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, zc := range s.ensembleClients() {
		if g, err := zc.Generation(ctx, brokerID); err != nil || g != known {
			t.Fatalf("%s's ensemble has generation %d (%v) after the give-back, want %d", name, g, err, known)
		}
	}

	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		var masters []string
		for _, n := range s.running() {
			if r := s.site(n).Role(); r.IsMaster() && !r.SteppedDown {
				masters = append(masters, n)
			}
		}
		if len(masters) != 1 {
			return fmt.Errorf("masters %v %v after generation %d was given back, want exactly one",
				masters, time.Since(givenBack).Round(time.Millisecond), gen)
		}
		return nil
	})
	m := s.master()
	t.Logf("%s is master of generation %d %v after the give-back", m, s.site(m).Role().Generation, time.Since(givenBack).Round(time.Millisecond))
	if g := s.site(m).Role().Generation; g <= gen {
		t.Errorf("%s is master of generation %d, want one above the %d given back", m, g, gen)
	}
	s.produce(m, "orders", 5)
	if c := s.converged("orders"); c != m {
		t.Fatalf("converged on %s, want the master %s", c, m)
	}
}

// waitConfirmed waits until b, a master, has confirmed its generation in a
// majority of the listed sites' ensembles (it then acknowledges at once).
func waitConfirmed(t testing.TB, b *Bundle) {
	t.Helper()
	sc := mustComp[*shipperComponent](t, b)
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if sc.guard != nil && sc.guard.returning(time.Now()) {
			return fmt.Errorf("the master has not confirmed its generation yet")
		}
		return nil
	})
}

// TestPerSiteZKMasterTakesBackAGivenBackRaise: the master read a raise
// of the generation in its own ensemble and stepped down for it, then the
// raise was given back (a forced raise's reclass branch). Nothing else
// would ever be master of that number: the give-back marks it in the
// raiser node, and the master that stepped down takes mastership back at
// once, at a number above it. Automatic failover is off here, so on the
// code before no site was master again.
func TestPerSiteZKMasterTakesBackAGivenBackRaise(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{deploy: true, perSiteZK: true, sessionTimeout: 30 * time.Second, probeInterval: 500 * time.Millisecond})
	stop := s.watchMasters()
	defer stop()
	bj := s.site("bj")
	waitConfirmed(t, bj)
	brokerID := bj.Config().System.BrokerID
	known := bj.Role().Generation
	s.produce("bj", "orders", 5)
	raise := s.raiseIn("bj", "gz", brokerID, known)
	gen := raise.gen
	s.steppedDown("bj")
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		id := bj.failover.openedIdentity()
		if id == nil || followedGeneration(id) != gen {
			return fmt.Errorf("bj's role does not follow generation %d yet", gen)
		}
		return nil
	})
	raise.giveBack()
	givenBack := time.Now()

	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		if r := bj.Role(); !r.IsMaster() || r.SteppedDown || r.Generation <= gen {
			return fmt.Errorf("bj is %v %v after generation %d was given back; want master of a newer one",
				r, time.Since(givenBack).Round(time.Millisecond), gen)
		}
		return nil
	})
	t.Logf("bj is master of generation %d %v after the give-back", bj.Role().Generation, time.Since(givenBack).Round(time.Millisecond))
	for _, n := range []string{"hf", "gz"} {
		if r := s.site(n).Role(); r.IsMaster() {
			t.Errorf("%s is %v, want a slave", n, r)
		}
	}
	s.produce("bj", "orders", 5)
	if c := s.converged("orders"); c != "bj" {
		t.Fatalf("converged on %s, want bj", c)
	}
}
