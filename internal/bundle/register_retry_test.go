package bundle

import (
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestMasterRegistersOnceTheNodeIsFree: a master that starts while its
// master node is held by another live session (a superseded master's
// mirror, say) gives up waiting after the session timeout; it must go on
// trying and register once the node is free, not serve for ever without
// being found in ZooKeeper (found by the fault schedules,
// internal/faultsched: a restarted master of a newer generation was never
// registered, and the former master it superseded never found it).
func TestMasterRegistersOnceTheNodeIsFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=1\n")
	holder := zkClient(t, e)
	node := holder.Paths().Broker(0, -1)
	if err := holder.EnsurePath(t.Context(), holder.Paths().BrokerID(0)); err != nil {
		t.Fatal(err)
	}
	if err := holder.CreateEphemeral(t.Context(), node, []byte("meta://127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	b := e.start(t) // waits the session timeout for the node, then serves unregistered
	if data, _, err := holder.Get(t.Context(), node); err != nil || string(data) != "meta://127.0.0.1:1" {
		t.Fatalf("master node %q %v: the holder's node was taken", data, err)
	}
	holder.Close() // the node goes with the holder's session
	reader := zkClient(t, e)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		data, _, err := reader.Get(t.Context(), node)
		if err != nil || string(data) != b.Broker.URL() {
			return fmt.Errorf("master node %q %v, want %s", data, err, b.Broker.URL())
		}
		return nil
	})
}
