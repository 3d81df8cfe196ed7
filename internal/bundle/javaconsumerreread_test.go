package bundle

import (
	"context"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestJavaConsumerKeepsItsBrokerOverRebalances: does gecko's same-url
// reconnect race (javaviewreread_test.go: a producer that closes its
// connection and opens one to the same url can be left with none) hit
// MetaQ 1.4.6's Java consumer? Its ConsumerZooKeeper rebalances on every
// change of its group's consumers (consumers/<group>/ids) or of a topic's
// children under topics-sub; a rebalance that changes its topics' owners
// or partitions closes its connections to the brokers it fetched from
// (closeOldBrokersConnections) and opens them again, to the same urls when
// the brokers did not move. Here a second member of the group joins and
// leaves, sorted after the real consumer, so the real one keeps the one
// partition and reopens the same url twice a round. Each round the
// consumer must fetch again what the producer sends after the round.
//
// The consumer does not depend on winning the race: SimpleMessageConsumer
// checks before every fetch that it is connected to the broker and, when
// not, connects again (while the broker is in its oldBrokerSet); a producer
// has no such check, so one left without a connection stays so.
func TestJavaConsumerKeepsItsBrokerOverRebalances(t *testing.T) {
	cp := javaTestClasspath(t)
	e := newEnv(t, "[topic=orders]\nnumPartitions=1\n")
	e.start(t)
	zc := zkClient(t, e)
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if kids, err := zc.Children(t.Context(), e.root+"/brokers/topics-sub/orders"); err != nil || len(kids) == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	cons := startJava(t, cp, "FailoverConsumer", e.zk, e.root, "orders", javaGroup)
	p := startJavaProducer(t, cp, e.zk, e.root, "orders")

	// A member that sorts after every consumer id the client makes (its
	// group name, a host name and a UUID): '~' is above letters and digits.
	fake := e.root + "/consumers/" + javaGroup + "/ids/~" + javaGroup + "-other"
	const rounds = 20
	stuck := 0
	for i := range rounds {
		n := rebalances(cons)
		if err := zc.CreateEphemeral(t.Context(), fake, []byte("orders")); err != nil {
			t.Fatalf("round %d: join the group: %v", i, err)
		}
		waitRebalanced(t, cons, n)
		n = rebalances(cons)
		if err := zc.Delete(t.Context(), fake); err != nil {
			t.Fatalf("round %d: leave the group: %v", i, err)
		}
		waitRebalanced(t, cons, n)
		at := time.Now()
		if err := waitGotFor(cons, 10, at, 30*time.Second); err != nil {
			stuck++
			t.Errorf("round %d: the consumer fetches nothing since its rebalances: %v", i, err)
			break
		}
	}
	r := stopJavaProducer(t, p)
	log := cons.stderrTail(1 << 20)
	t.Logf("%d rounds (two rebalances each), stuck=%d; the consumer closed its connection %d times and connected %d times, gecko refused its own connection %d times, %d fetches failed; the producer had %d sends acknowledged",
		rounds, stuck, strings.Count(log, "Closed meta://"), strings.Count(log, "Connected to "), strings.Count(log, "超过设定值"), len(cons.fetchFailures()), len(r.acks))
}

// rebalances counts the consumer's successful rebalances so far.
func rebalances(cons *javaDriver) int {
	return strings.Count(cons.stderrTail(1<<20), "rebalance success.")
}

// waitRebalanced waits until the consumer logged more than n successful
// rebalances.
func waitRebalanced(t *testing.T, cons *javaDriver, n int) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		if rebalances(cons) <= n {
			return context.DeadlineExceeded
		}
		return nil
	})
}

// waitGotFor waits until the consumer printed n messages at or after
// since, or returns an error after timeout.
func waitGotFor(cons *javaDriver, n int, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got := 0
		for _, g := range cons.gots() {
			if !g.at.Before(since) {
				got++
			}
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		time.Sleep(50 * time.Millisecond)
	}
}
