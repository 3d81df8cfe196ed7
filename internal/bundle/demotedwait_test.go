package bundle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
	"metaq/topology"
)

// TestDemotedSiteWaitingForAMasterPromotesItself: with automatic failover
// on, hf's forced promotion raises generation 1 and starts shipping (gossip
// has hf master of it) but never registers in ZooKeeper: bj's session held
// the master node, then hf's own ZooKeeper went away. bj, cut from
// ZooKeeper meanwhile, steps down for generation 1 and, once its ZooKeeper
// is back, rejoins as a slave: no master node exists and no replication
// address, so its receiver waits for one and runs no stream receiver. hf
// dies meanwhile, and its session with it. bj is then the only site left and the master is gone by
// every rule a slave with a stream receiver follows (gossip declared hf
// down, nothing heard from a master for longer than the acknowledgement
// bound since bj began waiting, no master node in ZooKeeper): bj must
// promote itself within the bound. Before the fix it never did: a site
// without a stream receiver was never counted as having lost its master
// ("this site runs no stream receiver"), and promote refused it as "not a
// running async slave".
func TestDemotedSiteWaitingForAMasterPromotesItself(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}, replication: "autoFailover=true\nautoFailoverAfterMs=500\n"})
	s.produce("bj", "orders", 10)
	bj := s.site("bj")
	waitCaughtUp(t, bj, s.site("hf"), "orders", 30*time.Second)

	t.Logf("hf's promotion failed half way, as wanted: %v", s.promoteHalfWay("hf", "bj"))
	if hf := s.site("hf"); hf.promotedShipper() == nil || hf.mastership(topology.Mastership{Role: topology.RoleSlave}).Generation != 1 {
		t.Fatalf("hf: shipping %v, gossiped %+v: not the half-promoted master of generation 1 this test is about",
			hf.promotedShipper() != nil, hf.mastership(topology.Mastership{Role: topology.RoleSlave}))
	}
	// bj learns it by gossip before hf dies: a slave site gossip declared
	// down is no vote that the master is lost, a master is. On a loaded
	// machine hf's new metadata can take seconds to reach bj, and a hf
	// killed before then would stay a dead slave in bj's view for good.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, m := range mustComp[*topologyComponent](t, bj).Topology().Members() {
			if m.Meta.Site == "hf" && m.Meta.Role == topology.RoleMaster && m.Meta.Generation == 1 {
				return nil
			}
		}
		return errors.New("bj's gossip does not show hf as master of generation 1 yet")
	})
	s.kill("hf")
	// hf's shipper published its replication address before hf went away;
	// it goes with hf's session. bj rejoins only after that: no master
	// node, no replication address (bj's own session, blocked as long,
	// has expired too).
	zc := s.ensembleClients()["bj"]
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, node := range []string{"master", replicationNode} {
			path := zc.Paths().BrokerID(0) + "/" + node
			if ok, _, err := zc.Exists(ctx, path); err != nil || ok {
				return fmt.Errorf("%s is still in ZooKeeper (%v)", path, err)
			}
		}
		return nil
	})
	s.healZK("bj")

	// bj rejoins as a slave of generation 1 and waits for its master.
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		rc := bj.demotedReceiver()
		if r := bj.Role(); r.Role != siterole.Slave || rc == nil {
			return fmt.Errorf("bj: role %v, following: %v", r, rc != nil)
		}
		if _, waiting := rc.waiting(); !waiting && bj.Role().Role == siterole.Slave {
			m, why := rc.Method()
			return fmt.Errorf("bj's receiver does not wait for a master (method %q: %s)", m, why)
		}
		return nil
	})
	waited := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if r := bj.Role(); !r.IsMaster() || s.master() != "bj" {
			_, why := bj.masterLost(ctx, mustComp[*topologyComponent](t, bj).Topology())
			return fmt.Errorf("bj is %v, %v after it began waiting for a master: %s", r, time.Since(waited).Round(time.Millisecond), why)
		}
		return nil
	})
	gen := bj.Role().Generation
	t.Logf("bj promoted itself at generation %d, %v after it began waiting", gen, time.Since(waited).Round(time.Millisecond))
	if gen <= 1 {
		t.Fatalf("bj is master of generation %d, want one above hf's 1", gen)
	}
	s.produce("bj", "orders", 10)
	s.restart("hf")
	if m := s.converged("orders"); m != "bj" {
		t.Fatalf("master %s, want bj", m)
	}
}
