package deploy

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"metaq/broker/wire"
)

// answer is one put's answer as the producer received it.
type answer struct {
	code   int
	body   string
	at     time.Time
	opaque int32 // the put's: its body starts "straight-to-bj-<opaque> "
}

// rawProducer writes puts, eight at a time, straight to one broker's MetaQ
// port (no ZooKeeper: it never moves), reconnecting when the connection
// breaks, and records every answer.
type rawProducer struct {
	addr string
	size atomic.Int64 // random bytes added to each put's body
	mu   sync.Mutex
	ans  []answer
	errs int
}

func (p *rawProducer) run(ctx context.Context) {
	var nc net.Conn
	var dec *wire.Decoder
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	// Eight puts in flight: at the moment the master is stopped some are
	// stored and wait for their answer.
	const window = 8
	for i := int32(1); ctx.Err() == nil; i += window {
		if nc == nil {
			c, err := net.DialTimeout("tcp", p.addr, time.Second)
			if err != nil {
				p.note(answer{}, err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			nc, dec = c, wire.NewDecoder(bufio.NewReader(c))
		}
		var frames []byte
		for k := range int32(window) {
			body := []byte(fmt.Sprintf("straight-to-bj-%d ", i+k))
			if n := p.size.Load(); n > 0 {
				pad := make([]byte, n)
				rand.Read(pad) // incompressible: the replication stream cannot squeeze it
				body = append(body, pad...)
			}
			put := wire.Put{Topic: "orders", Partition: 0, Checksum: wire.Checksum(body), Opaque: i + k, Body: body}
			frames = put.AppendTo(frames)
		}
		// A put sent while the master is stopped is answered once it runs
		// again: wait that long.
		nc.SetDeadline(time.Now().Add(90 * time.Second))
		_, err := nc.Write(frames)
		refused := false
		for k := 0; k < window && err == nil; k++ {
			var cmd wire.Command
			cmd, err = dec.Decode()
			r, ok := cmd.(*wire.Result)
			if err == nil && !ok {
				err = fmt.Errorf("answer %T", cmd)
			}
			if err == nil {
				p.note(answer{code: r.Code, body: string(r.Body), at: time.Now(), opaque: r.Opaque}, nil)
				refused = refused || r.Code != wire.StatusOK
			}
		}
		if err != nil {
			p.note(answer{}, fmt.Errorf("puts from %d: %v", i, err))
			nc.Close()
			nc = nil
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if refused {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (p *rawProducer) note(a answer, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.errs++
		return
	}
	p.ans = append(p.ans, a)
}

func (p *rawProducer) answers() []answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]answer(nil), p.ans...)
}

// stoppedMasterAcknowledgesNothing runs in deploy/'s layout l (one
// metaq-server process, ZooKeeper and NATS per site, the replication
// secret and mutual TLS; TestLocalThreeSites starts it and runs this as a
// subtest) with a producer writing straight to bj's MetaQ port throughout. bj's process is stopped (SIGSTOP: a frozen VM, a long
// pause), hf is promoted with `metaq-server promote` (it takes the master
// node of bj's live session once gossip declared bj down), and bj is let
// run again (SIGCONT) with the puts written meanwhile waiting in its
// socket. Before, the slave sites' processes were stopped for a moment,
// so bj holds acknowledged records they never got. bj acknowledges none
// of the puts, nor anything after hf's promotion that hf does not hold
// (deploy/'s [site] forwardPuts=true: bj, a slave again, passes the puts it
// takes on to hf and answers with hf's answer); it becomes hf's slave
// without registering as master again, and cuts the tail hf never had
// (saving it aside) without logging an ERROR.
func stoppedMasterAcknowledgesNothing(t *testing.T, l *layout) {
	conf := func(site string) string { return filepath.Join(l.dir, site+"-1", "conf", "server.ini") }
	logDir := func(site string) string { return filepath.Join(l.dir, site+"-1", "logs") }
	pidOf := func(site string) int {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(logDir(site), ".run.pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("%s's pid file: %v", site, err)
		}
		return pid
	}
	pid := pidOf("bj")
	slaves := []int{pidOf("hf"), pidOf("gz")}

	prod := &rawProducer{addr: l.env["BJ_BROKER"]}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); prod.run(ctx) }()
	defer func() { stop(); wg.Wait() }()
	waitFor(t, 60*time.Second, func() error {
		if n := len(prod.answers()); n < 50 {
			return fmt.Errorf("%d answers from bj", n)
		}
		return nil
	})

	// The slave sites stopped for a moment: bj acknowledges puts they do
	// not get, the tail it cuts when it follows the new master (more than
	// the sockets between them buffer).
	for _, p := range slaves {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range slaves {
			syscall.Kill(p, syscall.SIGCONT)
		}
	})
	before := len(prod.answers())
	prod.size.Store(256 << 10)
	waitFor(t, 60*time.Second, func() error {
		if n := len(prod.answers()) - before; n < 60 {
			return fmt.Errorf("%d answers from bj while its slave sites are stopped", n)
		}
		return nil
	})
	prod.size.Store(0)
	stoppedAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, p := range slaves {
		if err := syscall.Kill(p, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont) // down stops it
	// promote refuses until gossip declared bj's bundle down and bj has
	// been silent longer than a master acknowledges unconfirmed, and at a
	// site that holds less of bj's log than the other (promote that one).
	var promoted time.Time
	newMaster := "hf"
	waitFor(t, 90*time.Second, func() error {
		// deploy/'s server.ini has autoFailover on: the slave site with
		// the most of bj's log may have promoted itself meanwhile.
		for _, s := range []string{"hf", "gz"} {
			if out, err := l.runErr("metaq-server", "role", "-f", conf(s)); err == nil && strings.HasPrefix(strings.TrimSpace(out), "master of generation") {
				newMaster, promoted = s, time.Now()
				t.Logf("%s promoted itself (autoFailover) within %v of SIGSTOP: %s", s, promoted.Sub(stoppedAt).Round(time.Millisecond), out)
				return nil
			}
		}
		out, err := l.runErr("metaq-server", "promote", "-f", conf(newMaster))
		// It exits non-zero when a slave site does not follow within 10 s:
		// bj, stopped, does not.
		if err != nil && !strings.Contains(out, "promoted: this site is master") {
			for _, other := range []string{"hf", "gz"} {
				if other != newMaster && strings.Contains(out, "slave site "+other+" applied") {
					newMaster = other
				}
			}
			return fmt.Errorf("promote: %v\n%s", err, out)
		}
		promoted = time.Now()
		t.Logf("promoted %s %v after SIGSTOP:\n%s", newMaster, promoted.Sub(stoppedAt).Round(time.Millisecond), out)
		return nil
	})
	cont()
	continuedAt := time.Now()

	// bj becomes the new master's slave: its recorded role, and puts
	// answered as a slave that forwards them (deploy/'s [site]
	// forwardPuts=true: the new master's answer) or refuses them (403).
	waitFor(t, 90*time.Second, func() error {
		out, err := l.runErr("metaq-server", "role", "-f", conf("bj"))
		if err != nil || !strings.Contains(out, "slave") {
			return fmt.Errorf("bj's role: %v %s", err, out)
		}
		a := prod.answers()
		if len(a) == 0 || (a[len(a)-1].code != wire.StatusForbidden && a[len(a)-1].code != wire.StatusOK) || !a[len(a)-1].at.After(continuedAt) {
			return fmt.Errorf("bj's last answer since SIGCONT is not a slave's (200 forwarded, or 403)")
		}
		return nil
	})
	followAt := time.Now()
	// It cuts what the new master never had once it reaches it.
	const cutLine = "REPLICATION: cut records the new master never had; saved aside"
	waitFor(t, 60*time.Second, func() error {
		for _, line := range readLogsSince(t, logDir("bj"), continuedAt) {
			if strings.Contains(line, cutLine) {
				return nil
			}
		}
		return fmt.Errorf("bj's log since SIGCONT does not say it cut the records %s never had", newMaster)
	})
	stop()
	wg.Wait()

	acked, after := 0, 0
	codes := map[int]int{}
	var afterAcks []answer
	for _, a := range prod.answers() {
		if a.code == wire.StatusOK {
			acked++
			// An answer read after SIGCONT was written after it, so after
			// hf's promotion: only one bj forwarded, which the new master
			// holds (checked below), is allowed.
			if a.at.After(continuedAt) {
				after++
				afterAcks = append(afterAcks, a)
			}
		}
		if a.at.After(continuedAt) {
			codes[a.code]++
		}
	}
	if len(afterAcks) > 0 {
		held := heldAt(t, l, newMaster, afterAcks)
		for _, a := range afterAcks {
			if !held[a.opaque] {
				t.Errorf("bj acknowledged a put at %s, after it ran again at %s (%s promoted at %s), that %s does not hold: %s",
					a.at.Format("15:04:05.000"), continuedAt.Format("15:04:05.000"), newMaster, promoted.Format("15:04:05.000"), newMaster, a.body)
			}
		}
	}
	t.Logf("bj: %d puts acknowledged before SIGSTOP, %d after; answers after SIGCONT by code %v; %d connection errors; a slave of %s %v after SIGCONT",
		acked, after, codes, prod.errs, newMaster, followAt.Sub(continuedAt).Round(time.Millisecond))

	logs := readLogsSince(t, logDir("bj"), continuedAt)
	for _, line := range logs {
		if strings.Contains(line, "registered as master") || (strings.Contains(line, "REGISTRY: registering broker") && strings.Contains(line, "/master ")) {
			t.Errorf("bj registered as master again after SIGCONT: %s", line)
		}
		if strings.Contains(line, "FAILOVER") || strings.Contains(line, "REGISTRY") || strings.Contains(line, "REPLICATION: cut") || strings.Contains(line, "not acknowledged") {
			t.Log(line)
		}
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("bj logged an ERROR after SIGCONT: %s", line)
		}
	}
	t.Logf("bj logged %d lines since SIGCONT", len(logs))
}

