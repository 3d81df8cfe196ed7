package bundle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// These tests run the real, unmodified MetaQ 1.4.6 Java client (built from
// its source by cmd/metaq-bench/metaq-java/build.sh, with the small driver
// in cmd/metaq-bench/metaq-java/driver) against three site bundles through a
// switchover and an unplanned failover. They skip unless javaClientEnv names
// the built lib directory and METAQ_TEST_ZK a ZooKeeper:
//
//	cmd/metaq-bench/metaq-java/build.sh /work/bench/java   (METAQ_REPO etc. as it says)
//	METAQ_JAVA_CLIENT=/work/bench/java/lib METAQ_TEST_ZK=127.0.0.1:2181 \
//	    go test -race -run TestJavaClient -v ./internal/bundle/
const javaClientEnv = "METAQ_JAVA_CLIENT"

// javaDebugEnv, set, logs the drivers' whole stderr (the client's warnings:
// its rebalances and fetch failures) even when the test passes.
const javaDebugEnv = "METAQ_JAVA_DEBUG"

// javaBackoffEnv, set, is the Java consumer's back-off after empty fetches
// in TestJavaClientGetWait, in ms (FailoverConsumer's MAX_DELAY_FETCH_MS;
// 5000 is MetaQ's default); unset, the driver's 100 ms.
const javaBackoffEnv = "METAQ_JAVA_MAX_DELAY_FETCH_MS"

// javaGroup is the Java consumer's group.
const javaGroup = "java-failover"

// javaClasspath is the Java client's and driver's classpath, or skips.
func javaClasspath(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(javaClientEnv)
	if dir == "" {
		t.Skipf("%s is not set: build the MetaQ 1.4.6 Java client with cmd/metaq-bench/metaq-java/build.sh OUTDIR and set %s=OUTDIR/lib", javaClientEnv, javaClientEnv)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skipf("%s is set but java is not on PATH", javaClientEnv)
	}
	b, err := os.ReadFile(filepath.Join(dir, "client-classpath.txt"))
	if err != nil {
		t.Fatalf("%s=%s: %v (build.sh writes client-classpath.txt there)", javaClientEnv, dir, err)
	}
	return strings.TrimSpace(string(b))
}

// javaDriver is one running driver JVM (FailoverProducer or
// FailoverConsumer). Closing its stdin stops it.
type javaDriver struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	errLog string // its stderr, in a file

	mu    sync.Mutex
	lines []string    // stdout, line by line
	at    []time.Time // when each line of lines came

	ready  chan struct{} // it printed "ready"
	exited chan struct{} // it exited (stdout read to its end first)
}

// startJava starts class of the driver and waits until it is ready (the
// client connected to ZooKeeper and, for a consumer, subscribed).
func startJava(t testing.TB, cp, class string, args ...string) *javaDriver {
	t.Helper()
	d := &javaDriver{name: class, errLog: filepath.Join(t.TempDir(), class+".stderr"),
		ready: make(chan struct{}), exited: make(chan struct{})}
	errf, err := os.Create(d.errLog)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command("java", append([]string{"-Xmx256m", "-cp", cp, "failover." + class}, args...)...)
	d.cmd.Stderr = errf
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", class, err)
	}
	go func() {
		defer close(d.exited)
		defer errf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(d.ready)
			}
			d.mu.Lock()
			d.lines = append(d.lines, line)
			d.at = append(d.at, time.Now())
			d.mu.Unlock()
		}
		d.cmd.Wait()
	}()
	t.Cleanup(func() {
		d.stop()
		switch {
		case os.Getenv(javaDebugEnv) != "":
			t.Logf("%s stderr:\n%s", class, d.stderrTail(math.MaxInt))
		case t.Failed():
			t.Logf("%s stderr (last lines):\n%s", class, d.stderrTail(60))
		}
	})
	select {
	case <-d.ready:
	case <-d.exited:
		t.Fatalf("%s exited before it was ready:\n%s", class, d.stderrTail(40))
	case <-time.After(90 * time.Second):
		t.Fatalf("%s not ready after 90s:\n%s", class, d.stderrTail(40))
	}
	return d
}

