package bundle

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// javaProducerAt is one MetaQ 1.4.6 Java producer of a switchover in
// deploy/'s layout (runJavaSwitchover): where it finds the brokers, and
// what it saw.
type javaProducerAt struct {
	name, site, root string
	view             bool // root is the site's view root
	d                *javaDriver

	acks                 []javaAck
	answered, unanswered []string // failed sends (javaDriver.failedSends)
	closes               int      // connections dropped on ZooKeeper changes
	firstAtNew, maxGap   time.Duration
	missing              []javaAck // acknowledged, not at hf where told
}

// runJavaSwitchover runs deploy/'s layout (secret, mutual TLS, one
// ZooKeeper per site), timing (zk.zkSessionTimeoutMs=30000, gossip probes
// every 500 ms, automatic failover after 1 s) and [replication]
// sites=bj,gz,hf, with [site] forwardPuts=true at every site, starts
// MetaQ 1.4.6's synchronous Java producer (FailoverProducer: one thread,
// the next send once the last is answered) at each site through its own
// site's view root in its own ensemble, and one at bj on the real root of
// bj's ensemble, runs `switchover -to hf` while they send, and reports
// what each saw. The deployment is returned running.
func runJavaSwitchover(tb testing.TB, cp string) (*sites, []*javaProducerAt, SwitchoverReport) {
	tb.Helper()
	spec := switchoverDeploy()
	spec.loggers = javaSwitchoverLoggers(tb)
	s := newSites(tb, spec)
	prods := []*javaProducerAt{
		{name: "bj-view", site: "bj", root: s.zkRoot + "-view-bj", view: true},
		{name: "hf-view", site: "hf", root: s.zkRoot + "-view-hf", view: true},
		{name: "gz-view", site: "gz", root: s.zkRoot + "-view-gz", view: true},
		{name: "bj-real-root", site: "bj", root: s.zkRoot},
	}
	for _, p := range prods {
		if p.view {
			waitViewAt(tb, s, p.site)
		}
	}
	for _, p := range prods {
		p.d = startJava(tb, cp, "FailoverProducer", s.zks[p.site], p.root, "orders")
	}
	for _, p := range prods {
		waitAcks(tb, p.d, 20, time.Time{})
	}
	event := time.Now()
	rep := s.switchover("bj", "hf")
	after := time.Now()
	for _, p := range prods {
		waitAcks(tb, p.d, 20, after)
	}
	hf := s.site("hf")
	for _, p := range prods {
		p.d.stop()
		p.acks = p.d.acks(tb)
		p.answered, p.unanswered, p.closes = p.d.failedSends()
		p.firstAtNew, p.maxGap = stall(tb, hf, "orders", p.acks, event)
		p.missing = checkAcked(hf, "orders", p.acks)
		if _, bench := tb.(*testing.B); bench {
			continue // one line per round (BenchmarkJavaSwitchover)
		}
		tb.Logf("%s: %d sends acknowledged, %d failed (%d answered by a broker, %d failed by the client), %d connections closed on ZooKeeper changes; first acknowledgement of a record new at hf %s after the command; longest gap between two %s",
			p.name, len(p.acks), len(p.answered)+len(p.unanswered), len(p.answered), len(p.unanswered), p.closes, p.firstAtNew, p.maxGap)
		for _, f := range append(p.answered, p.unanswered...) {
			tb.Logf("%s: %s", p.name, f)
		}
	}
	return s, prods, rep
}

