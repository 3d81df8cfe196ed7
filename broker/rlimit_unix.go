//go:build unix

package broker

import "golang.org/x/sys/unix"

// fileLimit returns the process's open-file limit (soft RLIMIT_NOFILE, which
// Go raises to the hard limit at start), or 0 when unknown or unlimited.
func fileLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
