package main

// Tests of the start modes and process control driven through the binary:
// restart, -foreground with SIGHUP and SIGTERM, an async slave started from
// the command line against a master, and the synchronous pair (samsa master
// and gregor slave).

import (
	"bufio"
	"context"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// wireConn speaks the MetaQ text protocol to one broker.
type wireConn struct {
	c      net.Conn
	r      *bufio.Reader
	opaque int
}

func dialWire(t *testing.T, addr string) *wireConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &wireConn{c: c, r: bufio.NewReader(c), opaque: 1}
}

// call sends header (without the opaque) and body, and returns the answer:
// code 0 for a value answer, else the result code, and the answer's body.
func (w *wireConn) call(header string, body []byte) (int, []byte, error) {
	w.c.SetDeadline(time.Now().Add(15 * time.Second))
	op := w.opaque
	w.opaque++
	if _, err := w.c.Write(append([]byte(header+" "+strconv.Itoa(op)+"\r\n"), body...)); err != nil {
		return 0, nil, err
	}
	line, err := w.r.ReadString('\n')
	if err != nil {
		return 0, nil, err
	}
	f := strings.Fields(line)
	code, n := 0, 0
	switch {
	case len(f) == 4 && f[0] == "result":
		code, _ = strconv.Atoi(f[1])
		n, _ = strconv.Atoi(f[2])
	case len(f) == 3 && f[0] == "value":
		n, _ = strconv.Atoi(f[1])
	default:
		return 0, nil, fmt.Errorf("bad answer %q", line)
	}
	if f[len(f)-1] != strconv.Itoa(op) {
		return 0, nil, fmt.Errorf("answer %q for opaque %d", line, op)
	}
	buf := make([]byte, n)
	if _, err := ioReadFull(w.r, buf); err != nil {
		return 0, nil, err
	}
	return code, buf, nil
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func checksum(p string) int64 { return int64(crc32.ChecksumIEEE([]byte(p)) & 0x7FFFFFFF) }

// putMsg sends a put and returns the answer code and body
// ("<id> <partition> <offset>" on success).
func (w *wireConn) putMsg(topic string, partition int, payload string) (int, string, error) {
	code, body, err := w.call(fmt.Sprintf("put %s %d %d 0 %d", topic, partition, len(payload), checksum(payload)), []byte(payload))
	return code, string(body), err
}

type record struct {
	id      int64
	payload string
}

// getAll reads a partition from offset 0 and decodes its records.
func (w *wireConn) getAll(t *testing.T, topic string, partition int) []record {
	t.Helper()
	code, data, err := w.call(fmt.Sprintf("get %s cli-test %d 0 1048576", topic, partition), nil)
	if err != nil {
		t.Fatalf("get %s-%d: %v", topic, partition, err)
	}
	if code == 404 {
		return nil
	}
	if code != 0 {
		t.Fatalf("get %s-%d: result %d %q", topic, partition, code, data)
	}
	var out []record
	for len(data) >= 20 {
		n := int(be.BigEndian.Uint32(data))
		if len(data) < 20+n {
			break
		}
		out = append(out, record{id: int64(be.BigEndian.Uint64(data[8:])), payload: string(data[20 : 20+n])})
		data = data[20+n:]
	}
	return out
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// startMode runs `metaq-server start [mode] -f server.ini [more]` in the
// background and kills the process at the end of the test if it is left.
func (s *server) startMode(t *testing.T, mode string, more ...string) int {
	t.Helper()
	args := []string{"start"}
	if mode != "" {
		args = append(args, mode)
	}
	// -listen keeps the MetaQ port on loopback (the default is every
	// interface, as MetaQ's).
	args = append(append(args, "-f", s.ini, "-listen", s.addr()), more...)
	code, out, errOut := cli(t, args...)
	if code != 0 {
		log, _ := os.ReadFile(filepath.Join(s.logDir, "metaServer.log"))
		t.Fatalf("%v: exit %d\n%s%s\nlog:\n%s", args, code, out, errOut, log)
	}
	pid := s.pid(t)
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

func (s *server) stop(t *testing.T) {
	t.Helper()
	if code, out, errOut := cli(t, "stop", "-f", s.ini); code != 0 {
		t.Fatalf("stop: exit %d %s %s", code, out, errOut)
	}
}

func TestRestart(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\nnumPartitions=1\n")
	pid := s.startMode(t, "")
	w := dialWire(t, s.addr())
	if code, body, err := w.putMsg("orders", 0, "before"); err != nil || code != 200 {
		t.Fatalf("put: %d %q %v", code, body, err)
	}

	code, out, errOut := cli(t, "restart", "-f", s.ini, "-listen", s.addr())
	if code != 0 {
		t.Fatalf("restart: exit %d\n%s%s", code, out, errOut)
	}
	npid := s.pid(t)
	t.Cleanup(func() {
		if syscall.Kill(npid, 0) == nil {
			syscall.Kill(npid, syscall.SIGKILL)
		}
	})
	if npid == pid {
		t.Fatalf("restart kept pid %d", pid)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("old process %d still running after restart", pid)
	}
	if code, out, _ := cli(t, "status", "-f", s.ini); code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d", npid)) {
		t.Fatalf("status after restart: exit %d %s", code, out)
	}
	// The broker answers again and kept its data: the next put lands after
	// the first record, and both read back.
	w = dialWire(t, s.addr())
	code, body, err := w.putMsg("orders", 0, "after")
	if err != nil || code != 200 {
		t.Fatalf("put after restart: %d %q %v", code, body, err)
	}
	if f := strings.Fields(body); len(f) != 3 || f[2] != strconv.Itoa(20+len("before")) {
		t.Fatalf("put after restart answered %q, want offset %d", body, 20+len("before"))
	}
	recs := w.getAll(t, "orders", 0)
	if len(recs) != 2 || recs[0].payload != "before" || recs[1].payload != "after" {
		t.Fatalf("records after restart: %+v", recs)
	}
	// restart of a stopped server just starts it.
	s.stop(t)
	if code, out, errOut := cli(t, "restart", "-f", s.ini, "-listen", s.addr()); code != 0 {
		t.Fatalf("restart of a stopped server: exit %d\n%s%s", code, out, errOut)
	}
	p3 := s.pid(t)
	defer syscall.Kill(p3, syscall.SIGKILL)
	s.stop(t)
}

// startForeground runs `metaq-server start -f server.ini -foreground` (the
// systemd unit's command) with its output in foreground.log; done gets
// Wait's result, and the process is killed at the test's end if it still
// runs.
func (s *server) startForeground(t *testing.T) (cmd *exec.Cmd, done chan error, logPath string) {
	t.Helper()
	logPath = filepath.Join(s.dir, "foreground.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd = exec.Command(binary, "start", "-f", s.ini, "-listen", s.addr(), "-foreground")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd, done, logPath
}

func TestForeground(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\nnumPartitions=1\n")
	cmd, done, logPath := s.startForeground(t)
	// It serves, and the process serving is the one we started (it did not
	// detach into a child): the pid file names it and it has not exited.
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("foreground server exited: %v\n%s", err, log)
		default:
		}
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	if pid := s.pid(t); pid != cmd.Process.Pid {
		t.Fatalf("pid file %d, foreground process %d", pid, cmd.Process.Pid)
	}
	w := dialWire(t, s.addr())
	if code, body, err := w.putMsg("orders", 0, "fg"); err != nil || code != 200 {
		t.Fatalf("put: %d %q %v", code, body, err)
	}
	if code, body, _ := w.putMsg("hup", 0, "x"); code == 200 {
		t.Fatalf("put to a topic not configured yet answered 200 %q", body)
	}

	// SIGHUP reloads: the new topic takes puts.
	s.write(t, "[topic=orders]\nnumPartitions=1\n\n[topic=hup]\nnumPartitions=2\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		code, body, err := w.putMsg("hup", 1, "reloaded")
		if err != nil || code != 200 {
			return fmt.Errorf("put to hup-1: %d %q %v", code, body, err)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("SIGHUP ended the server: %v", err)
	default:
	}

	// SIGTERM: a clean stop with exit status 0 and no pid file left.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("after SIGTERM: %v\n%s", err, log)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("foreground server still running 20 s after SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
	if _, err := os.Stat(filepath.Join(s.logDir, ".run.pid")); !os.IsNotExist(err) {
		t.Errorf("pid file left after SIGTERM: %v", err)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "BUNDLE: stopped") {
		t.Errorf("log lacks the clean stop:\n%s", log)
	}
	if testing.Verbose() {
		t.Logf("foreground log:\n%s", log)
	}
}

// slaveStatus runs `metaq-server slave-status` and decodes its JSON.
func slaveStatus(t *testing.T, s *server) (map[string]any, string) {
	t.Helper()
	code, out, errOut := cli(t, "slave-status", "-json", "-f", s.ini)
	if code != 0 {
		return nil, fmt.Sprintf("exit %d %s%s", code, out, errOut)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("slave-status output is not JSON: %v\n%s", err, out)
	}
	return st, out
}

// TestSlaveFromCommandLine starts a master and `start slave -f server.ini
// -s async_slave.properties`, with ZooKeeper off (masterAddress) and, when a
// test ZooKeeper is given, on (the slave finds its master there), and checks
// that the slave copies the master's messages and that slave-status reports
// the link.
func TestSlaveFromCommandLine(t *testing.T) {
	t.Run("zk-off", func(t *testing.T) { testSlaveFromCommandLine(t, "") })
	t.Run("zk", func(t *testing.T) { testSlaveFromCommandLine(t, testutil.ZooKeeper(t)) })
}

func testSlaveFromCommandLine(t *testing.T, zk string) {
	topics := "[topic=orders]\nnumPartitions=2\n"
	replPort := testutil.FreePort(t)
	master := newServer(t, zk, topics+fmt.Sprintf("\n[replication]\nlisten=127.0.0.1:%d\n", replPort))
	slave := newServer(t, zk, topics)
	props := filepath.Join(slave.dir, "conf", "async_slave.properties")
	propText := "slaveId=0\nslaveGroup=meta-slave-group\nslaveMaxDelayInMills=100\nautoSyncMasterConfig=false\ncompression=none\n"
	var reg *registry.Registry
	if zk == "" {
		propText += fmt.Sprintf("masterAddress=127.0.0.1:%d\n", replPort)
	} else {
		// Same root as the master; no masterAddress: ZooKeeper tells.
		slave.root = master.root
		slave.write(t, topics)
		var err error
		reg, err = registry.New(context.Background(), registry.Options{Connect: zk, Root: master.root})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
		t.Cleanup(func() { reg.DeleteTree(context.Background(), master.root) }) // runs before Close
	}
	os.WriteFile(props, []byte(propText), 0o644)

	master.startMode(t, "")
	mw := dialWire(t, master.addr())
	for i := 0; i < 6; i++ {
		if code, body, err := mw.putMsg("orders", i%2, fmt.Sprintf("m%d", i)); err != nil || code != 200 {
			t.Fatalf("put: %d %q %v", code, body, err)
		}
	}
	slave.startMode(t, "slave", "-s", props)

	want := [2][]record{mw.getAll(t, "orders", 0), mw.getAll(t, "orders", 1)}
	if len(want[0]) != 3 || len(want[1]) != 3 {
		t.Fatalf("master holds %+v", want)
	}
	sw := dialWire(t, slave.addr())
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		for p := 0; p < 2; p++ {
			if got := sw.getAll(t, "orders", p); fmt.Sprint(got) != fmt.Sprint(want[p]) {
				return fmt.Errorf("slave orders-%d = %+v, master %+v", p, got, want[p])
			}
		}
		return nil
	})
	st, raw := slaveStatus(t, slave)
	if st == nil {
		t.Fatalf("slave-status on the slave: %s", raw)
	}
	if st["Connected"] != true || st["Running"] != true || st["MasterAddr"] != fmt.Sprintf("127.0.0.1:%d", replPort) {
		t.Fatalf("slave-status: %s", raw)
	}
	if n, _ := st["Partitions"].(float64); n < 2 {
		t.Fatalf("slave-status partitions %v: %s", st["Partitions"], raw)
	}
	if n, _ := st["AppliedPos"].(float64); n <= 0 {
		t.Fatalf("slave-status applied position %v: %s", st["AppliedPos"], raw)
	}
	if reg != nil {
		ctx := context.Background()
		url, _, err := reg.Get(ctx, reg.Paths().Broker(3, 0))
		if err != nil || string(url) != "meta://"+slave.addr() {
			t.Fatalf("slave0 node = %q %v, want meta://%s", url, err, slave.addr())
		}
	}

	// -json prints no Go zero time ("0001-01-01T00:00:00Z") for a time
	// that has not happened (no error yet, no ack yet): such a field is
	// left out.
	for _, c := range []struct {
		s    *server
		args []string
	}{{slave, []string{"slave-status", "-json"}}, {slave, []string{"status", "-json"}}, {master, []string{"status", "-json"}}} {
		code, out, errOut := cli(t, append(c.args, "-f", c.s.ini)...)
		if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "{") || strings.Contains(out, "0001-01-01") {
			t.Errorf("%v on %s: exit %d\n%s%s", c.args, c.s.ini, code, out, errOut)
		}
	}

	// Without -json, slave-status and status print a short summary.
	if code, out, errOut := cli(t, "slave-status", "-f", slave.ini); code != 0 ||
		!strings.Contains(out, fmt.Sprintf("replication: connected to 127.0.0.1:%d", replPort)) || strings.Contains(out, "0001-01-01") {
		t.Errorf("slave-status summary: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "status", "-f", slave.ini); code != 0 || !strings.Contains(out, "slave of brokerId 3 (slaveId 0)") ||
		!strings.Contains(out, "replication-slave: connected") || strings.Contains(out, "{") {
		t.Errorf("status summary: exit %d\n%s%s", code, out, errOut)
	}

	// restart without the mode word keeps the mode and properties file it
	// was started with: still a slave of the same master.
	if zk == "" {
		code, out, errOut := cli(t, "restart", "-f", slave.ini, "-listen", slave.addr())
		if code != 0 || !strings.Contains(out, "restarting as it was started: slave -s "+props) {
			t.Fatalf("restart of the slave: exit %d\n%s%s", code, out, errOut)
		}
		pid := slave.pid(t)
		t.Cleanup(func() {
			if syscall.Kill(pid, 0) == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
			st, raw := slaveStatus(t, slave)
			if st == nil || st["Connected"] != true || st["MasterAddr"] != fmt.Sprintf("127.0.0.1:%d", replPort) {
				return fmt.Errorf("slave-status after restart: %s", raw)
			}
			return nil
		})
	}

	// The status follows the link: with the master stopped it is no longer
	// connected.
	master.stop(t)
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		st, raw := slaveStatus(t, slave)
		if st == nil || st["Connected"] != false {
			return fmt.Errorf("slave-status with the master stopped: %s", raw)
		}
		return nil
	})
	slave.stop(t)
}

