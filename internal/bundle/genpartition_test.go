package bundle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/siterole"
	"metaq/internal/testutil"
	"metaq/topology"
)

// TestPerSiteZKForcedPromotionsAcrossAPartition: one ZooKeeper per site,
// [replication] sites=bj,gz,hf; bj (master) dies with its site's ensemble
// out of reach, and hf and gz are cut off from each other (their gossip
// and each other's ensembles; their links went to bj). `promote -force`
// at hf and at gz each reaches only its own ensemble: on the code before,
// both went one above what they saw and both owned the same generation,
// both acknowledging puts in it. Each now takes the next number of its own
// site's class (gz 1, hf 2), so the numbers differ. Healed, exactly one
// master remains (the newer generation's), the other follows it and saves
// aside the puts it took at its own generation, and every site, bj
// restarted by its unit's command included, ends byte-identical.
func TestPerSiteZKForcedPromotionsAcrossAPartition(t *testing.T) {
	t.Parallel()
	promotionsAcrossAPartition(t, func(s *sites) {
		for _, site := range []string{"bj", "hf", "gz"} {
			s.cutEnsemble(site)
		}
	}, true)
}

// TestPerSiteZKMajorityAndForcedAcrossAPartition: as
// TestPerSiteZKForcedPromotionsAcrossAPartition, but hf still reaches bj's
// ensemble (2 of the 3) and is promoted without -force, while gz, cut off
// from both other ensembles, is forced. On the code before gz's forced
// raise took generation 1 in its own ensemble and hf's raise won 1 in a
// majority (its own and bj's): both masters of generation 1. hf's raise
// cannot write gz's ensemble, so it takes its class's number (2).
func TestPerSiteZKMajorityAndForcedAcrossAPartition(t *testing.T) {
	t.Parallel()
	promotionsAcrossAPartition(t, func(s *sites) {
		s.cutEnsembleFrom("bj", "gz")
		s.cutEnsembleFrom("hf", "gz")
		s.cutEnsembleFrom("gz", "hf")
	}, false)
}

// promotionsAcrossAPartition runs the two tests above: bj killed, the
// ensembles cut by cut, hf's and gz's gossip cut; hf promoted (forced when
// forceHF), gz forced; each acknowledges puts; then everything healed.
func promotionsAcrossAPartition(t *testing.T, cut func(*sites), forceHF bool) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{perSiteZK: true, replication: "sites=bj,gz,hf\n"})
	s.reachesAllEnsembles("hf", "gz")
	s.kill("bj")
	s.waitMasterGone("bj")
	cut(s)
	s.cutGossip("hf", "gz")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, pair := range [][2]string{{"hf", "gz"}, {"gz", "hf"}} {
			if m, ok := gossipMember(s.site(pair[0]), pair[1]); ok && m.State == topology.StateAlive {
				return fmt.Errorf("%s's gossip still has %s alive", pair[0], pair[1])
			}
		}
		return nil
	})

	const n = 5
	gens := map[string]uint64{}
	repeated := map[string]map[string]bool{} // per site: bodies sent again (produceWith)
	for _, site := range []string{"gz", "hf"} {
		rep := s.promote(site, site == "gz" || forceHF)
		gens[site] = rep.Generation
		// Each side acknowledges puts at its own generation.
		repeated[site] = produce(t, s.site(site).Broker.Addr().String(), "orders", n, site+"-side-")
	}
	t.Logf("hf promoted to generation %d (forced %t), gz to %d (forced)", gens["hf"], forceHF, gens["gz"])
	if gens["hf"] == gens["gz"] {
		t.Fatalf("hf and gz, cut off from each other, were both promoted to generation %d and both acknowledged puts in it", gens["hf"])
	}
	for site, g := range gens {
		if ok, why := siterole.ClassAllows(s.site(site).classFacts(g, false)); !ok {
			t.Errorf("%s took generation %d: %s", site, g, why)
		}
	}
	winner, loser := "hf", "gz"
	if gens["gz"] > gens["hf"] {
		winner, loser = "gz", "hf"
	}

	s.healEnsembles()
	s.healGossip("hf", "gz")
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		var masters []string
		for _, site := range s.running() {
			if s.site(site).Role().IsMaster() {
				masters = append(masters, site)
			}
		}
		if !slices.Equal(masters, []string{winner}) {
			return fmt.Errorf("masters %v, want %s alone (generation %d)", masters, winner, gens[winner])
		}
		return nil
	})
	s.restart("bj")
	s.produce(winner, "orders", n)
	if m := s.converged("orders"); m != winner {
		t.Fatalf("converged with %s as master, want %s", m, winner)
	}

	// The winner serves its side's puts; the loser saved its own aside.
	data := readTopic(t, s.site(winner), "orders")
	checkBodyCounts(t, fmt.Sprintf("%s's puts at generation %d, served by %s", winner, gens[winner], winner),
		countBodies([][]byte{data}, sentBodies(winner+"-side-", n)), sentBodies(winner+"-side-", n), repeated[winner])
	if c := bytes.Count(data, []byte(loser+"-side-")); c != 0 {
		t.Errorf("%s serves %d puts %s acknowledged at generation %d", winner, c, loser, gens[loser])
	}
	tails, err := georeplicator.ListTails(filepath.Join(s.dir, loser, "data", "replication", "unreplicated"))
	if err != nil {
		t.Fatal(err)
	}
	var saved [][]byte
	for _, f := range tails {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		c := bytes.Count(b, []byte(loser+"-side-"))
		// A tail is named by the generation of the master it was cut for.
		if f.Records != c || f.Generation != gens[winner] {
			t.Errorf("%s saved aside %+v: %d of its records are its side's puts, want all, cut for generation %d", loser, f, c, gens[winner])
		}
		saved = append(saved, b)
	}
	checkBodyCounts(t, fmt.Sprintf("%s's puts at generation %d, saved aside by %s (%d files)", loser, gens[loser], loser, len(tails)),
		countBodies(saved, sentBodies(loser+"-side-", n)), sentBodies(loser+"-side-", n), repeated[loser])
}

// gossipMember is what b's gossip says of site's bundle of b's brokerId.
func gossipMember(b *Bundle, site string) (topology.Member, bool) {
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return topology.Member{}, false
	}
	for _, m := range tc.Topology().Members() {
		if m.Meta.Site == site && m.Meta.BrokerID == b.Config().System.BrokerID {
			return m, true
		}
	}
	return topology.Member{}, false
}

// readTopic is every partition of topic in b's store, concatenated.
func readTopic(t *testing.T, b *Bundle, topic string) []byte {
	t.Helper()
	var out []byte
	for _, p := range b.Store.Partitions() {
		if p.Topic != topic {
			continue
		}
		data, err := b.Store.Read(topic, p.Partition, 0, 256<<20)
		if err != nil {
			t.Fatalf("%s-%d: %v", topic, p.Partition, err)
		}
		out = append(out, data...)
	}
	return out
}