// stop closes the driver's stdin and waits for it to exit, killing it
// (this process started it) if it does not within a minute.
func (d *javaDriver) stop() {
	d.stdin.Close()
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

func (d *javaDriver) stderrTail(n int) string {
	b, _ := os.ReadFile(d.errLog)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// failedAttempts counts the producer's "fail" lines (one a failed send).
func (d *javaDriver) failedAttempts() int {
	b, _ := os.ReadFile(d.errLog)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "fail ") {
			n++
		}
	}
	return n
}

// failedSends sorts the producer's failed attempts: those a broker
// answered (a refusal or an error: "Put message to [broker ...] failed"),
// and the others, which the client failed itself. closes counts the
// times the client closed its connection to a broker on a ZooKeeper change
// ("Closed meta://..."): MetaQ 1.4.6's producer does so on every change of
// a topic's entries under topics-pub, failing the put it has in flight
// there without an answer.
func (d *javaDriver) failedSends() (answered, unanswered []string, closes int) {
	b, _ := os.ReadFile(d.errLog)
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "fail ") && strings.Contains(l, "Put message to [broker"):
			answered = append(answered, l)
		case strings.HasPrefix(l, "fail "):
			unanswered = append(unanswered, l)
		case strings.Contains(l, "ProducerZooKeeper - Closed meta://"):
			closes++
		}
	}
	return answered, unanswered, closes
}

// javaAck is one send the Java producer had acknowledged.
type javaAck struct {
	seq       int64
	id        int64
	partition int
	offset    int64
	attempts  int
	at        time.Time
}

// payload is what FailoverProducer sends as message seq (records of
// different lengths, so that an offset inside a record shows).
func (a javaAck) payload() string {
	return "java-" + strconv.FormatInt(a.seq, 10) + strings.Repeat(".", int(a.seq%13))
}

// acks parses the producer's "ack SEQ MSGID PARTITION OFFSET ATTEMPTS MILLIS".
func (d *javaDriver) acks(t testing.TB) []javaAck {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []javaAck
	for _, l := range d.lines {
		f := strings.Fields(l)
		if len(f) != 7 || f[0] != "ack" {
			continue
		}
		var n [6]int64
		for i := range n {
			v, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				t.Fatalf("producer line %q: %v", l, err)
			}
			n[i] = v
		}
		out = append(out, javaAck{seq: n[0], id: n[1], partition: int(n[2]), offset: n[3], attempts: int(n[4]), at: time.UnixMilli(n[5])})
	}
	return out
}

// received is what the consumer printed: payload -> partition.
func (d *javaDriver) received() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := map[string]int{}
	for _, l := range d.lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "got" {
			p, _ := strconv.Atoi(f[3])
			got[f[1]] = p
		}
	}
	return got
}

// javaSites is the deployment of these tests: bj master, hf and gz slave
// sites replicating over 30 ms proxies, gossip between them, every bundle
// registered in one ZooKeeper under zkRoot, where the Java clients find
// them.
type javaSites struct {
	root, zk, zkRoot, shared, topic string
	bj, hf, gz                      *Bundle
	bjProc                          *exec.Cmd // bj when it runs in a child process (killedmaster_test.go)
	slaveIDs                        map[*Bundle]int
}

