package bundle

import (
	"errors"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestStatusWithoutZooKeeperSession: a master whose ZooKeeper connection is
// gone answers /status from what it holds, without a read that can only
// wait out its bound. In seed 943055 hf's ZooKeeper could not be reached
// for a minute after it was restarted; hf's status waited 2 s on each
// request for the read that confirms its master node, and the harness,
// asking with a 2-s timeout, found a site that did not answer /status for
// 30 s. Status now says there is no session and that the node is not
// confirmed; once the session is back it confirms the node again.
func TestStatusWithoutZooKeeperSession(t *testing.T) {
	t.Parallel()
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	bj := s.site("bj")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if zk := bj.Status().ZooKeeper; zk == nil || !zk.Connected || !zk.BrokerRegistered {
			return errors.New("bj's status: no session or its master node not registered yet")
		}
		return nil
	})

	s.cutZK("bj")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if bj.Registry.Connected() {
			return errors.New("bj's registry still has its session")
		}
		return nil
	})
	zk := bj.Status().ZooKeeper
	if zk == nil || zk.Connected || zk.BrokerRegistered {
		t.Fatalf("bj's status with its ZooKeeper cut: %+v, want connected and brokerRegistered false", zk)
	}

	s.healZK("bj")
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if zk := bj.Status().ZooKeeper; zk == nil || !zk.Connected || !zk.BrokerRegistered {
			return errors.New("bj's status after the heal: no session or its master node not registered again")
		}
		return nil
	})
}
