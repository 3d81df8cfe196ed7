package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSIGTERMWhileWaitingForZooKeeper: `metaq-server start -foreground`
// (the systemd unit's command) with its ensemble down waits for it instead
// of exiting, and a SIGTERM meanwhile stops it at once with exit status 0.
// It used to exit 1 with "no ZooKeeper session ... within"
// zk.zkConnectionTimeoutMs, which the fault schedules reported as an
// unexpected exit (internal/faultsched, seed 566489464).
func TestSIGTERMWhileWaitingForZooKeeper(t *testing.T) {
	s := newServer(t, "127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)), "[topic=orders]\nnumPartitions=1\n")
	data, err := os.ReadFile(s.ini)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ini, []byte(strings.Replace(string(data), "zk.zkConnectionTimeoutMs=10000", "zk.zkConnectionTimeoutMs=1000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, done, logPath := s.startForeground(t)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("server exited while its ZooKeeper was down: %v\n%s", err, log)
		default:
		}
		log, _ := os.ReadFile(logPath)
		if !strings.Contains(string(log), "still waiting") {
			return errors.New("no warning that it waits for ZooKeeper yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		log, _ := os.ReadFile(logPath)
		if err != nil {
			t.Fatalf("SIGTERM while waiting for ZooKeeper: %v, want exit status 0\n%s", err, log)
		}
		if !strings.Contains(string(log), "stopped while starting") {
			t.Fatalf("no log of the stop while starting:\n%s", log)
		}
	case <-time.After(20 * time.Second):
		log, _ := os.ReadFile(logPath)
		t.Fatalf("still running 20s after SIGTERM while waiting for ZooKeeper\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(s.logDir, ".run.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pid file left after the stop: %v", err)
	}
}
