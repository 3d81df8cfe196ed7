package bundle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestJavaProducerOnViewLeavesDeadSite: deploy/'s layout (secret, mutual
// TLS, one ZooKeeper per site) with hf master and bj and gz its slave
// sites, forwardPuts=true at bj. MetaQ 1.4.6's synchronous Java producer
// finds the brokers through bj's view root in bj's ensemble, so it sends
// to bj's bundle, which carries its puts to hf. bj is then killed (as kill
// -9 does). A bundle of another site keeps bj's view and points its entry
// at hf's master; once gossip declares bj dead (not merely suspect) it
// also re-creates the view<id> marker under topics-pub/orders, the node
// whose children the producer watches, so the producer reads the brokers
// again and sends to hf: it has acknowledgements again after the kill,
// every acknowledged send is at hf where the producer was told, and no
// send was answered with a failure (the ones that failed, the client
// failed itself: on bj's closed connection). Before the marker, the
// producer kept sending to bj's dead address for as long as it ran.
func TestJavaProducerOnViewLeavesDeadSite(t *testing.T) {
	cp := javaTestClasspath(t)
	s := newSites(t, sitesSpec{sites: []string{"hf", "bj", "gz"}, deploy: true, perSiteZK: true,
		overlays: map[string]string{"bj": "\n[site]\nforwardPuts=true\n"}})
	waitViewAt(t, s, "bj")
	bjURL, hfURL := s.site("bj").Broker.URL(), s.site("hf").Broker.URL()
	p := startJavaProducer(t, cp, s.zks["bj"], s.zkRoot+"-view-bj", "orders")

	s.kill("bj")
	killed := time.Now()
	// Liveness, not speed: gossip's failure detection plus one view pass
	// take seconds; on main the producer never leaves bj.
	waitAcks(t, p, 20, killed)
	r := stopJavaProducer(t, p)
	var after time.Time
	for _, a := range r.acks {
		if a.at.After(killed) {
			after = a.at
			break
		}
	}
	t.Logf("%d sends acknowledged, %d failed by the client, %d connections closed on ZooKeeper changes; first acknowledgement after the kill %s after it",
		len(r.acks), len(r.unanswered), r.closes, after.Sub(killed).Round(time.Millisecond))
	for _, f := range r.answered {
		t.Errorf("a send was answered with a failure: %s", f)
	}
	if r.closes == 0 {
		t.Errorf("the producer never read the brokers again (no connection closed on a ZooKeeper change)")
	}
	// The view may name hf in its other form (registry.SameViewURL).
	hfAlt := strings.Replace(hfURL, "meta://127.0.0.1:", "meta://[::ffff:127.0.0.1]:", 1)
	if tail := p.stderrTail(1 << 20); !strings.Contains(tail, "Connected to "+hfURL) && !strings.Contains(tail, "Connected to "+hfAlt) {
		t.Errorf("the producer never connected to hf's master %s (bj was %s)", hfURL, bjURL)
	}
	if missing := checkAcked(s.site("hf"), "orders", r.acks); len(missing) > 0 {
		t.Errorf("%d of %d acknowledged sends are not at hf where the producer was told, the first %+v", len(missing), len(r.acks), missing[0])
	}
	zc := zkClient(t, &testEnv{zk: s.zks["bj"], root: s.zkRoot})
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		data, _, err := zc.Get(t.Context(), s.zkRoot+"-view-bj/brokers/ids/0/master")
		if err != nil || !registry.SameViewURL(string(data), hfURL) {
			return fmt.Errorf("bj's view names %q (%v), want hf's master %s", data, err, hfURL)
		}
		return nil
	})
}
