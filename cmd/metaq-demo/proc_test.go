package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoProc is a metaq-demo binary a test started in its own process group,
// with its stdout as a channel of lines.
type demoProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr bytes.Buffer
}

// startDemoProc starts bin with args; at cleanup a process still running
// gets atCleanup and is waited for.
func startDemoProc(t *testing.T, attr *syscall.SysProcAttr, atCleanup os.Signal, bin string, args ...string) *demoProc {
	t.Helper()
	p := &demoProc{cmd: exec.Command(bin, args...), lines: make(chan string, 1000)}
	p.cmd.SysProcAttr = attr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Signal(atCleanup)
			p.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// waitLag reads lines until two periodic lag lines appeared and returns
// every line read.
func (p *demoProc) waitLag(t *testing.T, within time.Duration) []string {
	t.Helper()
	var all []string
	lagLines := 0
	deadline := time.After(within)
	for lagLines < 2 {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("demo exited early:\n%s\n%s", strings.Join(all, "\n"), p.stderr.String())
			}
			all = append(all, l)
			if strings.Contains(l, "  lag meta-slave-group-") {
				lagLines++
			}
		case <-deadline:
			t.Fatalf("no periodic lag lines:\n%s\n%s", strings.Join(all, "\n"), p.stderr.String())
		}
	}
	return all
}

// stop sends sig, requires a clean exit within the given time and returns
// the lines printed meanwhile.
func (p *demoProc) stop(t *testing.T, sig os.Signal, within time.Duration) []string {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var rest []string
	go func() {
		for l := range p.lines {
			rest = append(rest, l)
		}
		done <- p.cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after %v: %v\n%s\n%s", sig, err, strings.Join(rest, "\n"), p.stderr.String())
		}
	case <-time.After(within):
		t.Fatalf("demo still running %v after %v:\n%s", within, sig, strings.Join(rest, "\n"))
	}
	// Nothing of the process group is left.
	if err := syscall.Kill(-p.cmd.Process.Pid, 0); err == nil {
		t.Errorf("process group %d still has members", p.cmd.Process.Pid)
	}
	return rest
}
