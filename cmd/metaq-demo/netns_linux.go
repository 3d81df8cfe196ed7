package main

import (
	"os/exec"
	"syscall"
)

// nsCommand is argv run inside namespace ns, in its own process group and
// killed if the demo dies (Pdeathsig survives the exec of ip and of argv).
func nsCommand(ns string, argv ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}
