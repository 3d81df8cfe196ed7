//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// nsCommand and inNetns exist on Linux only; netnsUsable keeps the demo in
// process elsewhere.
func nsCommand(ns string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
}

func inNetns(string, func() error) error { return errors.New("demo: network namespaces need Linux") }
