package bundle

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestEnsembleStatusReadsTheRegistration: with one ZooKeeper per site, a
// master's status of another site's ensemble reads its registration there
// back instead of remembering that it wrote it: right after the master
// node is removed there, status does not report it registered while it is
// missing (the mirror writes it again at its next round).
func TestEnsembleStatusReadsTheRegistration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zks := map[string]string{"bj": testutil.ZooKeeper(t), "hf": testutil.SecondZooKeeper(t)}
	dir := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zks["bj"], zks["hf"]}, "bj", "hf")
	shared := sharedINI(zks["bj"], zkRoot, "[topic=orders]\nnumPartitions=2\n", noConfigSync)
	bj := startSite(t, filepath.Join(dir, "bj"), shared, siteSpec{name: "bj", noNATS: true})
	join := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	startSite(t, filepath.Join(dir, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true, join: join,
		masterAddr: mustComp[*shipperComponent](t, bj).Addr(), extraOverlay: "[zookeeper]\nzk.zkConnect=" + zks["hf"] + "\n"})
	status := func() EnsembleStatus {
		st := mustComp[*topologyComponent](t, bj).Status().(map[string]any)
		ens, _ := st["ensembles"].(map[string]EnsembleStatus)
		return ens["hf"]
	}
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if e := status(); !e.Connected || !e.MasterRegistered {
			return fmt.Errorf("bj's status of hf's ensemble: %+v", e)
		}
		return nil
	})
	hfZK := zkClient(t, &testEnv{zk: zks["hf"], root: zkRoot})
	ctx := context.Background()
	node := hfZK.Paths().Broker(0, -1)
	for range 3 {
		if err := hfZK.Delete(ctx, node); err != nil {
			t.Fatal(err)
		}
		e := status()
		ok, _, err := hfZK.Exists(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if e.MasterRegistered && !ok {
			t.Fatalf("bj's status says its registration in hf's ensemble is in place while %s is missing: %+v", node, e)
		}
		// The mirror writes it again.
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			if ok, _, _ := hfZK.Exists(ctx, node); !ok {
				return fmt.Errorf("%s not written again", node)
			}
			return nil
		})
	}
}
