package bundle

import (
	"testing"
)

// TestDemotedMasterFollowsWithoutOwnZooKeeper: with one ZooKeeper ensemble
// per site, bj hands mastership to hf and follows it; then bj's own
// ensemble goes and its link to hf breaks. bj must find hf again: the
// replication address hf publishes in ZooKeeper cannot be read at bj, and
// gossip names it. Before, a former master (no masterAddress) read its own
// ensemble only and followed no master until it came back (fault schedule
// seed 900014: "the master of broker 1 publishes no replication address at
// /meta/brokers/ids/1/replication: zk: connection closed").
func TestDemotedMasterFollowsWithoutOwnZooKeeper(t *testing.T) {
	t.Parallel()
	s := newSites(t, sitesSpec{perSiteZK: true, deploy: true})
	s.produce("bj", "orders", 10)
	s.switchover("bj", "hf")
	s.produce("hf", "orders", 10)
	wantFollowsByteIdentical(t, s.site("hf"), s.site("bj"), "orders")

	s.cutZK("bj")
	if s.site("bj").demotedReceiver() == nil {
		t.Fatal("bj runs no receiver after the switchover")
	}
	s.dropReplication("bj")
	s.produce("hf", "orders", 10)
	// Those puts reach bj only over a new connection to hf.
	wantFollowsByteIdentical(t, s.site("hf"), s.site("bj"), "orders")
	s.healZK("bj")
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master after the heal: %s, want hf", m)
	}
}
