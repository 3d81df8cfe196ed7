package bundle

import (
	"fmt"
	"testing"
)

// TestSwitchoverPassesHeldPutsOnBeforeTheNewMasterRegisters: a put that
// reaches the old master while the new master has taken puts but not yet
// registered in ZooKeeper (a slow registration on a loaded machine) is
// passed on to the new master and acknowledged, with gossip off. Before,
// the old master learnt the new master's MetaQ address from ZooKeeper (or
// gossip) alone, so the held put waited out the hold's bound and was
// answered 503, not stored: the Java producer's send error seen during a
// switchover under load. Now the new master's notice over the replication
// link (opTakenOver) names its MetaQ address. The hook holds hf's
// registration back until bj answered the put, whatever the machine's
// speed: what is checked is the answer, not a time. The links carry
// deploy/'s secret and mutual TLS: the old master takes the notice only
// over an authenticated link.
func TestSwitchoverPassesHeldPutsOnBeforeTheNewMasterRegisters(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{deploy: true, noGossip: true, replication: "handoverHoldMs=1000\n"})
	bj, hf := s.site("bj"), s.site("hf")
	body := []byte("put held by the old master before the new one registers")
	answer := putBeforeRegistration(t, s, "hf", bj.Broker.Addr().String(), body)
	if !answer.OK() {
		t.Fatalf("put held by bj while hf had not registered: answered %d %q, want acknowledged by hf", answer.Code, answer.Body)
	}
	var id, offset int64
	var part int
	if _, err := fmt.Sscanf(string(answer.Body), "%d %d %d", &id, &part, &offset); err != nil {
		t.Fatalf("answer %q: %v", answer.Body, err)
	}
	r, err := recordAt(hf, "orders", part, offset)
	if err != nil || string(r.Body) != string(body) {
		t.Fatalf("hf has at orders-%d offset %d %+v (%v), want the held put", part, offset, r, err)
	}
	s.produce("hf", "orders", 5)
	s.converged("orders")
}