// heldAt reads partition 1-0 of orders at site's first bundle from the
// lowest offset acks name (a put's answer: <id> <partition> <offset>) to
// its end, and returns the opaques of the raw producer's puts it holds.
func heldAt(t *testing.T, l *layout, site string, acks []answer) map[int32]bool {
	t.Helper()
	from := int64(-1)
	for _, a := range acks {
		var id, part, off int64
		if n, err := fmt.Sscanf(a.body, "%d %d %d", &id, &part, &off); err != nil || n != 3 {
			t.Fatalf("an acknowledgement's body %q: %v", a.body, err)
		}
		if from < 0 || off < from {
			from = off
		}
	}
	out := l.run("metaq", "fetch", "-brokers", l.env[strings.ToUpper(site)+"_BROKER"], "-topic", "orders", "-partition", "1-0",
		"-offset", strconv.FormatInt(from, 10), "-n", "0")
	held := map[int32]bool{}
	for _, m := range regexp.MustCompile(`straight-to-bj-(\d+) `).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		held[int32(n)] = true
	}
	return held
}

// waitFor retries f every 200 ms until it succeeds or d passes.
func waitFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readLogsSince returns the lines of the *.log files in dir stamped at or
// after since (slog's time=... field).
func readLogsSince(t *testing.T, dir string, since time.Time) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no log in %s: %v", dir, err)
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || at.Before(since) {
				continue
			}
			out = append(out, line)
		}
	}
	return out
}