// newJavaSites starts the deployment with topic (two partitions, its
// section holding topicKeys) and replication added to [replication].
func newJavaSites(t *testing.T, topic, topicKeys, replication string) *javaSites {
	t.Helper()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	s := &javaSites{root: t.TempDir(), zk: zk, zkRoot: multiSiteRoot(t, []string{zk}), topic: topic}
	// No configsync: its NATS server would live in bj, which one test kills.
	s.shared = sharedINI(zk, s.zkRoot, fmt.Sprintf("[topic=%s]\nnumPartitions=2\n%s", topic, topicKeys), noConfigSync)
	s.shared = strings.Replace(s.shared, "[replication]\n", "[replication]\n"+replication, 1)
	s.bj = startSite(t, filepath.Join(s.root, "bj"), s.shared, siteSpec{name: "bj", noNATS: true})
	seed := []string{mustComp[*topologyComponent](t, s.bj).Topology().Addr()}
	ship := mustComp[*shipperComponent](t, s.bj)
	toHF, toGZ := wanProxy(t, ship.Addr()), wanProxy(t, ship.Addr())
	s.hf = startSite(t, filepath.Join(s.root, "hf"), s.shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), join: seed, noNATS: true})
	s.gz = startSite(t, filepath.Join(s.root, "gz"), s.shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), join: seed, noNATS: true})
	s.slaveIDs = map[*Bundle]int{s.hf: 1, s.gz: 2}
	s.waitSlavesConnected(t)
	return s
}

// startClients starts the Java consumer, then the Java producer, and waits
// until the producer has n acknowledgements.
func (s *javaSites) startClients(t *testing.T, n int) (prod, cons *javaDriver) {
	t.Helper()
	cp := javaClasspath(t)
	cons = startJava(t, cp, "FailoverConsumer", s.zk, s.zkRoot, s.topic, javaGroup)
	prod = startJava(t, cp, "FailoverProducer", s.zk, s.zkRoot, s.topic)
	waitAcks(t, prod, n, time.Time{})
	return prod, cons
}

// waitAcks waits until the producer has n acknowledgements after since.
func waitAcks(t testing.TB, prod *javaDriver, n int, since time.Time) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, 50*time.Millisecond, func() error {
		if got := acksSince(t, prod, since); got < n {
			return fmt.Errorf("the Java producer has %d of %d acknowledgements since %s", got, n, since.Format("15:04:05.000"))
		}
		return nil
	})
}

// recordAt decodes the record at offset of topic-partition in b.
func recordAt(b *Bundle, topic string, partition int, offset int64) (store.Record, error) {
	data, err := b.Store.Read(topic, partition, offset, 1<<16)
	if err != nil {
		return store.Record{}, err
	}
	r, _, err := store.DecodeRecord(data)
	return r, err
}

// checkAcked returns the acknowledged sends whose record is not at b at
// the partition and offset the producer was told, with the same id and
// payload.
func checkAcked(b *Bundle, topic string, acks []javaAck) []javaAck {
	var missing []javaAck
	for _, a := range acks {
		r, err := recordAt(b, topic, a.partition, a.offset)
		if err != nil || r.ID != a.id || string(r.Body) != a.payload() {
			missing = append(missing, a)
		}
	}
	return missing
}

// stall is the producer's view of the change of master at from: how long
// after it the first acknowledgement of a record the new master stored
// (beyond its partition ends at the promotion, and there) came, and the
// longest gap between two acknowledgements.
func stall(t testing.TB, newMaster *Bundle, topic string, acks []javaAck, from time.Time) (firstAtNew, maxGap time.Duration) {
	t.Helper()
	id, err := newMaster.identity()
	if err != nil {
		t.Fatal(err)
	}
	ends := id.Get().Ends
	for i, a := range acks {
		if i > 0 {
			maxGap = max(maxGap, a.at.Sub(acks[i-1].at))
		}
		end, ok := ends[fmt.Sprintf("%s-%d", topic, a.partition)]
		if firstAtNew == 0 && ok && a.offset >= end && len(checkAcked(newMaster, topic, []javaAck{a})) == 0 {
			firstAtNew = a.at.Sub(from)
		}
	}
	return firstAtNew, maxGap
}

