package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestDaemonStartReportsFailure: `metaq-server start` (detached) reports
// success only once the bundle is up. When the bundle dies while starting
// it exits non-zero with the error from the log: the MetaQ port is taken,
// or the embedded NATS server cannot come up (its port is taken; the admin
// endpoint already answered by then, which used to count as "started").
func TestDaemonStartReportsFailure(t *testing.T) {
	t.Run("port in use", func(t *testing.T) {
		s := newServer(t, "", "[topic=test]\n")
		holder, err := net.Listen("tcp", s.addr())
		if err != nil {
			t.Skipf("port: %v", err)
		}
		defer holder.Close()
		code, out, errOut := cli(t, "start", "-f", s.ini, "-listen", s.addr())
		killIfRunning(t, s)
		if code == 0 || !strings.Contains(errOut, "address already in use") {
			t.Fatalf("start with the port taken: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
	t.Run("embedded NATS not ready", func(t *testing.T) {
		natsPort := testutil.FreePort(t)
		holder, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(natsPort))
		if err != nil {
			t.Skipf("port: %v", err)
		}
		defer holder.Close()
		s := newServer(t, "", fmt.Sprintf("[topic=test]\n\n[nats]\nembeddedListen=127.0.0.1:%d\n", natsPort))
		code, out, errOut := cli(t, "start", "-f", s.ini, "-listen", s.addr())
		killIfRunning(t, s)
		if code == 0 || !strings.Contains(errOut, "NATS") {
			t.Fatalf("start with the NATS port taken: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
}

func killIfRunning(t *testing.T, s *server) {
	data, err := os.ReadFile(filepath.Join(s.logDir, ".run.pid"))
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 && syscall.Kill(pid, 0) == nil {
		t.Errorf("server pid %d still runs after a failed start", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestTwoBrokersOneFolder: /etc/metaq/bj.ini and /etc/metaq/bj-slave.ini
// (a master and its slave on one host, files side by side) start, run and
// stop independently: each has its own pid and log file.
func TestTwoBrokersOneFolder(t *testing.T) {
	etc := filepath.Join(t.TempDir(), "etc", "metaq")
	os.MkdirAll(etc, 0o755)
	replPort := testutil.FreePort(t)
	type broker struct {
		ini  string
		port int
	}
	mk := func(name, extra string) broker {
		b := broker{ini: filepath.Join(etc, name+".ini"), port: testutil.FreePort(t)}
		ini := fmt.Sprintf("[system]\nbrokerId=4\nhostName=127.0.0.1\nserverPort=%d\nnumPartitions=1\nunflushThreshold=0\n"+
			"unflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndataPath=%s\n"+
			"[zookeeper]\nzk.zkEnable=false\nzk.zkSyncTimeMs=100\n[site]\nadminAddr=127.0.0.1:%d\n%s\n[topic=test]\n",
			b.port, filepath.Join(etc, "..", "..", "var", name), testutil.FreePort(t), extra)
		if err := os.WriteFile(b.ini, []byte(ini), 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	bj := mk("bj", fmt.Sprintf("[replication]\nlisten=127.0.0.1:%d", replPort))
	hf := mk("bj-slave", "")
	props := filepath.Join(etc, "bj-slave.properties")
	os.WriteFile(props, []byte(fmt.Sprintf("slaveId=1\nslaveMaxDelayInMills=100\nmasterAddress=127.0.0.1:%d\n", replPort)), 0o644)

	logs := filepath.Join(etc, "..", "logs")
	pids := map[string]int{}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"bj", []string{"start", "-f", bj.ini, "-listen", "127.0.0.1:" + strconv.Itoa(bj.port)}},
		{"bj-slave", []string{"start", "slave", "-f", hf.ini, "-s", props, "-listen", "127.0.0.1:" + strconv.Itoa(hf.port)}},
	} {
		code, out, errOut := cli(t, c.args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", c.name, code, out, errOut)
		}
		data, err := os.ReadFile(filepath.Join(logs, "."+c.name+".run.pid"))
		if err != nil {
			t.Fatalf("%s: pid file: %v", c.name, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		pids[c.name] = pid
		t.Cleanup(func() {
			if syscall.Kill(pid, 0) == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		if _, err := os.Stat(filepath.Join(logs, c.name+".log")); err != nil {
			t.Errorf("%s: log file: %v", c.name, err)
		}
	}
	if pids["bj"] == pids["bj-slave"] || pids["bj"] == 0 {
		t.Fatalf("pids %v", pids)
	}
	for _, ini := range []string{bj.ini, hf.ini} {
		if code, out, errOut := cli(t, "status", "-f", ini); code != 0 || !strings.Contains(out, "is running") {
			t.Errorf("status %s: exit %d %s%s", ini, code, out, errOut)
		}
	}
	// They are a working pair: the slave copies the master.
	mw := dialWire(t, "127.0.0.1:"+strconv.Itoa(bj.port))
	if code, body, err := mw.putMsg("test", 0, "hello"); err != nil || code != 200 {
		t.Fatalf("put: %d %q %v", code, body, err)
	}
	sw := dialWire(t, "127.0.0.1:"+strconv.Itoa(hf.port))
	testutil.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		if got := sw.getAll(t, "test", 0); len(got) != 1 || got[0].payload != "hello" {
			return fmt.Errorf("slave holds %v", got)
		}
		return nil
	})
	for _, ini := range []string{hf.ini, bj.ini} {
		if code, out, errOut := cli(t, "stop", "-f", ini); code != 0 {
			t.Errorf("stop %s: exit %d %s%s", ini, code, out, errOut)
		}
	}
	for name, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still runs after stop", name, pid)
		}
	}
}

// longSession rewrites a test server.ini for a 30 s ZooKeeper session: a
// process killed with -9 leaves its ephemeral nodes for that long.
func longSession(t *testing.T, s *server) {
	t.Helper()
	data, err := os.ReadFile(s.ini)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "zk.zkSessionTimeoutMs=5000", "zk.zkSessionTimeoutMs=30000", 1))
	if err := os.WriteFile(s.ini, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKilledBrokersResume: a slave killed with -9 and started again copies
// new messages long before its old ZooKeeper session (30 s) could have
// expired; a master killed with -9 answers clients and ships again just as
// soon. Neither waits for the ephemeral nodes its previous process left.
func TestKilledBrokersResume(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	topics := "[topic=orders]\n"
	master := newServer(t, zk, topics)
	slave := newServer(t, zk, topics)
	slave.root = master.root
	slave.write(t, topics)
	longSession(t, master)
	longSession(t, slave)
	props := filepath.Join(slave.dir, "conf", "async_slave.properties")
	os.WriteFile(props, []byte("slaveId=0\nslaveGroup=meta-slave-group\nslaveMaxDelayInMills=100\n"), 0o644)

	master.startMode(t, "")
	spid := slave.startMode(t, "slave", "-s", props)
	mw := dialWire(t, master.addr())
	put := func(p string) {
		t.Helper()
		if code, body, err := mw.putMsg("orders", 0, p); err != nil || code != 200 {
			t.Fatalf("put %s: %d %q %v", p, code, body, err)
		}
	}
	has := func(s *server, n int) func() error {
		return func() error {
			w := dialWire(t, s.addr())
			defer w.c.Close()
			if got := w.getAll(t, "orders", 0); len(got) != n {
				return fmt.Errorf("%s holds %d messages, want %d", s.addr(), len(got), n)
			}
			return nil
		}
	}
	put("one")
	testutil.Eventually(t, 15*time.Second, 50*time.Millisecond, has(slave, 1))

	syscall.Kill(spid, syscall.SIGKILL)
	waitGone(t, spid)
	put("two")
	start := time.Now()
	slave.startMode(t, "slave", "-s", props)
	testutil.Eventually(t, 12*time.Second, 50*time.Millisecond, has(slave, 2))
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the slave copied again only %v after its restart: it waited for its old session", took)
	}
	t.Logf("slave copying again %v after its restart", time.Since(start))

	mpid := master.pid(t)
	syscall.Kill(mpid, syscall.SIGKILL)
	waitGone(t, mpid)
	mw.c.Close()
	start = time.Now()
	master.startMode(t, "")
	mw = dialWire(t, master.addr())
	put("three")
	testutil.Eventually(t, 12*time.Second, 50*time.Millisecond, has(slave, 3))
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the master served and shipped again only %v after its restart: it waited for its old session", took)
	}
	t.Logf("master serving and shipping again %v after its restart", time.Since(start))
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("pid %d still alive", pid)
		}
		return nil
	})
}