// syncHeader is the 8-field sync command of a samsa master (see sync in broker/wire/doc.go).
func syncHeader(topic string, partition int, payload string, id int64) string {
	return fmt.Sprintf("sync %s %d %d 0 %d %d", topic, partition, len(payload), id, checksum(payload))
}

// TestGregorAcceptsSync: `start gregor` runs a broker that stores `sync`
// commands under the master's message id; a plain broker refuses them.
func TestGregorAcceptsSync(t *testing.T) {
	g := newServer(t, "", "[topic=test]\nnumPartitions=1\n")
	g.startMode(t, "gregor")
	w := dialWire(t, g.addr())
	code, body, err := w.call(syncHeader("test", 0, "hello", 6393882542080), []byte("hello"))
	if err != nil || code != 200 || string(body) != "6393882542080 0 0" {
		t.Fatalf("sync to gregor: %d %q %v", code, body, err)
	}
	code, body, err = w.call(syncHeader("test", 0, "again", 6393882542099), []byte("again"))
	if err != nil || code != 200 || string(body) != "6393882542099 0 25" {
		t.Fatalf("second sync to gregor: %d %q %v", code, body, err)
	}
	recs := w.getAll(t, "test", 0)
	if len(recs) != 2 || recs[0] != (record{6393882542080, "hello"}) || recs[1] != (record{6393882542099, "again"}) {
		t.Fatalf("gregor holds %+v", recs)
	}
	g.stop(t)

	plain := newServer(t, "", "[topic=test]\nnumPartitions=1\n")
	plain.startMode(t, "")
	pw := dialWire(t, plain.addr())
	if code, body, err := pw.call(syncHeader("test", 0, "hello", 6393882542080), []byte("hello")); err != nil || code != 503 {
		t.Fatalf("sync to a plain broker: %d %q %v", code, body, err)
	}
	plain.stop(t)
}