// consumed waits up to within until the Java consumer received every
// payload in want and committed (it commits every second) offsets at or past
// the end of the last acknowledged record of each partition, stops it, and
// checks the offsets it committed to ZooKeeper: each must be there, and a
// record boundary of master's partition. It returns what is wrong, nothing
// when all is well.
//
// The wait for the commit matters: when a broker's node disappears while
// the client lists and reads them, the client's rebalance fails with
// NoNode, and until its retry (zkSyncTimeMs later, 5 s) it keeps fetching
// but commits nothing.
func (s *javaSites) consumed(t *testing.T, cons *javaDriver, master *Bundle, want []javaAck, within time.Duration) []string {
	t.Helper()
	var problems []string
	ackedEnd := map[int]int64{}
	for _, a := range want {
		ackedEnd[a.partition] = max(ackedEnd[a.partition], a.offset+int64(store.RecordHeaderLen+len(a.payload())))
	}
	zc := zkClient(t, &testEnv{zk: s.zk, root: s.zkRoot})
	committed := func(p int) (string, int64, error) {
		path := zc.Paths().ConsumerOffsets(javaGroup, s.topic) + "/0-" + strconv.Itoa(p)
		data, _, err := zc.Get(context.Background(), path)
		if err != nil {
			return "", 0, fmt.Errorf("the Java consumer's offset %s: %w", path, err)
		}
		_, offStr, _ := strings.Cut(string(data), "-")
		off, err := strconv.ParseInt(offStr, 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("the Java consumer's offset %s = %q: %w", path, data, err)
		}
		return string(data), off, nil
	}
	pending := func() string {
		got := cons.received()
		for _, a := range want {
			if _, ok := got[a.payload()]; !ok {
				return fmt.Sprintf("the Java consumer did not receive %s at partition %d offset %d (it has %d messages)", a.payload(), a.partition, a.offset, len(got))
			}
		}
		for p := range 2 {
			if _, off, err := committed(p); err != nil || off < ackedEnd[p] {
				return fmt.Sprintf("partition %d: the Java consumer committed %d (%v), before the end %d of the last acknowledged record", p, off, err, ackedEnd[p])
			}
		}
		return ""
	}
	start := time.Now()
	for pending() != "" && time.Since(start) < within {
		time.Sleep(100 * time.Millisecond)
	}
	if p := pending(); p != "" {
		problems = append(problems, p)
	}
	t.Logf("the Java consumer received and committed everything due %s after the producer stopped", time.Since(start).Round(time.Millisecond))
	cons.stop()
	for p := range 2 {
		data, off, err := committed(p)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if err := wantRecordBoundary(master, s.topic, p, off); err != nil {
			problems = append(problems, fmt.Sprintf("partition %d: the Java consumer's committed offset: %v", p, err))
		}
		t.Logf("partition %d: the Java consumer committed %s", p, data)
	}
	return problems
}

// wantConsumed fails the test unless consumed finds all well.
func (s *javaSites) wantConsumed(t *testing.T, cons *javaDriver, master *Bundle, want []javaAck) {
	t.Helper()
	for _, p := range s.consumed(t, cons, master, want, 90*time.Second) {
		t.Error(p)
	}
}

// wantRecordBoundary checks that offset is the start of a record of
// topic-partition at b, or its end.
func wantRecordBoundary(b *Bundle, topic string, partition int, offset int64) error {
	pi, err := b.Store.Partition(topic, partition)
	if err != nil {
		return err
	}
	if offset > pi.Max || offset < pi.Min {
		return fmt.Errorf("%d is outside the partition's %d..%d", offset, pi.Min, pi.Max)
	}
	if offset == pi.Min {
		return nil
	}
	data, err := b.Store.Read(topic, partition, pi.Min, int(pi.Max-pi.Min))
	if err != nil {
		return err
	}
	for pos := pi.Min; pos < offset; {
		_, n, err := store.DecodeRecord(data[pos-pi.Min:])
		if err != nil {
			return fmt.Errorf("at %d: %w", pos, err)
		}
		pos += int64(n)
		if pos > offset {
			return fmt.Errorf("%d is inside the record that ends at %d", offset, pos)
		}
	}
	return nil
}

