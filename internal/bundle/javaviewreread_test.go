package bundle

import (
	"strings"
	"testing"
	"time"
)

// TestJavaProducerOnViewKeepsItsBrokerOverRereads: MetaQ 1.4.6's Java
// producer on a site view root whose producers' marker is re-created (a url
// the view once named, not the producer's, is dead) while the url the
// producer uses stays the same. The client closes its connection and opens
// one to the url the view names; when that is the same string, gecko can
// refuse the new connection while the closing one still counts against the
// group's one connection ("连接数(…)超过设定值1"), and the producer is left
// with none ("无可用连接"). Each round the producer must have
// acknowledgements again after the re-read, and it must have used the
// broker's other form (an IPv4 host as [::ffff:a.b.c.d], a host name in
// the other case).
func TestJavaProducerOnViewKeepsItsBrokerOverRereads(t *testing.T) {
	cp := javaTestClasspath(t)
	for _, c := range []struct{ name, host, other string }{
		{"ipv4", "127.0.0.1", "meta://[::ffff:127.0.0.1]:"},
		{"hostname", "localhost", "meta://LOCALHOST:"},
	} {
		t.Run(c.name, func(t *testing.T) { javaProducerOverRereads(t, cp, c.host, c.other) })
	}
}

func javaProducerOverRereads(t *testing.T, cp, host, other string) {
	e := newEnv(t, "[topic=orders]\nnumPartitions=1\n")
	editINI(t, e, "hostName=127.0.0.1", "hostName="+host)
	b := e.start(t)
	url := b.Broker.URL()
	if !strings.HasPrefix(url, "meta://"+host+":") {
		t.Fatalf("the broker's url is %s, want host %s", url, host)
	}
	jv := newJavaView(t, e, 1, url)
	p := startJavaProducer(t, cp, e.zk, jv.root, "orders")

	const rounds = 60
	lost := 0
	begin := time.Now()
	for i := range rounds {
		at := jv.reread(url) // javaViewGone is held and dead: the producers re-read
		if err := waitAcksFor(t, p, 20, at, 30*time.Second); err != nil {
			lost++
			t.Errorf("round %d: the producer has no acknowledgements since the re-read: %v", i, err)
			break
		}
		jv.goneAndBack(url) // named again (not dead yet), then back
	}
	r := stopJavaProducer(t, p)
	// What a re-read costs the producer: each failed attempt and each send
	// that needed one, per re-read (deploy/README, "How data flows"), from
	// the first re-read on.
	attempts := len(r.answered) + len(r.unanswered)
	sends := r.failedSendCount(r.lastSeqBefore(begin))
	t.Logf("%d rounds, lost=%d; %d connections closed on ZooKeeper changes; %d failed attempts (%d answered by the broker) of %d sends: %.2f attempts and %.2f sends per connection closed",
		rounds, lost, r.closes, attempts, len(r.answered), sends, float64(attempts)/float64(max(1, r.closes)), float64(sends)/float64(max(1, r.closes)))
	reasons := map[string]int{}
	for _, f := range append(r.answered, r.unanswered...) {
		reasons[failReason(f)]++
	}
	t.Logf("failed attempts by reason: %v", reasons)
	// deploy/README: a re-read costs a synchronous producer the one send
	// it has in flight (tried again until its new connection is ready).
	if sends > r.closes {
		t.Errorf("%d sends failed over %d re-reads, want at most one a re-read", sends, r.closes)
	}
	// The view named the broker in its other form at the re-reads (registry.SiteView).
	if lost == 0 && !strings.Contains(p.stderrTail(1<<20), "Connected to "+other) {
		t.Errorf("the producer never connected to the view's other form of %s", url)
	}
	if lost > 0 {
		tail := p.stderrTail(4000)
		if i := strings.Index(tail, "超过设定值"); i >= 0 {
			t.Logf("gecko refused its own connection: ...%s", tail[max(0, i-200):min(len(tail), i+200)])
		}
	}
}