// TestSamsaWithGregor starts a gregor slave and `start samsa` with
// samsa_master.properties pointing at it: every acknowledged put is already
// in the gregor under the same id, and with the gregor stopped puts are not
// acknowledged.
func TestSamsaWithGregor(t *testing.T) {
	topics := "[topic=test]\nnumPartitions=2\n"
	g := newServer(t, "", topics)
	m := newServer(t, "", topics)
	props := filepath.Join(m.dir, "conf", "samsa_master.properties")
	os.WriteFile(props, []byte(fmt.Sprintf("slave=127.0.0.1:%d\nsendToSlaveTimeoutInMills=2000\n", g.port)), 0o644)
	g.startMode(t, "gregor")
	m.startMode(t, "samsa", "-s", props)

	mw := dialWire(t, m.addr())
	gw := dialWire(t, g.addr())
	for i := 0; i < 6; i++ {
		p := i % 2
		payload := fmt.Sprintf("s%d", i)
		code, body, err := mw.putMsg("test", p, payload)
		if err != nil || code != 200 {
			t.Fatalf("put %d to samsa: %d %q %v", i, code, body, err)
		}
		f := strings.Fields(body)
		id, _ := strconv.ParseInt(f[0], 10, 64)
		// Read back from the gregor right after the acknowledgement.
		recs := gw.getAll(t, "test", p)
		if len(recs) == 0 || recs[len(recs)-1] != (record{id, payload}) {
			t.Fatalf("acknowledged put %q (id %d) not in the gregor: %+v", payload, id, recs)
		}
	}
	for p := 0; p < 2; p++ {
		if mr, gr := mw.getAll(t, "test", p), gw.getAll(t, "test", p); fmt.Sprint(mr) != fmt.Sprint(gr) || len(mr) != 3 {
			t.Fatalf("test-%d: samsa %+v, gregor %+v", p, mr, gr)
		}
	}

	// Gregor stopped: no acknowledgement.
	g.stop(t)
	code, body, err := mw.putMsg("test", 0, "lost")
	if err == nil && code == 200 {
		t.Fatalf("put acknowledged with the gregor stopped: %q", body)
	}
	t.Logf("put with the gregor stopped: %d %q %v", code, body, err)

	// Gregor back: puts are acknowledged and stored there again.
	g.startMode(t, "gregor")
	gw = dialWire(t, g.addr())
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		code, body, err := mw.putMsg("test", 1, "back")
		if err != nil || code != 200 {
			return fmt.Errorf("put after the gregor returned: %d %q %v", code, body, err)
		}
		return nil
	})
	if recs := gw.getAll(t, "test", 1); len(recs) == 0 || recs[len(recs)-1].payload != "back" {
		t.Fatalf("gregor after its restart holds %+v", recs)
	}
	m.stop(t)
	g.stop(t)
}

// TestStopWaitsForTheCleanStop: stop sends one SIGTERM and waits for the
// clean stop however long each -wait is, instead of signalling again (which
// would cut it short).
func TestStopWaitsForTheCleanStop(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\n")
	s.startMode(t, "")
	code, out, errOut := cli(t, "stop", "-f", s.ini, "-wait", "1ms", "-tries", "20000")
	if code != 0 || !strings.Contains(out, "metaq-server stopped") || strings.Contains(out, "again") || strings.Contains(out, "killing") {
		t.Fatalf("stop: exit %d\n%s%s", code, out, errOut)
	}
	log, _ := os.ReadFile(filepath.Join(s.logDir, "metaServer.log"))
	if !strings.Contains(string(log), "BUNDLE: stopped") {
		t.Errorf("the server did not stop cleanly; log:\n%s", log)
	}
}