// TestJavaClientSyncTopicSwitchover: the real MetaQ 1.4.6 Java producer
// sends to a topic with minSyncSites=1 throughout `switchover -to hf`, and a
// Java group consumer reads it throughout. Every send it had acknowledged
// is at hf afterwards at the partition and offset it was told (and at bj
// and gz, which follow hf byte for byte); the producer moved to hf and the
// consumer went on from valid offsets, neither restarted. No broker
// answered a send with a failure: bj held what reached it while it handed
// over and passed it on to hf, and hf let puts wait for its slave sites.
//
// The children of topics-pub/<topic> change once (hf's <id>-m replacing
// bj's in one step), so the producer drops a connection once: bj's, as it
// moves to hf. MetaQ 1.4.6's producer closes its connection to the master
// it knows on every change of those children before it connects to the
// new one (ProducerZooKeeper.BrokerConnectionListener), and gecko fails
// the put in flight on a closed connection without an answer
// (DefaultConnection.dispose: "等待响应超时"). A synchronous producer
// always has one put in flight at bj until it moves, so that one put may
// fail, at that close; no other send may.
func TestJavaClientSyncTopicSwitchover(t *testing.T) {
	javaClasspath(t)
	s := newJavaSites(t, "jsync", "minSyncSites=1\n", "")
	prod, cons := s.startClients(t, 30)
	zc := zkClient(t, &testEnv{zk: s.zk, root: s.zkRoot})
	pubChanges := func() int32 {
		t.Helper()
		_, st, err := zc.Get(context.Background(), zc.Paths().TopicsPub()+"/"+s.topic)
		if err != nil {
			t.Fatal(err)
		}
		return st.Cversion
	}
	pubBefore := pubChanges()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	event := time.Now()
	rep, err := s.bj.Switchover(ctx, "hf", "")
	if err != nil {
		t.Fatal(err)
	}
	waitAcks(t, prod, 30, time.Now())
	prod.stop()
	acks := prod.acks(t)
	if missing := checkAcked(s.hf, s.topic, acks); len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged sends are not at hf where the producer was told, the first %+v", len(missing), len(acks), missing[0])
	}
	wantFollowsByteIdentical(t, s.hf, s.bj, s.topic)
	wantFollowsByteIdentical(t, s.hf, s.gz, s.topic)
	firstAtNew, maxGap := stall(t, s.hf, s.topic, acks, event)
	answered, unanswered, closes := prod.failedSends()
	t.Logf("switchover: %d sends acknowledged, %d failed attempts retried (%d answered by a broker, %d failed by the client when it closed its connection on %d ZooKeeper changes); writes stopped at bj for %s; first acknowledgement by hf %s after the command; longest gap between two %s",
		len(acks), prod.failedAttempts(), len(answered), len(unanswered), closes, rep.WritesStopped, firstAtNew, maxGap)
	if n := pubChanges() - pubBefore; n != 2 {
		t.Errorf("topics-pub/%s children were created or deleted %d times during the switchover, want 2 (hf's <id>-m replacing bj's in one step)", s.topic, n)
	}
	if closes != 1 {
		t.Errorf("the producer closed a connection on %d ZooKeeper changes, want 1 (moving to hf)", closes)
	}
	if len(answered) > 0 {
		t.Errorf("%d sends were answered with a failure during the switchover, the first: %s", len(answered), answered[0])
	}
	for _, f := range unanswered {
		if len(unanswered) > 1 || !strings.Contains(f, "等待响应超时") {
			t.Errorf("%d sends failed without an answer, want at most the one in flight at bj when the producer closed its connection to move: %v", len(unanswered), unanswered)
			break
		}
	}
	s.wantConsumed(t, cons, s.hf, acks)
}

// TestJavaClientSyncTopicFailover: as TestJavaClientSyncTopicSwitchover,
// but bj is lost without a hand-over (its bundle closed under load); the
// most caught-up slave site is promoted (`promote`, as an operator reading
// the slave sites' positions or autoFailover would choose). No send the
// Java producer had acknowledged is lost; when bj returns, restarted as a
// slave of the new master, it cuts what it held beyond the promotion and
// follows byte for byte.
func TestJavaClientSyncTopicFailover(t *testing.T) {
	javaClasspath(t)
	s := newJavaSites(t, "jsync", "minSyncSites=1\n", "")
	s.syncFailover(t, s.loseMaster)
}