// javaSwitchoverLoggers keeps each site's log of a round in a file under
// $METAQ_BENCH_LOGDIR (named after the round's start and the site) when it
// is set, for the timestamps of a switchover's steps; nil otherwise.
func javaSwitchoverLoggers(tb testing.TB) map[string]*slog.Logger {
	dir := os.Getenv(benchLogDir)
	if dir == "" {
		return nil
	}
	round := time.Now().UTC().Format("150405.000")
	loggers := map[string]*slog.Logger{}
	for _, name := range []string{"bj", "hf", "gz"} {
		f, err := os.OpenFile(filepath.Join(dir, "javaswitchover-"+round+"-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.Close() })
		loggers[name] = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return loggers
}

// TestJavaClientSwitchoverPerSiteZK: runJavaSwitchover (deploy/'s layout, timing and sites list,
// forwardPuts=true at every site, `switchover -to hf`):
//
//   - the Java producers that find the brokers through their own site's
//     view root see no failed send: each view names its own site's bundle
//     before and after (bj's master, then bj's forwarding slave; hf's and
//     gz's forwarding slaves, then hf's master), so the children of
//     topics-pub/<topic> the producer watches never change and it never
//     drops its connection; what reaches bj while it hands over is held
//     there and passed on to hf;
//   - the one on the real root of bj's ensemble drops its connection once:
//     the children of topics-pub/<topic> there change once (hf's <id>-m
//     replacing bj's and the entry of the slave bj becomes created in one
//     multi); at most the one send it had in flight on it, or sent before
//     it connected to hf, fails: MetaQ 1.4.6's ProducerZooKeeper closes the
//     connection to the old master before it connects to the new one and
//     before it switches its partitions to it
//     (BrokerConnectionListener.syncedUpdateBrokersInfo), gecko fails a
//     call waiting on a closed connection (DefaultConnection.dispose:
//     "等待响应超时") and a send to a group with no connection ("无可用连
//     接"), and the producer does not retry (SimpleMessageProducer's
//     MAX_RETRY is 1).
//
// No send is answered with a failure, and every acknowledged send is at hf
// at the partition and offset, with the id, its producer was told.
func TestJavaClientSwitchoverPerSiteZK(t *testing.T) {
	cp := javaClasspath(t)
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s, prods, rep := runJavaSwitchover(t, cp)
	t.Logf("switchover: writes stopped at bj for %s; hf took generation %d", rep.WritesStopped, rep.Generation)
	for _, p := range prods {
		for _, f := range p.answered {
			t.Errorf("%s: a send was answered with a failure: %s", p.name, f)
		}
		switch {
		case p.view && (p.closes > 0 || len(p.unanswered) > 0):
			t.Errorf("%s: the producer closed a connection on %d ZooKeeper changes and %d sends failed, want none: %v", p.name, p.closes, len(p.unanswered), p.unanswered)
		case !p.view && (p.closes != 1 || len(p.unanswered) > 1):
			t.Errorf("%s: the producer closed a connection on %d ZooKeeper changes and %d sends failed, want one change and at most one failed send: %v", p.name, p.closes, len(p.unanswered), p.unanswered)
		}
		if len(p.missing) > 0 {
			t.Errorf("%s: %d of %d acknowledged sends are not at hf where the producer was told, the first %+v", p.name, len(p.missing), len(p.acks), p.missing[0])
		}
	}
	s.converged("orders")
}

// BenchmarkJavaSwitchover reports, per round of runJavaSwitchover (one
// iteration: a fresh deployment, `switchover -to hf` with the Java
// producers sending, the deployment closed), the failed sends of MetaQ
// 1.4.6's synchronous Java producer during a switchover in the recommended
// deployment: through each site's view root (view-failed-sends, summed
// over bj, hf and gz; goal 0) and on bj's real root (real-root-failed-sends,
// real-root-closes), with how long bj stopped writes and when the first
// acknowledgement of a record new at hf came (the latest of the four
// producers). It skips without METAQ_JAVA_CLIENT and METAQ_TEST_ZK.
//
//	METAQ_JAVA_CLIENT=/work/metaq-java/lib go test -run '^$' -bench BenchmarkJavaSwitchover -benchtime 3x ./internal/bundle/
func BenchmarkJavaSwitchover(b *testing.B) {
	cp := javaClasspath(b)
	// One pair of extra ZooKeeper servers for every round.
	for _, env := range []struct {
		name  string
		start func(testing.TB) string
	}{{testutil.ZK2Env, testutil.SecondZooKeeper}, {testutil.ZK3Env, testutil.ThirdZooKeeper}} {
		if os.Getenv(env.name) == "" {
			b.Setenv(env.name, env.start(b))
		}
	}
	var viewFailed, realFailed, realCloses, answered, missing int
	var stopped, maxFirst time.Duration
	for i := range b.N {
		s, prods, rep := runJavaSwitchover(b, cp)
		var first time.Duration
		reasons := map[string]int{} // failed attempts by their reason (addresses left out)
		round := fmt.Sprintf("round %d/%d:", i+1, b.N)
		for _, p := range prods {
			failed := len(p.answered) + len(p.unanswered)
			answered += len(p.answered)
			missing += len(p.missing)
			if p.view {
				viewFailed += failed
			} else {
				realFailed += failed
				realCloses += p.closes
			}
			round += fmt.Sprintf(" %s %d failed/%d closes/%d acked;", p.name, failed, p.closes, len(p.acks))
			first = max(first, p.firstAtNew)
			for _, f := range append(p.answered, p.unanswered...) {
				reasons[p.name+": "+failReason(f)]++
			}
		}
		stopped += rep.WritesStopped
		// One line a round: the testing package cuts a benchmark's log
		// after a few lines.
		b.Logf("%s writes stopped at bj %s; hf took generation %d; first acknowledgement of a record new at hf %s after the command; failed attempts by reason: %v", round,
			rep.WritesStopped.Round(time.Millisecond), rep.Generation, first.Round(time.Millisecond), reasons)
		maxFirst = max(maxFirst, first)
		for _, name := range s.running() {
			s.site(name).Close()
		}
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op") // an iteration is a whole deployment: its time says nothing
	b.ReportMetric(float64(viewFailed)/n, "view-failed-sends")
	b.ReportMetric(float64(realFailed)/n, "real-root-failed-sends")
	b.ReportMetric(float64(realCloses)/n, "real-root-closes")
	b.ReportMetric(float64(answered)/n, "answered-failures")
	b.ReportMetric(float64(missing)/n, "acked-missing")
	b.ReportMetric(float64(stopped.Milliseconds())/n, "writes-stopped-ms")
	b.ReportMetric(float64(maxFirst.Milliseconds()), "max-first-at-new-ms")
}

// failReason is a failed send's line ("fail SEQ attempt N: reason") without
// its numbers and broker addresses, so that equal reasons count together.
func failReason(line string) string {
	if _, r, ok := strings.Cut(line, ": "); ok {
		line = r
	}
	if i := strings.Index(line, "failed.Detail:"); i >= 0 {
		line = line[i+len("failed.Detail:"):]
	}
	return line
}
