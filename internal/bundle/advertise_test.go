package bundle

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestReplicationAdvertise: with [replication] advertise set, the master
// gossips that address as its replication address (the one slaves follow
// after a failover with ZooKeeper off), not its listener's, and a slave
// dialling it through the relay it names replicates.
func TestReplicationAdvertise(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	relay := wanProxy(t, "127.0.0.1:1") // aimed at bj's listener once it runs
	shared := failoverINI("advertise=" + relay.Addr() + "\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	ship := mustComp[*shipperComponent](t, bj)
	if got := ship.Addr(); got != relay.Addr() {
		t.Fatalf("bj's replication address is %s, want the advertised %s", got, relay.Addr())
	}
	relay.SetTarget(ship.Shipper().Addr())
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: relay.Addr(),
		natsURL: "nats://" + natsListen, join: seed})
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		m, ok := mustComp[*topologyComponent](t, hf).Topology().Master(0)
		if !ok || m.Meta.ReplAddr != relay.Addr() {
			return fmt.Errorf("hf's gossip names bj's replication address %q, want %s", m.Meta.ReplAddr, relay.Addr())
		}
		return nil
	})
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
}
