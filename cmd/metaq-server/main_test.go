package main

// These tests build the metaq-server binary and drive it as an operator
// would: check, start in the background, status, stats, reload, partitions,
// stop, query, and the offline partition tools.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/internal/testutil"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metaq-server-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "metaq-server")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build metaq-server: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli runs the binary and returns its exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

type server struct {
	dir, ini, logDir, root, zk string
	port                       int
}

func newServer(t *testing.T, zk, topics string) *server {
	b := make([]byte, 6)
	rand.Read(b)
	s := &server{dir: t.TempDir(), zk: zk, root: "/metaq-test-" + hex.EncodeToString(b), port: testutil.FreePort(t)}
	s.ini = filepath.Join(s.dir, "conf", "server.ini")
	s.logDir = filepath.Join(s.dir, "logs")
	os.MkdirAll(filepath.Dir(s.ini), 0o755)
	s.write(t, topics)
	return s
}

func (s *server) write(t *testing.T, topics string) {
	t.Helper()
	zkEnable := "true"
	zk := s.zk
	if zk == "" {
		zkEnable, zk = "false", "127.0.0.1:1"
	}
	ini := fmt.Sprintf(`[system]
brokerId=3
hostName=127.0.0.1
serverPort=%d
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576
dataPath=%s

[zookeeper]
zk.zkConnect=%s
zk.zkEnable=%s
zk.zkRoot=%s
zk.zkSessionTimeoutMs=5000
zk.zkConnectionTimeoutMs=10000
zk.zkSyncTimeMs=100

%s`, s.port, filepath.Join(s.dir, "data"), zk, zkEnable, s.root, topics)
	if err := os.WriteFile(s.ini, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs `metaq-server start` in the background and makes sure the
// process is gone when the test ends.
func (s *server) start(t *testing.T) int {
	t.Helper()
	code, out, errOut := cli(t, "start", "-f", s.ini)
	if code != 0 {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	pid := s.pid(t)
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

func (s *server) pid(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.logDir, ".run.pid"))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func put(t *testing.T, addr, topic string, partition int, payload string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	crc := crc32.ChecksumIEEE([]byte(payload)) & 0x7FFFFFFF
	fmt.Fprintf(c, "put %s %d %d 0 %d 7\r\n%s", topic, partition, len(payload), crc, payload)
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "result 200 ") {
		t.Fatalf("put: %q %v", buf[:n], err)
	}
}

func TestCheck(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\nnumPartitions=3\n")
	code, out, errOut := cli(t, "check", "-f", s.ini)
	if code != 0 {
		t.Fatalf("check of a valid file: exit %d %s", code, errOut)
	}
	if !strings.Contains(out, "[topic=orders]") || !strings.Contains(out, "numPartitions=3") {
		t.Errorf("check output lacks the topic:\n%s", out)
	}
	// A replication key file the bundle would refuse at start.
	good, _ := os.ReadFile(s.ini)
	os.WriteFile(filepath.Join(filepath.Dir(s.ini), "repl.key"), []byte("0123456789abcdef0123456789abcdef\n"), 0o644)
	os.WriteFile(s.ini, append(bytes.Clone(good), "\n[replication]\nsecretFile=repl.key\n"...), 0o644)
	if code, _, errOut := cli(t, "check", "-f", s.ini); code == 0 || !strings.Contains(errOut, "chmod 600") {
		t.Errorf("check of a group-readable key file: exit %d %s", code, errOut)
	}
	os.Chmod(filepath.Join(filepath.Dir(s.ini), "repl.key"), 0o600)
	if code, _, errOut := cli(t, "check", "-f", s.ini); code != 0 {
		t.Errorf("check with a good key file: exit %d %s", code, errOut)
	}
	os.WriteFile(s.ini, []byte("[system]\nbrokerId=1\nserverPortt=1\n[zookeeper]\n"), 0o644)
	code, _, errOut = cli(t, "check", "-f", s.ini)
	if code == 0 {
		t.Fatal("check of an invalid file exited 0")
	}
	if !strings.Contains(errOut, "serverPortt") {
		t.Errorf("check error does not name the bad key: %s", errOut)
	}
	if code, _, _ := cli(t, "nosuchcommand"); code == 0 {
		t.Error("unknown command exited 0")
	}
}

// registry connects to the server's root, which is removed when the test
// ends.
func (s *server) registry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.New(context.Background(), registry.Options{Connect: s.zk, Root: s.root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	t.Cleanup(func() { reg.DeleteTree(context.Background(), s.root) }) // runs before Close
	return reg
}

func TestOperatorCommands(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	s := newServer(t, zk, "[topic=orders]\nnumPartitions=2\n")
	ctx := context.Background()
	reg := s.registry(t)

	pid := s.start(t)
	if code, out, _ := cli(t, "status", "-f", s.ini); code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d", pid)) ||
		!strings.Contains(out, "zookeeper: session 0x") || !strings.Contains(out, ", broker registered, 1 topics") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	if code, out, _ := cli(t, "status", "-json", "-f", s.ini); code != 0 || !strings.Contains(out, `"brokerRegistered": true`) {
		t.Errorf("status -json: exit %d\n%s", code, out)
	}
	if code, _, errOut := cli(t, "start", "-f", s.ini); code == 0 || !strings.Contains(errOut, "already running") {
		t.Errorf("second start: exit %d %s", code, errOut)
	}
	url, _, err := reg.Get(ctx, reg.Paths().Broker(3, -1))
	if err != nil || string(url) != fmt.Sprintf("meta://127.0.0.1:%d", s.port) {
		t.Fatalf("master node = %q %v", url, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	put(t, addr, "orders", 1, "hello")

	code, out, _ := cli(t, "stats", "-f", s.ini)
	if code != 0 || !strings.HasPrefix(out, "STATS\r\n") || !strings.Contains(out, "broker_id 3\r\n") ||
		!strings.Contains(out, fmt.Sprintf("pid %d\r\n", pid)) {
		t.Errorf("stats: exit %d\n%q", code, out)
	}
	raw, _ := os.ReadFile(s.ini)
	if code, out, _ := cli(t, "stats", "-item", "config", "-f", s.ini); code != 0 || out != string(raw) {
		t.Errorf("stats config: exit %d, %d bytes, want the %d bytes of server.ini", code, len(out), len(raw))
	}

	if code, out, errOut := cli(t, "close-partitions", "-topic", "orders", "-start", "0", "-end", "1", "-f", s.ini); code != 0 {
		t.Fatalf("close-partitions: %d %s %s", code, out, errOut)
	}
	if code, out, _ := cli(t, "status", "-f", s.ini); code != 0 {
		t.Errorf("status after close: %d %s", code, out)
	}
	if code, out, errOut := cli(t, "open-partitions", "-topic", "orders", "-f", s.ini); code != 0 {
		t.Fatalf("open-partitions: %d %s %s", code, out, errOut)
	}
	put(t, addr, "orders", 0, "again")
	if code, out, errOut := cli(t, "repair", "-topic", "orders", "-partition", "0", "-from", "127.0.0.1:1", "-f", s.ini); code != 0 ||
		!strings.Contains(out, "orders-0 has no damaged range") {
		t.Errorf("repair of an undamaged partition: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "repair", "-topic", "orders", "-f", s.ini); code == 0 || !strings.Contains(errOut, "-partition") {
		t.Errorf("repair without -partition: exit %d %s", code, errOut)
	}
	if code, _, _ := cli(t, "slave-status", "-f", s.ini); code == 0 {
		t.Error("slave-status on a master exited 0")
	}

	// reload: a new topic is registered at once.
	s.write(t, "[topic=orders]\nnumPartitions=2\n\n[topic=audit]\nnumPartitions=4\n")
	if code, out, errOut := cli(t, "reload", "-f", s.ini); code != 0 || !strings.Contains(out, "audit") {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	if data, _, err := reg.Get(ctx, reg.Paths().TopicsPub()+"/audit/3-m"); err != nil || string(data) != `{"numParts":4,"broker":"3-m"}` {
		t.Errorf("audit after reload: %q %v", data, err)
	}
	// SIGHUP does the same.
	s.write(t, "[topic=orders]\nnumPartitions=2\n\n[topic=audit]\nnumPartitions=4\n\n[topic=hup]\nnumPartitions=1\n")
	syscall.Kill(pid, syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		_, _, err := reg.Get(ctx, reg.Paths().Topics()+"/hup/3-m")
		return err
	})

	// query with the broker running: max offset and lag from `stats offsets`.
	reg.CommitOffset(ctx, "billing", "orders", 3, 1, -1, 0)
	code, out, errOut := cli(t, "query", "-f", s.ini, "-group", "billing")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[1]), " ") != "orders 3-1 0 25 25 -1" {
		t.Errorf("query: exit %d\n%s%s", code, out, errOut)
	}

	if code, out, errOut := cli(t, "stop", "-f", s.ini); code != 0 {
		t.Fatalf("stop: exit %d %s %s", code, out, errOut)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatal("server still running after stop")
	}
	if _, err := os.Stat(filepath.Join(s.logDir, ".run.pid")); !os.IsNotExist(err) {
		t.Error("pid file left after stop")
	}
	if ok, _, _ := reg.Exists(ctx, reg.Paths().Broker(3, -1)); ok {
		t.Error("master node left after stop")
	}
	if code, out, _ := cli(t, "status", "-f", s.ini); code != 1 || !strings.Contains(out, "not running") {
		t.Errorf("status of a stopped server: exit %d %s", code, out)
	}
	log, _ := os.ReadFile(filepath.Join(s.logDir, "metaServer.log"))
	if !strings.Contains(string(log), "BUNDLE: stopped") {
		t.Errorf("log lacks the clean stop:\n%s", log)
	}

	// Offline tools on the stopped server's data: move partition 1 to 5,
	// then delete it.
	if code, out, errOut := cli(t, "move-partitions", "-topic", "orders", "-start", "1", "-end", "1", "-offset", "4", "-f", s.ini); code != 0 {
		t.Fatalf("move-partitions: %d %s %s", code, out, errOut)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(s.dir, "data"), BrokerID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Partition("orders", 1); !errors.Is(err, store.ErrNoPartition) {
		t.Errorf("orders-1 after the move: %v", err)
	}
	data, err := st.Read("orders", 5, 0, 1024)
	if err != nil || !bytes.HasSuffix(data, []byte("hello")) || len(data) != 25 {
		t.Errorf("orders-5 after the move: %q %v", data, err)
	}
	st.Close()
	if code, out, errOut := cli(t, "delete-partitions", "-topic", "orders", "-start", "5", "-end", "5", "-f", s.ini); code != 0 {
		t.Fatalf("delete-partitions: %d %s %s", code, out, errOut)
	}
	st, err = store.Open(store.Options{Dir: filepath.Join(s.dir, "data"), BrokerID: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Partition("orders", 5); !errors.Is(err, store.ErrNoPartition) {
		t.Errorf("orders-5 after delete: %v", err)
	}
	if _, err := st.Partition("orders", 0); err != nil {
		t.Errorf("orders-0 touched by the tools: %v", err)
	}
}

func TestQuery(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	s := newServer(t, zk, "[topic=orders]\nnumPartitions=2\n")
	ctx := context.Background()
	reg := s.registry(t)
	// No group yet: query says so instead of printing nothing.
	if code, out, _ := cli(t, "query", "-f", s.ini); code != 0 || !strings.Contains(out, "no consumer group has stored offsets in "+zk+s.root+"/consumers") {
		t.Errorf("query without groups: %d %q", code, out)
	}
	reg.CommitOffset(ctx, "billing", "orders", 3, 0, 6393882542080, 58)
	reg.SetPersistent(ctx, reg.Paths().ConsumerOffsets("billing", "orders")+"/3-1", []byte("-1-0"))
	code, out, errOut := cli(t, "query", "-f", s.ini, "-group", "billing")
	if code != 0 {
		t.Fatalf("query: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// No broker 3 is running: max offset and lag are unknown.
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "orders 3-0 58 - - 6393882542080" ||
		strings.Join(strings.Fields(lines[2]), " ") != "orders 3-1 0 - - -1" {
		t.Errorf("query output:\n%s", out)
	}
	if code, out, _ := cli(t, "query", "-f", s.ini); code != 0 || !strings.Contains(out, "consumer groups in ") ||
		!regexp.MustCompile(`(?m)^billing\s+orders\s+2\s+0 \(some brokers did not answer\)$`).MatchString(out) {
		t.Errorf("query groups: %d %q", code, out)
	}
	if code, _, _ := cli(t, "query", "-f", s.ini, "-group", "nobody"); code == 0 {
		t.Error("query of an unknown group exited 0")
	}
}

// TestCommandFlags: each command's -h lists its own flags and only those,
// and a flag the command does not take is refused (exit 2) instead of
// being ignored.
func TestCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd     string
		has     []string
		foreign string // a flag of another command
	}{
		{"start", []string{"-f", "-s", "-foreground", "-logdir", "-pidfile", "-timeout", "-listen", "-admin", "-data", "-v", "-allow-unknown", "-gcfloor"}, "-topic"},
		{"restart", []string{"-f", "-s", "-foreground", "-logdir", "-pidfile", "-timeout", "-listen", "-admin", "-data", "-v", "-allow-unknown", "-gcfloor", "-tries", "-wait"}, "-item"},
		{"stop", []string{"-f", "-logdir", "-pidfile", "-tries", "-wait"}, "-topic"},
		{"status", []string{"-f", "-data", "-logdir", "-pidfile", "-json"}, "-tries"},
		{"reload", []string{"-f", "-data", "-logdir", "-pidfile"}, "-s"},
		{"stats", []string{"-f", "-item"}, "-group"},
		{"slave-status", []string{"-f", "-data", "-json"}, "-item"},
		{"promote", []string{"-f", "-data", "-force", "-json", "-wait"}, "-topic"},
		{"switchover", []string{"-f", "-data", "-follow", "-to", "-json"}, "-force"},
		{"unreplicated", []string{"-f", "-data", "-publish", "-brokers"}, "-to"},
		{"close-partitions", []string{"-f", "-data", "-topic", "-start", "-end"}, "-offset"},
		{"open-partitions", []string{"-f", "-data", "-topic", "-start", "-end"}, "-foreground"},
		{"move-partitions", []string{"-f", "-topic", "-start", "-end", "-offset", "-data", "-logdir", "-pidfile"}, "-group"},
		{"delete-partitions", []string{"-f", "-topic", "-start", "-end", "-data", "-logdir", "-pidfile"}, "-offset"},
		{"query", []string{"-f", "-group", "-topic"}, "-start"},
		{"check", []string{"-f", "-s", "-allow-unknown"}, "-topic"},
		{"role", []string{"-f", "-clear", "-data", "-logdir", "-pidfile"}, "-to"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, stdout, _ := cli(t, tc.cmd, "-h")
			if code != 0 || !strings.Contains(stdout, "usage: metaq-server "+tc.cmd+" ") {
				t.Fatalf("-h: exit %d, stdout:\n%s", code, stdout)
			}
			listed := map[string]bool{}
			for _, line := range strings.Split(stdout, "\n") {
				if f, ok := strings.CutPrefix(line, "  -"); ok {
					listed["-"+strings.Fields(f)[0]] = true
				}
			}
			for _, f := range tc.has {
				if !listed[f] {
					t.Errorf("-h does not list %s:\n%s", f, stdout)
				}
			}
			if len(listed) != len(tc.has) {
				t.Errorf("-h lists %d flags, want %d (%v):\n%s", len(listed), len(tc.has), tc.has, stdout)
			}
			code, _, stderr := cli(t, tc.cmd, tc.foreign, "1")
			if code != 2 || !strings.Contains(stderr, "flag provided but not defined: "+tc.foreign) {
				t.Fatalf("%s accepted or refused wrongly: exit %d, stderr:\n%s", tc.foreign, code, stderr)
			}
		})
	}
}

// TestMetaServerInvocations: the command lines of MetaQ's metaServer.sh
// (mode word first, then flags; -f defaulting to conf/server.ini) still
// parse; a missing server.ini is reported, not a usage error.
func TestMetaServerInvocations(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"check"},
		{"check", "-f", filepath.Join(dir, "server.ini"), "-s", filepath.Join(dir, "async_slave.properties")},
		{"stats", "-item", "slave", "-f", filepath.Join(dir, "server.ini")},
		{"query", "-f", filepath.Join(dir, "server.ini"), "-group", "g", "-topic", "t"},
		{"slave-status"},
	} {
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "server.ini") {
			t.Errorf("%v: %v, stderr:\n%s", args, err, stderr.String())
		}
	}
}

// TestUnknownKeysRefused: a misspelt key or section stops check and start
// (MetaQ stops at an unknown key too; a typo must not silently drop a
// setting), with the "did you mean"; -allow-unknown carries on.
func TestUnknownKeysRefused(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\nnumPartitions=1\nminSyncSite=1\n\n[replicaton]\nstuckAfterMs=1000\n")
	code, _, errOut := cli(t, "check", "-f", s.ini)
	if code == 0 {
		t.Fatal("check of a file with unknown keys exited 0")
	}
	for _, want := range []string{`minSyncSite: unknown key`, `did you mean "minSyncSites"`, `[replicaton]`, `did you mean [replication]`, "-allow-unknown"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check error lacks %q:\n%s", want, errOut)
		}
	}
	if code, _, errOut := cli(t, "check", "-allow-unknown", "-f", s.ini); code != 0 {
		t.Errorf("check -allow-unknown: exit %d %s", code, errOut)
	}
	code, out, errOut := cli(t, "start", "-f", s.ini)
	if code == 0 {
		t.Cleanup(func() { cli(t, "stop", "-f", s.ini) })
		t.Fatalf("start with unknown keys exited 0: %s", out)
	}
	if !strings.Contains(errOut, `did you mean "minSyncSites"`) {
		t.Errorf("start error lacks the hint:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(s.logDir, ".run.pid")); err == nil {
		t.Error("a refused start left a pid file")
	}
	// In the foreground the bundle itself refuses.
	code, _, errOut = cli(t, "start", "-foreground", "-admin", "off", "-f", s.ini)
	if code == 0 || !strings.Contains(errOut, `did you mean [replication]`) {
		t.Errorf("foreground start: exit %d\n%s", code, errOut)
	}
	code, out, errOut = cli(t, "start", "-allow-unknown", "-f", s.ini)
	if code != 0 {
		t.Fatalf("start -allow-unknown: exit %d\n%s%s", code, out, errOut)
	}
	pid := s.pid(t)
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if code, out, errOut := cli(t, "stop", "-f", s.ini); code != 0 {
		t.Errorf("stop: exit %d %s%s", code, out, errOut)
	}
}

// TestStatusFindsServerStartedElsewhere: a server started with its own
// -logdir is found by `status` without it (through the admin endpoint the
// configuration names), and a stopped one is still "not running".
func TestStatusFindsServerStartedElsewhere(t *testing.T) {
	s := newServer(t, "", "[topic=orders]\nnumPartitions=1\n")
	other := filepath.Join(t.TempDir(), "elsewhere")
	code, out, errOut := cli(t, "start", "-f", s.ini, "-logdir", other)
	if code != 0 {
		t.Fatalf("start: exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(filepath.Join(other, ".run.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if code, out, errOut := cli(t, "status", "-f", s.ini); code != 0 || !strings.Contains(out, fmt.Sprintf("running (pid %d)", pid)) {
		t.Fatalf("status without -logdir: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "stop", "-f", s.ini, "-logdir", other); code != 0 {
		t.Fatalf("stop: exit %d %s %s", code, out, errOut)
	}
	if code, out, _ := cli(t, "status", "-f", s.ini); code != 1 || !strings.Contains(out, "not running") {
		t.Fatalf("status of the stopped server: exit %d %s", code, out)
	}
}
