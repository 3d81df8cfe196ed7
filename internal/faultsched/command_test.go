package faultsched

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCommandKeepsTheCauseOfAFailure: an operator command that fails
// prints its cause, and the nemesis must record it. Seed 943053 recorded
// `promote -force gz` as "exit status 1" with no output at all: the
// command had printed its cause (gz's admin endpoint refused the
// connection), but the harness read the output through a pipe, and a
// harness starved of CPU let WaitDelay close the pipe before its copying
// goroutine ran. The output now goes to a file. This test does not starve
// the harness (that cannot be forced): it checks that the output of a
// failed command, stdout and stderr, is all there, also when the command
// leaves a child that holds its output open.
func TestCommandKeepsTheCauseOfAFailure(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"args: $*\"\necho 'metaq-server promote: ctl: admin endpoint: connection refused' >&2\nsleep 3 </dev/null &\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "metaq-server"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{L: &Layout{Dir: t.TempDir()}, Bin: bin}
	out, err := c.Command(context.Background(), "gz", 20*time.Second, "promote", "-force")
	if err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err %v, want exit status 1", err)
	}
	for _, want := range []string{"args: promote -force -f ", "connection refused"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output %q lacks %q", out, want)
		}
	}
}