// TestJavaClientSyncTopicAutoFailover: as TestJavaClientSyncTopicFailover,
// with [replication] autoFailover=true: nobody runs promote, the most
// caught-up slave site promotes itself once gossip and ZooKeeper agree bj
// is lost.
func TestJavaClientSyncTopicAutoFailover(t *testing.T) {
	javaClasspath(t)
	s := newJavaSites(t, "jsync", "minSyncSites=1\n", "autoFailover=true\nautoFailoverAfterMs=500\n")
	s.syncFailover(t, s.loseMasterAuto)
}

// syncFailover runs the Java clients through the loss of bj (lose returns
// the new master and when bj was lost) and checks that nothing they had
// acknowledged was lost, that the consumer went on, and that the other
// sites, bj restarted too, follow the new master byte for byte.
func (s *javaSites) syncFailover(t *testing.T, lose func(*testing.T) (*Bundle, time.Time)) {
	t.Helper()
	prod, cons := s.startClients(t, 30)
	newMaster, event := lose(t)
	waitAcks(t, prod, 30, time.Now())
	prod.stop()
	acks := prod.acks(t)
	if missing := checkAcked(newMaster, s.topic, acks); len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged sends are not at the new master where the producer was told, the first %+v", len(missing), len(acks), missing[0])
	}
	firstAtNew, maxGap := stall(t, newMaster, s.topic, acks, event)
	t.Logf("failover: %d sends acknowledged, %d failed attempts retried; first acknowledgement by the new master %s after bj was lost; longest gap between two %s",
		len(acks), prod.failedAttempts(), firstAtNew, maxGap)
	s.wantConsumed(t, cons, newMaster, acks)
	old := s.restartOldMaster(t, newMaster)
	for _, b := range []*Bundle{s.hf, s.gz, old} {
		if b != newMaster {
			wantFollowsByteIdentical(t, newMaster, b, s.topic)
		}
	}
}

// TestJavaClientAsyncTopicFailover runs the failover of
// TestJavaClientSyncTopicFailover with an ordinary asynchronous topic and
// reports (it does not assert) how many acknowledged sends the failover
// lost, and whether each of them is in the records the returning bj saved
// aside. It asserts that the Java consumer, which polls often and so has
// read most of the lost records at bj, receives every send the new master
// holds (it is moved back to the promotion ends: broker/divergence.go) and
// commits valid offsets.
func TestJavaClientAsyncTopicFailover(t *testing.T) {
	javaClasspath(t)
	s := newJavaSites(t, "jasync", "", "")
	prod, cons := s.startClients(t, 200)
	newMaster, event := s.loseMaster(t)
	waitAcks(t, prod, 100, time.Now())
	prod.stop()
	acks := prod.acks(t)
	lost := checkAcked(newMaster, s.topic, acks)
	firstAtNew, maxGap := stall(t, newMaster, s.topic, acks, event)
	t.Logf("failover: %d sends acknowledged, %d of them not at the new master; %d failed attempts retried; first acknowledgement by the new master %s after bj was lost; longest gap between two %s",
		len(acks), len(lost), prod.failedAttempts(), firstAtNew, maxGap)

	old := s.restartOldMaster(t, newMaster)
	for _, b := range []*Bundle{s.hf, s.gz, old} {
		if b != newMaster {
			wantFollowsByteIdentical(t, newMaster, b, s.topic)
		}
	}
	dir := filepath.Join(s.root, "bj", "data", "replication", "unreplicated")
	tails, err := georeplicator.ListTails(dir)
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]bool{}
	for _, f := range tails {
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			r, n, err := store.DecodeRecord(data)
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			saved[string(r.Body)] = true
			data = data[n:]
		}
	}
	notSaved := 0
	for _, a := range lost {
		if !saved[a.payload()] {
			notSaved++
		}
	}
	t.Logf("bj saved %d records aside in %d files; %d of the %d lost acknowledged sends are among them", len(saved), len(tails), len(lost)-notSaved, len(lost))

	// The consumer goes on at the new master; what it read at bj that was
	// lost is not there, so the sends the new master holds are due.
	kept := map[int64]bool{}
	for _, a := range lost {
		kept[a.seq] = true
	}
	var due []javaAck
	for _, a := range acks {
		if !kept[a.seq] {
			due = append(due, a)
		}
	}
	s.wantConsumed(t, cons, newMaster, due)
	got := cons.received()
	readLost := 0
	for _, a := range lost {
		if _, ok := got[a.payload()]; ok {
			readLost++
		}
	}
	t.Logf("the Java consumer had read %d of the %d lost sends at bj before it was lost", readLost, len(lost))
}

