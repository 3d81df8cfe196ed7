package ctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/internal/atomicfile"
)

// ErrNotRunning is returned when no live process is behind the pid file.
var ErrNotRunning = errors.New("ctl: server is not running")

// ReadPID returns the pid in the pid file if that process is alive.
func ReadPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, ErrNotRunning
	}
	if err != nil {
		return 0, fmt.Errorf("ctl: read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("ctl: pid file %s holds %q", path, data)
	}
	if !alive(pid) {
		return pid, ErrNotRunning
	}
	return pid, nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// WritePID writes our pid (internal/atomicfile, so a reader never sees
// half a number) and returns a function that removes it if it still holds our pid.
func WritePID(path string) (func(), error) {
	if pid, err := ReadPID(path); err == nil && pid != os.Getpid() {
		return nil, fmt.Errorf("ctl: already running with pid %d (%s)", pid, path)
	}
	if err := os.MkdirAll(dirOf(path), 0o755); err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	if err := atomicfile.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("ctl: write pid file: %w", err)
	}
	return func() {
		if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == strconv.Itoa(os.Getpid()) {
			os.Remove(path)
		}
	}, nil
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "."
}

// ReadyFDEnv names the environment variable through which Daemonize tells
// the child the descriptor to report readiness on (see NotifyReady).
const ReadyFDEnv = "METAQ_READY_FD"

// NotifyReady tells the starting `metaq-server start` that this process is
// up: it writes to the descriptor named by ReadyFDEnv and closes it. Without
// that variable (a foreground start) it does nothing.
func NotifyReady() error {
	v := os.Getenv(ReadyFDEnv)
	if v == "" {
		return nil
	}
	os.Unsetenv(ReadyFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fmt.Errorf("ctl: bad %s=%q", ReadyFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "ready")
	defer f.Close()
	if _, err := f.WriteString("ready\n"); err != nil {
		return fmt.Errorf("ctl: report readiness: %w", err)
	}
	return nil
}

// Daemonize starts this executable again with args (which must make it run
// in the foreground), detached in its own session, with stdout and stderr
// appended to the log file. It then waits until the child reports that its
// bundle is up (NotifyReady), or exits, or timeout passes. Readiness comes
// from the child itself, not from probing a port another process may hold.
func Daemonize(files Files, args []string, timeout time.Duration) (int, error) {
	if pid, err := ReadPID(files.PID); err == nil {
		return pid, fmt.Errorf("ctl: already running with pid %d", pid)
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("ctl: %w", err)
	}
	if err := os.MkdirAll(files.Dir, 0o755); err != nil {
		return 0, fmt.Errorf("ctl: %w", err)
	}
	logf, err := os.OpenFile(files.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("ctl: open log: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, fmt.Errorf("ctl: %w", err)
	}
	defer devnull.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("ctl: %w", err)
	}
	defer readyR.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.ExtraFiles = []*os.File{readyW} // fd 3 in the child
	cmd.Env = append(os.Environ(), ReadyFDEnv+"=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close() // the child holds the only write end now
	if err != nil {
		return 0, fmt.Errorf("ctl: start %s: %w", exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ready := make(chan bool, 1)
	go func() {
		// "ready" arrives when the bundle is up; EOF without it means the
		// child closed the pipe by exiting. Either way this goroutine ends,
		// at the latest when readyR is closed on return.
		buf := make([]byte, 16)
		n, _ := io.ReadFull(readyR, buf[:6])
		ready <- string(buf[:n]) == "ready\n"
	}()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case ok := <-ready:
			if ok {
				// The child keeps running in its own session after we exit.
				return cmd.Process.Pid, nil
			}
			ready = nil // closed without a word: wait for the exit status
		case err := <-exited:
			tail := logTail(files.Log, start)
			return 0, fmt.Errorf("ctl: server exited during start-up (%v)%s\nlog %s:\n%s", err, lastError(tail), files.Log, tail)
		case <-deadline.C:
			return cmd.Process.Pid, fmt.Errorf("ctl: server pid %d not ready after %v; see %s", cmd.Process.Pid, timeout, files.Log)
		}
	}
}

// lastError returns ": <message>" of the last error the log tail holds.
func lastError(tail string) string {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if strings.HasPrefix(l, "metaq-server ") || strings.Contains(l, "level=ERROR") {
			return ": " + strings.TrimSpace(l)
		}
	}
	return ""
}

func logTail(path string, from int64) string {
	data, err := os.ReadFile(path)
	if err != nil || from > int64(len(data)) {
		return ""
	}
	data = data[from:]
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(bytes.TrimSpace(data))
}

// Stop sends SIGTERM once to the server in the pid file and waits for it to
// exit, up to tries times wait; a server still alive then gets SIGKILL (as
// metaServer.sh stop does after 5 tries). It returns ErrNotRunning when
// nothing runs.
func Stop(ctx context.Context, pidFile string, tries int, wait time.Duration, logf func(string, ...any)) error {
	pid, err := ReadPID(pidFile)
	if err != nil {
		if errors.Is(err, ErrNotRunning) && pid != 0 {
			os.Remove(pidFile) // stale
		}
		return err
	}
	// One SIGTERM, then wait: the server's clean stop (unregistering from
	// ZooKeeper takes up to zk.zkSyncTimeMs, draining replication more) must
	// not be cut short by a second signal. SIGKILL only after tries*wait.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("ctl: signal %d: %w", pid, err)
	}
	logf("stopping metaq-server (pid %d)", pid)
	grace := time.Duration(tries) * wait
	start := time.Now()
	said := false
	for time.Since(start) < grace {
		if !alive(pid) {
			os.Remove(pidFile)
			return nil
		}
		if !said && time.Since(start) >= wait {
			logf("metaq-server (pid %d) is stopping cleanly; waiting up to %v", pid, grace)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	logf("metaq-server (pid %d) did not stop within %v, killing it", pid, grace)
	syscall.Kill(pid, syscall.SIGKILL)
	for range 50 {
		if !alive(pid) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(pidFile)
	return nil
}

// Signal sends sig to the server in the pid file.
func Signal(pidFile string, sig syscall.Signal) (int, error) {
	pid, err := ReadPID(pidFile)
	if err != nil {
		return pid, err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return pid, fmt.Errorf("ctl: signal %d: %w", pid, err)
	}
	return pid, nil
}
