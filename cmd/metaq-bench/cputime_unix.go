//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() cpuTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}
	}
	return cpuTime{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
}
