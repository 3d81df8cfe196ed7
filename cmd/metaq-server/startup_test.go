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
