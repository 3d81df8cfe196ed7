package bundle

import "testing"

// TestSwitchBackWithinTheHandoverHold: bj hands over to hf and is switched
// back before its handover hold ends ([replication] handoverHoldMs, made
// long here; 2.5 s by default). bj, master again, takes its producers'
// puts itself. Before, the hold of its own first handover was still in
// effect and passed them on to hf, a slave by then: the producer got 500
// "the put was sent to the new master and no answer came" (a CI run of the
// switchover_and_back scenario, which switches back within a second).
func TestSwitchBackWithinTheHandoverHold(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{replication: "handoverHoldMs=60000\n"})
	s.produce("bj", "orders", 10)
	s.switchover("bj", "hf")
	s.produce("hf", "orders", 10)
	s.switchover("hf", "bj")
	s.produce("bj", "orders", 20)
	s.converged("orders")
}
