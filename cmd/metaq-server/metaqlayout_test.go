package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/freeport"
	"metaq/internal/testutil"
)

// metaqLayoutBroker is one broker of MetaQ's integration-test layout, from
// MetaQ's own file with only its serverPort and zk.zkConnect changed.
type metaqLayoutBroker struct {
	name, ini, props, data, mode string
	port                         int
}

func (b *metaqLayoutBroker) args(cmd string, more ...string) []string {
	return append([]string{cmd, "-f", b.ini, "-data", b.data}, more...)
}

// TestMetaQSlaveLayoutOneHost: MetaQ's integration suite runs two masters
// (server1.ini, server2.ini) and three async slaves (slave1-1.ini,
// slave1-2.ini, slave2-1.ini on 8111, 8112 and 8113) on one host. Here the
// five start from those files, unchanged but for serverPort (five adjacent
// free ports) and zk.zkConnect, with the admin endpoint on (the default: a
// unix socket in each data directory), and take no TCP port but their
// serverPort; every ctl command then works against each broker.
func TestMetaQSlaveLayoutOneHost(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	rb := make([]byte, 6)
	rand.Read(rb)
	chroot := "/metaq-test-" + hex.EncodeToString(rb)
	base, err := freeport.Consecutive(5)
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "conf"), 0o755)
	src := filepath.Join("..", "..", "broker", "config", "testdata", "metaq-1.4.6")
	// Slaves first in port order, as in MetaQ's files (8111-8113), then the
	// masters (8123, 8124 there).
	brokers := []*metaqLayoutBroker{
		{name: "server1", port: base + 3},
		{name: "server2", port: base + 4},
		{name: "slave1-1", port: base, mode: "slave", props: "async_slave1-1.properties"},
		{name: "slave1-2", port: base + 1, mode: "slave", props: "async_slave1-2.properties"},
		{name: "slave2-1", port: base + 2, mode: "slave", props: "async_slave2-1.properties"},
	}
	for _, b := range brokers {
		data, err := os.ReadFile(filepath.Join(src, "integration-test-test-"+b.name+".ini"))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]string{
			{"serverPort=", "serverPort=" + strconv.Itoa(b.port) + "\n;;was "},
			{"zk.zkConnect=localhost:2181", "zk.zkConnect=" + zk + chroot},
		} {
			if !bytes.Contains(data, []byte(r[0])) {
				t.Fatalf("%s.ini has no %s", b.name, r[0])
			}
			data = bytes.Replace(data, []byte(r[0]), []byte(r[1]), 1)
		}
		b.ini = filepath.Join(dir, "conf", b.name+".ini")
		os.WriteFile(b.ini, data, 0o644)
		b.data = filepath.Join(dir, "data", b.name) // as MetaQ's tests set dataPath: ~/meta/<name>
		if b.props != "" {
			p, err := os.ReadFile(filepath.Join(src, "integration-test-test-"+b.props))
			if err != nil {
				t.Fatal(err)
			}
			b.props = filepath.Join(dir, "conf", b.props)
			os.WriteFile(b.props, p, 0o644)
		}
	}
	reg, err := registry.New(context.Background(), registry.Options{Connect: zk, Root: chroot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	t.Cleanup(func() { reg.DeleteTree(context.Background(), chroot) }) // runs before Close

	pids := map[string]int{}
	for _, b := range brokers {
		args := []string{"start"}
		if b.mode != "" {
			args = append(args, b.mode, "-s", b.props)
		}
		// -listen keeps the MetaQ port on loopback, as run.sh's stand-in does.
		args = append(args, "-f", b.ini, "-data", b.data, "-listen", "127.0.0.1:"+strconv.Itoa(b.port))
		code, out, errOut := cli(t, args...)
		if code != 0 {
			log, _ := os.ReadFile(filepath.Join(dir, "logs", b.name+".log"))
			t.Fatalf("%v: exit %d\n%s%s\nlog:\n%s", args, code, out, errOut, log)
		}
		pid := readPIDFile(t, filepath.Join(dir, "logs", "."+b.name+".run.pid"))
		pids[b.name] = pid
		t.Cleanup(func() {
			if syscall.Kill(pid, 0) == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}

	for _, b := range brokers {
		// The only TCP port it listens on is its serverPort.
		if ports := listeningTCPPorts(t, pids[b.name]); len(ports) != 1 || ports[0] != b.port {
			t.Errorf("%s (serverPort %d) listens on TCP %v", b.name, b.port, ports)
		}
		if fi, err := os.Stat(filepath.Join(b.data, "admin.sock")); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: admin socket: %v", b.name, err)
		}
		code, out, errOut := cli(t, b.args("status")...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("metaq-server is running (pid %d)", pids[b.name])) ||
			!strings.Contains(out, "broker registered") {
			t.Errorf("%s: status: exit %d\n%s%s", b.name, code, out, errOut)
		}
		code, out, errOut = cli(t, b.args("status", "-json")...)
		var st struct {
			PID  int    `json:"pid"`
			Mode string `json:"mode"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.PID != pids[b.name] || (st.Mode == "slave") != (b.mode == "slave") {
			t.Errorf("%s: status -json: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, "stats", "-f", b.ini); code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d\r\n", pids[b.name])) {
			t.Errorf("%s: stats: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, b.args("reload")...); code != 0 {
			t.Errorf("%s: reload: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, b.args("close-partitions", "-topic", "test", "-start", "0", "-end", "1")...); code != 0 ||
			!strings.Contains(out, "closed partitions 0..1 of test") {
			t.Errorf("%s: close-partitions: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, b.args("open-partitions", "-topic", "test")...); code != 0 || !strings.Contains(out, "opened partitions 0..9 of test") {
			t.Errorf("%s: open-partitions: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, b.args("repair", "-topic", "test", "-partition", "0", "-from", "127.0.0.1:1")...); code != 0 ||
			!strings.Contains(out, "test-0 has no damaged range") {
			t.Errorf("%s: repair: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if code, out, errOut := cli(t, "query", "-f", b.ini); code != 0 {
			t.Errorf("%s: query: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if b.mode == "slave" {
			testutil.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
				code, out, errOut := cli(t, b.args("slave-status")...)
				if code != 0 || !strings.Contains(out, "replication: connected to ") {
					return fmt.Errorf("%s: slave-status: exit %d\n%s%s", b.name, code, out, errOut)
				}
				return nil
			})
		} else if code, _, errOut := cli(t, b.args("slave-status")...); code == 0 || !strings.Contains(errOut, "not an async slave") {
			t.Errorf("%s: slave-status on a master: exit %d %s", b.name, code, errOut)
		}
		// promote and switchover answer (and refuse: a live master, no
		// such slave) through the same endpoint.
		if b.mode == "slave" {
			if code, out, errOut := cli(t, b.args("promote")...); code == 0 || !strings.Contains(out+errOut, "409") {
				t.Errorf("%s: promote with the master alive: exit %d\n%s%s", b.name, code, out, errOut)
			}
		} else if code, out, errOut := cli(t, b.args("switchover", "-to", "nosuchslave")...); code == 0 || strings.Contains(out+errOut, "admin endpoint unix:") {
			t.Errorf("%s: switchover to a slave that does not exist: exit %d\n%s%s", b.name, code, out, errOut)
		}
	}

	// Stopped in the order MetaQ's tests stop them: every stop is clean and
	// removes the socket; status then says not running.
	for i := len(brokers) - 1; i >= 0; i-- {
		b := brokers[i]
		if code, out, errOut := cli(t, "stop", "-f", b.ini); code != 0 || !strings.Contains(out, "metaq-server stopped") {
			t.Errorf("%s: stop: exit %d\n%s%s", b.name, code, out, errOut)
		}
		if syscall.Kill(pids[b.name], 0) == nil {
			t.Errorf("%s: still running after stop", b.name)
		}
		if _, err := os.Stat(filepath.Join(b.data, "admin.sock")); !os.IsNotExist(err) {
			t.Errorf("%s: admin socket left after stop: %v", b.name, err)
		}
		if code, out, _ := cli(t, b.args("status")...); code != 1 || !strings.Contains(out, "not running") {
			t.Errorf("%s: status after stop: exit %d %s", b.name, code, out)
		}
	}
}

func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// listeningTCPPorts returns the TCP ports process pid listens on: its
// sockets (/proc/pid/fd) matched with the listening entries of
// /proc/net/tcp and tcp6.
func listeningTCPPorts(t *testing.T, pid int) []int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("sockets of pid %d: %v", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports = append(ports, int(p))
			}
		}
		f.Close()
	}
	return ports
}
