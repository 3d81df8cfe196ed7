package bundle

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestJavaProducerOnViewKeepsEveryBrokerOverRereads: topic orders on broker
// ids 0 (one partition) and 1 (two), MetaQ 1.4.6's Java producer on a site
// view root. Each round a url the view once named for id 0 is dead, so the
// view wakes the producer, which closes and reopens its connection to both
// ids, id 1's too although its entry did not move. Were id 1's entry the
// string the producer held, gecko could refuse the reopened connection
// ("连接数(…)超过设定值1") and the producer would never send to id 1 again.
// Each round the producer must have acknowledgements from id 1 (its
// partition 1, which id 0 has not) after the re-read.
func TestJavaProducerOnViewKeepsEveryBrokerOverRereads(t *testing.T) {
	cp := javaTestClasspath(t)
	e0 := newEnv(t, "[topic=orders]\nnumPartitions=1\n")
	e1 := newEnv(t, "[topic=orders]\nnumPartitions=2\n")
	e1.root = e0.root
	e1.writeINI(t, "[topic=orders]\nnumPartitions=2\n")
	editINI(t, e1, "brokerId=0", "brokerId=1")
	url := e0.start(t).Broker.URL()
	e1.start(t)

	jv := newJavaView(t, e0, 2, url)
	p := startJavaProducer(t, cp, e0.zk, jv.root, "orders")

	// id1Acks waits for n acknowledgements on partition 1 (id 1's) since at.
	id1Acks := func(n int, at time.Time) bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			got := 0
			for _, a := range p.acks(t) {
				if a.partition == 1 && !a.at.Before(at) {
					got++
				}
			}
			if got >= n {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	const rounds = 30
	lost := 0
	for i := range rounds {
		at := jv.reread(url) // javaViewGone is held and dead: the producer re-reads both ids
		// The next move must not overtake the producer's re-read (it
		// would read the entries of a later apply).
		if err := waitRereads(p, i+1); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if !id1Acks(5, at) {
			lost++
			t.Errorf("round %d: the producer has no acknowledgement from broker id 1 since the re-read", i)
			break
		}
		jv.goneAndBack(url)
	}
	r := stopJavaProducer(t, p)
	log := p.stderrTail(1 << 20)
	rereads, reopened := sameURLReopens(log)
	t.Logf("%d rounds, lost=%d; %d re-reads, %d connections closed on ZooKeeper changes; %d failed attempts; %d gecko refusals; %d urls closed and reopened as the same string in one re-read",
		rounds, lost, rereads, r.closes, len(r.answered)+len(r.unanswered), strings.Count(log, "超过设定值"), len(reopened))
	// Whether gecko refuses a reopened url depends on timing (1 of 9 in a
	// deployment's trial); that the view never asks for one does not.
	if len(reopened) > 0 {
		t.Errorf("%d re-reads closed and reopened the same url (gecko can refuse it), the first %s", len(reopened), reopened[0])
	}
	if rereads < rounds {
		t.Errorf("the producer read the brokers again %d times, want at least %d", rereads, rounds)
	}
	if lost > 0 {
		if i := strings.Index(log, "超过设定值"); i >= 0 {
			t.Logf("gecko refused a connection: ...%s", log[max(0, i-200):min(len(log), i+200)])
		}
	}
}

// waitRereads waits until p's ProducerZooKeeper has finished n re-reads
// after its first read of the brokers.
func waitRereads(p *javaDriver, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(p.errLog)
		got := strings.Count(string(b), "End receiving broker changes") - 1
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the producer finished %d re-reads of the brokers, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameURLReopens reads MetaQ 1.4.6's ProducerZooKeeper log: between "Begin
// receiving broker changes" and "End receiving broker changes" it logs
// "Closed URL" for every url it held and "Connected to URL" for every url it
// read. It returns how many re-reads (after the first read) it saw and, for
// each, a url both closed and connected to in it.
func sameURLReopens(log string) (rereads int, reopened []string) {
	first := true
	var closed map[string]bool
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(l, "Begin receiving broker changes"):
			closed = map[string]bool{}
		case closed == nil:
		case strings.Contains(l, "ProducerZooKeeper - Closed "):
			closed[l[strings.Index(l, "Closed ")+len("Closed "):]] = true
		case strings.Contains(l, "ProducerZooKeeper - Connected to "):
			if url := l[strings.Index(l, "Connected to ")+len("Connected to "):]; closed[url] {
				reopened = append(reopened, url)
			}
		case strings.Contains(l, "End receiving broker changes"):
			if !first {
				rereads++
			}
			first, closed = false, nil
		}
	}
	return rereads, reopened
}
