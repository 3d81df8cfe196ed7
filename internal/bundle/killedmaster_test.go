package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// bundleChildEnv, set in a re-executed test binary, makes it run one master
// bundle (the server.ini its value names, listening on the port after a
// space) until it is killed: a master process a test can kill -9, so that
// nothing is closed cleanly (its ZooKeeper session outlives it until the
// session timeout, its store recovers from whatever was on disk).
const bundleChildEnv = "METAQ_BUNDLE_CHILD"

func init() {
	if spec := os.Getenv(bundleChildEnv); spec != "" {
		os.Exit(runBundleChild(spec))
	}
}

func runBundleChild(spec string) int {
	ini, listen, _ := strings.Cut(spec, " ")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := New(Options{ConfigPath: ini, Logger: log, ListenAddr: listen, AdminAddr: "127.0.0.1:0"})
	if err != nil {
		log.Error("child bundle", "err", err)
		return 1
	}
	if err := b.Run(context.Background()); err != nil {
		log.Error("child bundle", "err", err)
		return 1
	}
	return 0
}

// startKillableMaster writes bj's files under dir and runs bj in a child
// process with its replication and gossip on fixed ports, which it returns.
// It waits until bj is registered as master in ZooKeeper.
func startKillableMaster(t *testing.T, dir, shared, zk, zkRoot string) (cmd *exec.Cmd, replAddr, gossipAddr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	replAddr = "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	gossipAddr = "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	overlay := overlayINI(siteSpec{name: "bj", noNATS: true, gossipBind: gossipAddr, extraOverlay: "[replication]\nlisten=" + replAddr + "\n"}, dir, port)
	ini := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(ini, []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site.ini"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "bj.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), bundleChildEnv+"="+ini+" 127.0.0.1:"+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // this test started it
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("bj (child process) log:\n%s", b)
		}
	})
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(logFile)
			t.Fatalf("bj (child process) exited:\n%s", b)
		default:
		}
		// Every component runs (gossip too: a slave site that cannot join
		// its seed at start waits for others to join it).
		if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), `msg="BUNDLE: started"`) {
			return errors.New("bj (child process) has not started yet")
		}
		if _, _, err := zc.Get(context.Background(), zc.Paths().BrokerID(0)+"/master"); err != nil {
			return fmt.Errorf("bj not registered as master: %w", err)
		}
		return nil
	})
	return cmd, replAddr, gossipAddr
}

// TestJavaClientSyncTopicKilledMaster: as TestJavaClientSyncTopicFailover,
// but bj is a process killed with SIGKILL under load: its ZooKeeper session
// (5 s timeout) outlives it, so the Java clients see it registered for a
// while and the promotion waits for its master node to go; when bj
// returns, its store recovered from the kill, it cuts what it held beyond
// the promotion and follows byte for byte.
func TestJavaClientSyncTopicKilledMaster(t *testing.T) {
	javaClasspath(t)
	s := newJavaSitesKillable(t, "jsync", "minSyncSites=1\n")
	s.syncFailover(t, s.killMaster)
}

// newJavaSitesKillable is newJavaSites with bj in a child process.
func newJavaSitesKillable(t *testing.T, topic, topicKeys string) *javaSites {
	t.Helper()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	s := &javaSites{root: t.TempDir(), zk: zk, zkRoot: multiSiteRoot(t, []string{zk}), topic: topic}
	s.shared = sharedINI(zk, s.zkRoot, fmt.Sprintf("[topic=%s]\nnumPartitions=2\n%s", topic, topicKeys), noConfigSync)
	var repl, gossip string
	s.bjProc, repl, gossip = startKillableMaster(t, filepath.Join(s.root, "bj"), s.shared, zk, s.zkRoot)
	seed := []string{gossip}
	toHF, toGZ := wanProxy(t, repl), wanProxy(t, repl)
	s.hf = startSite(t, filepath.Join(s.root, "hf"), s.shared, siteSpec{name: "hf", slave: true, slaveID: 1, masterAddr: toHF.Addr(), join: seed, noNATS: true})
	s.gz = startSite(t, filepath.Join(s.root, "gz"), s.shared, siteSpec{name: "gz", slave: true, slaveID: 2, masterAddr: toGZ.Addr(), join: seed, noNATS: true})
	s.slaveIDs = map[*Bundle]int{s.hf: 1, s.gz: 2}
	s.waitSlavesConnected(t)
	return s
}

// killMaster kills bj's process (SIGKILL), waits until both slave sites
// noticed, and promotes the one that holds more of bj's log; the promotion
// registers once bj's ZooKeeper session has expired.
func (s *javaSites) killMaster(t *testing.T) (*Bundle, time.Time) {
	t.Helper()
	event := time.Now()
	if err := s.bjProc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return s.promoteMostCaughtUp(t, event), event
}

// waitSlavesConnected waits until hf and gz replicate from bj.
func (s *javaSites) waitSlavesConnected(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, b := range []*Bundle{s.hf, s.gz} {
			if !mustComp[*receiverComponent](t, b).Receiver().Status().Connected {
				return errors.New("a slave site is not connected yet")
			}
		}
		return nil
	})
}
