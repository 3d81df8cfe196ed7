//go:build !linux

package main

import "os/exec"

// nsCommand is meaningful on Linux only; netnsUsable keeps the demo in
// process elsewhere.
func nsCommand(ns string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
}
