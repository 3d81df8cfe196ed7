package main

import (
	"os"
	"os/exec"
	"time"
)

// child is a peer broker run as a child process.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and been reaped
}

// startChild starts cmd and reaps it in the background.
func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(c.exited) }()
	return c, nil
}

// stop sends sig, waits up to grace for the process to exit (a broker's own
// clean shutdown), then kills it. It returns once the process is gone.
func (c *child) stop(sig os.Signal, grace time.Duration) {
	c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.exited
	}
}
