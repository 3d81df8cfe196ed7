package bundle

import (
	"context"
	"testing"
	"time"

	"metaq/broker/client"
)

// returnCutWatch is how long the returning master below is watched while
// cut off: longer than the 15 s a master that handed over waits for the new
// generation (handoverConfirmWait) before it takes puts again.
const returnCutWatch = 16 * time.Second

// TestPerSiteZKReturningMasterCutFromTheMajority: one ZooKeeper per site,
// [replication] sites=bj,gz,hf (deploy/'s common server.ini). bj's site is
// cut off from the others (the replication links, gossip, and the
// ensembles both ways), bj dies, and hf is promoted: its raise wins in hf's
// and gz's ensembles, never in bj's. bj is then restarted by its unit's
// command, still cut off: its own ensemble has generation 0, its own, and
// nothing else it reaches says otherwise. It must acknowledge no put while
// it cannot confirm its generation in a majority of the listed sites'
// ensembles (before the fix it confirmed on its own ensemble's word and
// acknowledged at once, at a generation hf had replaced); healed, it
// follows hf and every site ends byte-identical.
func TestPerSiteZKReturningMasterCutFromTheMajority(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true, keepPorts: true, replication: "sites=bj,gz,hf\n"})
	s.reachesAllEnsembles("bj", "hf", "gz") // bj records the others' ensembles

	cutOff := func() {
		s.cut("hf")
		s.cut("gz")
		s.cutGossip("bj", "hf")
		s.cutGossip("bj", "gz")
		s.cutEnsemble("bj")
		s.cutEnsembleFrom("hf", "bj")
		s.cutEnsembleFrom("gz", "bj")
	}
	cutOff()
	s.kill("bj")
	s.waitMasterGone("bj")
	rep := s.promote("hf", false)
	t.Logf("hf promoted at generation %d", rep.Generation)

	s.restart("bj")
	bj := s.site("bj")
	acked, tried := putsAcknowledged(t, bj.Broker.Addr().String(), returnCutWatch)
	t.Logf("bj, restarted cut off from the majority: %d of %d puts acknowledged in %v (role %v)", acked, tried, returnCutWatch, bj.Role())
	if tried == 0 {
		t.Fatal("no put reached bj")
	}
	if acked > 0 {
		t.Fatalf("bj, restarted cut off from hf's and gz's ensembles after hf was promoted at generation %d, acknowledged %d of %d puts at its own generation",
			rep.Generation, acked, tried)
	}

	s.heal("hf")
	s.heal("gz")
	s.healGossip("bj", "hf")
	s.healGossip("bj", "gz")
	s.healEnsemble("bj")
	s.healEnsembles()
	s.produce("hf", "orders", 10)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
}

// putsAcknowledged sends puts to the broker at addr, one after the other,
// for d, and counts those acknowledged.
func putsAcknowledged(t *testing.T, addr string, d time.Duration) (acked, tried int) {
	t.Helper()
	p, closeP := testProducer(t, client.Config{Brokers: []string{addr}})
	defer closeP()
	for end := time.Now().Add(d); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := p.Send(ctx, &client.Message{Topic: "orders", Payload: []byte("returning-master")})
		cancel()
		tried++
		if err == nil {
			acked++
		}
		time.Sleep(100 * time.Millisecond)
	}
	return acked, tried
}
