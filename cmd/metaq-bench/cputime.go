package main

import "time"

// cpuTime is a process's CPU time, user and system apart: on a shared
// 2-core machine where that time goes (the process's own code, or the
// kernel's socket and file work) says more than the total.
type cpuTime struct{ user, sys time.Duration }

func (c cpuTime) total() time.Duration { return c.user + c.sys }

func (c cpuTime) sub(o cpuTime) cpuTime { return cpuTime{user: c.user - o.user, sys: c.sys - o.sys} }
