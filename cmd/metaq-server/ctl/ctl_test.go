package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"metaq/broker/config"
)

func TestPIDFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", ".run.pid")
	if _, err := ReadPID(path); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("ReadPID without a file: %v", err)
	}
	remove, err := WritePID(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := ReadPID(path); err != nil || pid != os.Getpid() {
		t.Fatalf("ReadPID = %d %v", pid, err)
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("pid file not removed")
	}

	// A pid file of a live other process blocks a second server.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	if _, err := WritePID(path); err == nil {
		t.Fatal("WritePID succeeded while another live process holds the file")
	}
	cmd.Process.Kill()
	cmd.Wait()
	// Stale: the process is gone.
	if _, err := ReadPID(path); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("ReadPID of a dead process: %v", err)
	}
	if _, err := WritePID(path); err != nil {
		t.Fatalf("WritePID over a stale file: %v", err)
	}
}

// TestStopEscalates: a process that ignores SIGTERM is killed after the tries.
func TestStopEscalates(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".run.pid")
	cmd := exec.Command("sh", "-c", `trap "" TERM; while :; do sleep 0.1; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	var lines int
	err := Stop(context.Background(), path, 2, 200*time.Millisecond, func(string, ...any) { lines++ })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("process ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("process still running after Stop")
	}
	if lines != 3 { // two tries and the kill
		t.Errorf("Stop logged %d lines, want 3", lines)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Error("pid file left after Stop")
	}
	if err := Stop(context.Background(), path, 2, 10*time.Millisecond, func(string, ...any) {}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Stop with nothing running: %v", err)
	}
}

// TestStopQuiet: a server that stops at the first SIGTERM gets one line,
// with no try count.
func TestStopQuiet(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".run.pid")
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	var lines []string
	if err := Stop(context.Background(), path, 5, 5*time.Second, func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || strings.Contains(lines[0], "try") || strings.Contains(lines[0], "/5") {
		t.Errorf("a normal stop logged %q", lines)
	}
}

func TestDefaultFiles(t *testing.T) {
	t.Setenv("METAQ_LOG_DIR", "")
	f := DefaultFiles("/opt/metaq/conf/server.ini", "", "")
	if f.PID != "/opt/metaq/logs/.run.pid" || f.Log != "/opt/metaq/logs/metaServer.log" {
		t.Errorf("DefaultFiles = %+v", f)
	}
	if f := DefaultFiles("x.ini", "/var/log/mq", "/run/mq.pid"); f.PID != "/run/mq.pid" || f.Log != "/var/log/mq/x.log" {
		t.Errorf("DefaultFiles with overrides = %+v", f)
	}
	// Brokers whose files share a folder, or whose folders are siblings,
	// never share a pid or log file.
	for _, c := range []struct{ ini, pid, log string }{
		{"/etc/metaq/bj.ini", "/etc/logs/.bj.run.pid", "/etc/logs/bj.log"},
		{"/etc/metaq/bj-slave.ini", "/etc/logs/.bj-slave.run.pid", "/etc/logs/bj-slave.log"},
		{"/etc/metaq/bj/server.ini", "/etc/metaq/logs/.bj.run.pid", "/etc/metaq/logs/bj.log"},
		{"/etc/metaq/hf/server.ini", "/etc/metaq/logs/.hf.run.pid", "/etc/metaq/logs/hf.log"},
	} {
		if f := DefaultFiles(c.ini, "", ""); f.PID != c.pid || f.Log != c.log {
			t.Errorf("DefaultFiles(%s) = %+v, want %s and %s", c.ini, f, c.pid, c.log)
		}
	}
}

func TestWholeRecords(t *testing.T) {
	rec := func(n int) []byte {
		b := make([]byte, 20+n)
		b[3] = byte(n)
		return b
	}
	buf := append(append(rec(5), rec(0)...), rec(9)[:12]...)
	if got := wholeRecords(buf); got != 45 {
		t.Errorf("wholeRecords = %d, want 45", got)
	}
}

// TestQueryWithZooKeeperOff: query reads offsets from ZooKeeper; with
// zk.zkEnable=false it says so at once instead of waiting out the
// connection timeout for a ZooKeeper at the default address.
func TestQueryWithZooKeeperOff(t *testing.T) {
	cfg := &config.Server{File: "/etc/metaq/server.ini"}
	cfg.ZooKeeper.Enable = false
	cfg.ZooKeeper.Connect = config.DefaultZkConnect
	cfg.ZooKeeper.ConnectionTimeout = time.Second // the code before waited it out, then failed otherwise
	err := Query(context.Background(), cfg, "g", "", io.Discard)
	if err == nil || !strings.Contains(err.Error(), "zk.zkEnable=false") || !strings.Contains(err.Error(), cfg.File) {
		t.Fatalf("Query with ZooKeeper off: %v, want an error naming zk.zkEnable=false and the file", err)
	}
}
