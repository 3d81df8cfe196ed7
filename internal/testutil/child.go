package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StartChild runs the test function named test of this test binary in a
// child process, with env (NAME=value) added to its environment and its
// stderr on ours, and waits up to wait for the child to print a line
// "ADDR rest" on stdout: it returns the command and rest. The child is
// killed and waited for when the test ends.
func StartChild(t testing.TB, test, env string, wait time.Duration) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1)
	// Reads until the child's stdout closes (it is killed at the latest
	// when the test ends); only the first ADDR line is kept.
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				select {
				case lines <- a:
				default:
				}
			}
		}
	}()
	select {
	case a := <-lines:
		return cmd, a
	case <-time.After(wait):
		t.Fatalf("child %s did not start within %v", test, wait)
	}
	return nil, ""
}