// loseMaster closes bj without a hand-over (its ZooKeeper session ends with
// it) and promotes the slave site that holds more of its log. It returns
// the new master and when bj was lost.
func (s *javaSites) loseMaster(t *testing.T) (*Bundle, time.Time) {
	t.Helper()
	event := time.Now()
	s.bj.Close()
	return s.promoteMostCaughtUp(t, event), event
}

// promoteMostCaughtUp waits until both slave sites noticed that bj is lost
// (at event) and promotes the one that holds more of its log, as promote's
// refusals (ErrSiblingAhead) lead an operator to.
func (s *javaSites) promoteMostCaughtUp(t *testing.T, event time.Time) *Bundle {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		for _, b := range []*Bundle{s.hf, s.gz} {
			if mustComp[*receiverComponent](t, b).Receiver().Status().Connected {
				return errors.New("a slave site is still connected to bj")
			}
		}
		return nil
	})
	held := func(b *Bundle) (n int64) {
		for _, p := range b.Store.Partitions() {
			n += p.Max
		}
		return n
	}
	newMaster, other := s.hf, s.gz
	if held(s.gz) > held(s.hf) {
		newMaster, other = s.gz, s.hf
	}
	// Promote refuses while gossip says the other slave site still follows
	// bj (its position is not final) or holds more: as an operator, run it
	// again, or there.
	var rep PromoteReport
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		var err error
		rep, err = newMaster.Promote(context.Background(), false)
		if errors.Is(err, ErrSiblingAhead) && strings.Contains(err.Error(), "site "+other.Config().Site.Name+" applied") {
			newMaster, other = other, newMaster
		}
		return err
	})
	t.Logf("promoted %s (hf held %d bytes, gz %d) %s after bj was lost: generation %d, ends %v",
		newMaster.Config().Site.Name, held(s.hf), held(s.gz), time.Since(event), rep.Generation, rep.Ends)
	return newMaster
}

// loseMasterAuto closes bj without a hand-over and waits until a slave
// site promoted itself and takes puts. It returns it and when bj was lost.
func (s *javaSites) loseMasterAuto(t *testing.T) (*Bundle, time.Time) {
	t.Helper()
	event := time.Now()
	s.bj.Close()
	var newMaster *Bundle
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, b := range []*Bundle{s.hf, s.gz} {
			if b.promotedShipper() != nil && b.Broker.WriteRefusal() == nil {
				newMaster = b
				return nil
			}
		}
		return errors.New("no slave site took over yet")
	})
	t.Logf("%s promoted itself %s after bj was lost", newMaster.Config().Site.Name, time.Since(event))
	return newMaster, event
}

// restartOldMaster starts bj again on its data, as a slave of newMaster
// (taking the slaveId newMaster left), and waits until it follows.
func (s *javaSites) restartOldMaster(t *testing.T, newMaster *Bundle) *Bundle {
	t.Helper()
	seed := []string{mustComp[*topologyComponent](t, newMaster).Topology().Addr()}
	old := startSite(t, filepath.Join(s.root, "bj"), s.shared, siteSpec{name: "bj", slave: true, slaveID: s.slaveIDs[newMaster], join: seed, noNATS: true})
	waitCaughtUp(t, newMaster, old, s.topic, 30*time.Second)
	return old
}
