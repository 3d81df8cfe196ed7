package bundle

import (
	"testing"
	"time"
)

// javaProducerAt is one MetaQ 1.4.6 Java producer of
// TestJavaClientSwitchoverPerSiteZK: where it finds the brokers.
type javaProducerAt struct {
	name, site, root string
	view             bool // root is the site's view root
	d                *javaDriver
}

// TestJavaClientSwitchoverPerSiteZK: deploy/'s layout (secret, mutual TLS,
// one ZooKeeper per site) with [site] forwardPuts=true at every site; MetaQ
// 1.4.6's synchronous Java producers (one thread, the next send once the
// last is answered) send throughout `switchover -to hf`:
//
//   - one at each site that finds the brokers through its own site's view
//     root in its own site's ensemble (zkRoot is its only change): no send
//     fails. Each view names its own site's bundle before and after (bj's
//     master, then bj's forwarding slave; hf's and gz's forwarding slaves,
//     then hf's master), so the children of topics-pub/<topic> the
//     producer watches never change and it never drops its connection;
//     what reaches bj while it hands over is held there and passed on to
//     hf;
//   - one at bj on the real root of bj's ensemble: the children of
//     topics-pub/<topic> there change once (hf's <id>-m replacing bj's and
//     the entry of the slave bj becomes created in one multi), so the
//     producer drops its connection once, and at most the one send it had
//     in flight on it, or sent before it connected to hf, fails: MetaQ
//     1.4.6's ProducerZooKeeper closes the connection to the old master
//     before it connects to the new one and before it switches its
//     partitions to it (BrokerConnectionListener.syncedUpdateBrokersInfo),
//     gecko fails a call waiting on a closed connection
//     (DefaultConnection.dispose: "等待响应超时") and a send to a group with
//     no connection ("无可用连接"), and the producer does not retry
//     (SimpleMessageProducer's MAX_RETRY is 1).
//
// Every acknowledged send is at hf at the partition and offset, with the id,
// its producer was told.
func TestJavaClientSwitchoverPerSiteZK(t *testing.T) {
	cp := javaClasspath(t)
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	fwd := "\n[site]\nforwardPuts=true\n"
	s := newSites(t, sitesSpec{deploy: true, perSiteZK: true,
		overlays: map[string]string{"bj": fwd, "hf": fwd, "gz": fwd}})
	prods := []*javaProducerAt{
		{name: "bj-view", site: "bj", root: s.zkRoot + "-view-bj", view: true},
		{name: "hf-view", site: "hf", root: s.zkRoot + "-view-hf", view: true},
		{name: "gz-view", site: "gz", root: s.zkRoot + "-view-gz", view: true},
		{name: "bj-real-root", site: "bj", root: s.zkRoot},
	}
	for _, p := range prods {
		if p.view {
			waitViewAt(t, s, p.site)
		}
	}
	for _, p := range prods {
		p.d = startJava(t, cp, "FailoverProducer", s.zks[p.site], p.root, "orders")
	}
	for _, p := range prods {
		waitAcks(t, p.d, 20, time.Time{})
	}
	event := time.Now()
	rep := s.switchover("bj", "hf")
	after := time.Now()
	for _, p := range prods {
		waitAcks(t, p.d, 20, after)
	}
	hf := s.site("hf")
	for _, p := range prods {
		p.d.stop()
		acks := p.d.acks(t)
		answered, unanswered, closes := p.d.failedSends()
		firstAtNew, maxGap := stall(t, hf, "orders", acks, event)
		t.Logf("%s: %d sends acknowledged, %d failed (%d answered by a broker, %d failed by the client), %d connections closed on ZooKeeper changes; first acknowledgement of a record new at hf %s after the command; longest gap between two %s",
			p.name, len(acks), len(answered)+len(unanswered), len(answered), len(unanswered), closes, firstAtNew, maxGap)
		for _, f := range unanswered {
			t.Logf("%s: %s", p.name, f)
		}
		for _, f := range answered {
			t.Errorf("%s: a send was answered with a failure: %s", p.name, f)
		}
		switch {
		case p.view && (closes > 0 || len(unanswered) > 0):
			t.Errorf("%s: the producer closed a connection on %d ZooKeeper changes and %d sends failed, want none: %v", p.name, closes, len(unanswered), unanswered)
		case !p.view && (closes != 1 || len(unanswered) > 1):
			t.Errorf("%s: the producer closed a connection on %d ZooKeeper changes and %d sends failed, want one change and at most one failed send: %v", p.name, closes, len(unanswered), unanswered)
		}
		if missing := checkAcked(hf, "orders", acks); len(missing) > 0 {
			t.Errorf("%s: %d of %d acknowledged sends are not at hf where the producer was told, the first %+v", p.name, len(missing), len(acks), missing[0])
		}
	}
	t.Logf("switchover: writes stopped at bj for %s", rep.WritesStopped)
	s.converged("orders")
}
