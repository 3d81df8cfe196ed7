package bundle

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// javaTestClasspath is javaClasspath for a test that runs MetaQ 1.4.6's
// Java client against bundles: it skips without the client and in -short
// mode, before the test builds anything.
func javaTestClasspath(t *testing.T) string {
	t.Helper()
	cp := javaClasspath(t)
	if testing.Short() {
		t.Skip("Java client test skipped in -short mode")
	}
	return cp
}

// javaProducerRun is what one synchronous Java producer (FailoverProducer)
// saw, collected once it stopped.
type javaProducerRun struct {
	acks                 []javaAck
	answered, unanswered []string // failed sends (javaDriver.failedSends)
	closes               int      // connections dropped on ZooKeeper changes
}

// startJavaProducer starts FailoverProducer on topic, finding the brokers
// under root in the ZooKeeper at zk, and waits for its first 20
// acknowledgements: the producer is connected and sending.
func startJavaProducer(t *testing.T, cp, zk, root, topic string) *javaDriver {
	t.Helper()
	p := startJava(t, cp, "FailoverProducer", zk, root, topic)
	waitAcks(t, p, 20, time.Time{})
	return p
}

// stopJavaProducer stops p and returns what it saw.
func stopJavaProducer(t *testing.T, p *javaDriver) javaProducerRun {
	t.Helper()
	p.stop()
	r := javaProducerRun{acks: p.acks(t)}
	r.answered, r.unanswered, r.closes = p.failedSends()
	return r
}

// acksSince counts the acknowledgements p had at or after since.
func acksSince(t testing.TB, p *javaDriver, since time.Time) int {
	t.Helper()
	got := 0
	for _, a := range p.acks(t) {
		if !a.at.Before(since) {
			got++
		}
	}
	return got
}

// waitAcksFor is waitAcks returning an error after timeout, for a caller
// that counts rounds without acknowledgements instead of failing at once.
func waitAcksFor(t testing.TB, p *javaDriver, n int, since time.Time, timeout time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := acksSince(t, p, since)
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d acknowledgements since %s", got, n, since.Format("15:04:05.000"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failedSendCount is how many distinct sends after send number from had a
// failed attempt ("fail SEQ attempt N: ..."): FailoverProducer sends a
// failed one again 100 ms later, so one send can count several attempts.
func (r javaProducerRun) failedSendCount(from int64) int {
	seqs := map[int64]bool{}
	for _, l := range append(r.answered, r.unanswered...) {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if seq, err := strconv.ParseInt(f[1], 10, 64); err == nil && seq > from {
			seqs[seq] = true
		}
	}
	return len(seqs)
}

// lastSeqBefore is the number of the last send acknowledged before t (0:
// none).
func (r javaProducerRun) lastSeqBefore(t time.Time) int64 {
	var seq int64
	for _, a := range r.acks {
		if a.at.Before(t) {
			seq = max(seq, a.seq)
		}
	}
	return seq
}
