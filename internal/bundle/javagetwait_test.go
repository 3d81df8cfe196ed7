package bundle

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// javaGot is one message the Java consumer printed, in the order printed.
type javaGot struct {
	payload   string
	partition int
	at        time.Time // when its line came
}

// gots is every "got" line of the consumer, in order.
func (d *javaDriver) gots() []javaGot {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []javaGot
	for i, l := range d.lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "got" {
			p, _ := strconv.Atoi(f[3])
			out = append(out, javaGot{payload: f[1], partition: p, at: d.at[i]})
		}
	}
	return out
}

// fetchFailures is the Java consumer's logged fetch failures and
// timeouts ("获取消息失败" is SimpleFetchManager's "fetch failed", which a
// get timeout, MetaOpeartionTimeoutException, also logs).
func (d *javaDriver) fetchFailures() []string {
	var bad []string
	for _, l := range strings.Split(d.stderrTail(1<<20), "\n") {
		if strings.Contains(l, "获取消息失败") || strings.Contains(strings.ToLower(l), "timeout") {
			bad = append(bad, l)
		}
	}
	return bad
}

// TestJavaClientGetWait runs the real MetaQ 1.4.6 Java consumer against a
// broker whose gets at the end of a partition wait ([limits] getWaitMs,
// 2 s, a fifth of the consumer's 10 s fetchTimeoutInMills) on a topic of 4
// partitions, more than the consumer's fetch threads (one per core), so
// that its threads spend most of their time in waiting gets: idle first
// (waits that end with 404), then under the Java producer, idle again,
// then a few puts to one partition while the others stay idle. The
// consumer must log no fetch failure or timeout, receive every message
// once and each partition's in order, and a put to an idle partition must
// reach it. It runs again with getWaitMs=0 for comparison and logs, for
// both, how long the puts to one partition took to reach the consumer:
// a waiting get holds one of the consumer's fetch threads, so the other
// partitions' fetches queue behind it (skips unless METAQ_JAVA_CLIENT and
// METAQ_TEST_ZK are set). The consumer backs off at most 100 ms after
// empty fetches (the driver's default), or what javaBackoffEnv says (5000
// is MetaQ's default), so the trade-off can be measured against both.
func TestJavaClientGetWait(t *testing.T) {
	cp := javaClasspath(t)
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	for _, getWait := range []time.Duration{2 * time.Second, 0} {
		t.Run("getWaitMs="+strconv.FormatInt(getWait.Milliseconds(), 10), func(t *testing.T) {
			javaGetWait(t, cp, zk, getWait)
		})
	}
}

// javaGetWait is TestJavaClientGetWait with getWaitMs set to getWait (0:
// every get at the end answered 404 at once, for comparison).
func javaGetWait(t *testing.T, cp, zk string, getWait time.Duration) {
	const topic, parts, idle = "gw", 4, 5 * time.Second
	root := uniqueRoot(t, zk)
	shared := sharedINI(zk, root, fmt.Sprintf("[topic=%s]\nnumPartitions=%d\n\n[limits]\ngetWaitMs=%d\n", topic, parts, getWait.Milliseconds()))
	site := startSite(t, filepath.Join(t.TempDir(), "bj"), shared, siteSpec{name: "bj", noNATS: true})
	if got := site.Broker.Config().Limits.GetWait; got != getWait {
		t.Fatalf("broker GetWait %v, want %v", got, getWait)
	}
	args := []string{zk, root, topic, javaGroup}
	backoff := "100 ms, the driver's default"
	if ms := os.Getenv(javaBackoffEnv); ms != "" {
		args = append(args, ms)
		backoff = ms + " ms"
	}
	cons := startJava(t, cp, "FailoverConsumer", args...)
	// Idle: every get waits its getWaitMs and is answered 404.
	time.Sleep(idle)
	prod := startJava(t, cp, "FailoverProducer", zk, root, topic)
	waitAcks(t, prod, 200, time.Time{})
	prod.stop()
	acks := prod.acks(t)
	payloads := map[string]javaAck{}
	for _, a := range acks {
		payloads[a.payload()] = a
	}
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if n := len(cons.gots()); n < len(acks) {
			return fmt.Errorf("the Java consumer has %d of %d messages", n, len(acks))
		}
		return nil
	})
	// Idle again, then puts to partition 0 alone while the other three
	// partitions' gets wait.
	time.Sleep(idle)
	addr := addrString(site.Broker)
	var putAt []time.Time
	for i := range 5 {
		putAt = append(putAt, time.Now())
		putN(t, addr, topic, 0, 1, "late"+strconv.Itoa(i))
		time.Sleep(300 * time.Millisecond)
	}
	var late map[string]time.Time
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		late = map[string]time.Time{}
		for _, g := range cons.gots() {
			if strings.HasPrefix(g.payload, "late") {
				late[g.payload] = g.at
			}
		}
		if len(late) < len(putAt) {
			return fmt.Errorf("the Java consumer has %d of the %d late messages", len(late), len(putAt))
		}
		return nil
	})
	var lat []time.Duration
	for i, at := range putAt {
		lat = append(lat, late["late"+strconv.Itoa(i)+"-0"].Sub(at).Round(time.Millisecond))
	}
	t.Logf("getWaitMs=%d: put to delivery of a put to one partition while %d others are idle: %v (the consumer backs off at most %s)", getWait.Milliseconds(), parts-1, lat, backoff)

	// Every message once, and each partition's in the order of its offsets.
	seen := map[string]int{}
	last := map[int]int64{}
	for _, g := range cons.gots() {
		seen[g.payload]++
		if seen[g.payload] > 1 {
			t.Errorf("%s delivered %d times", g.payload, seen[g.payload])
		}
		a, ok := payloads[g.payload]
		if !ok {
			continue // a late one
		}
		if a.partition != g.partition {
			t.Errorf("%s from partition %d, stored in %d", g.payload, g.partition, a.partition)
		}
		if off, ok := last[a.partition]; ok && a.offset <= off {
			t.Errorf("%s (partition %d offset %d) delivered after offset %d", g.payload, a.partition, a.offset, off)
		}
		last[a.partition] = a.offset
	}
	for _, a := range acks {
		if seen[a.payload()] == 0 {
			t.Errorf("%s (partition %d offset %d) never delivered", a.payload(), a.partition, a.offset)
		}
	}
	used := map[int]bool{}
	for _, a := range acks {
		used[a.partition] = true
	}
	t.Logf("%d messages over partitions %v", len(acks), slices.Sorted(maps.Keys(used)))
	if bad := cons.fetchFailures(); len(bad) > 0 {
		t.Errorf("the Java consumer logged %d fetch failures or timeouts, first: %s", len(bad), bad[0])
	}
}
