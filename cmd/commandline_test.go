// Package cmd holds the commands; this test checks the command-line
// conventions they share (internal/cli) on the built binaries.
package cmd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCommandLine runs every binary and subcommand with -h and --help
// (exit 0, the usage on stdout, only the command's own flags listed) and
// with words they do not take (exit 2, nothing started).
func TestCommandLine(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./metaq", "./metaq-server", "./configsync", "./metaq-bench", "./metaq-demo", "./metaq-soak")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, args[0]), args[1:]...)
		cmd.Dir = t.TempDir() // no conf/server.ini here: nothing to start by accident
		cmd.Env = append(os.Environ(), "METAQ_ZK=127.0.0.1:1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("%v ran for 20 s: it started something", args)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errb.String()
	}

	// help: the command line, flags it must list, flags it must not.
	helps := []struct {
		args     []string
		has, not []string
	}{
		{[]string{"metaq"}, []string{"-zk", "produce", "lag"}, nil},
		{[]string{"metaq", "produce"}, []string{"-topic", "-n", "-zk"}, []string{"-site", "-group", "-addr"}},
		{[]string{"metaq", "consume"}, []string{"-topic", "-group", "-site", "-prefer"}, []string{"-addr", "-selector"}},
		{[]string{"metaq", "fetch"}, []string{"-topic", "-partition", "-site"}, []string{"-group"}},
		{[]string{"metaq", "find"}, []string{"-topic", "-id"}, []string{"-site"}},
		{[]string{"metaq", "topics"}, []string{"-zk"}, []string{"-topic", "-site"}},
		{[]string{"metaq", "partitions"}, []string{"-topic"}, []string{"-site"}},
		{[]string{"metaq", "offsets"}, []string{"-group", "-reset"}, []string{"-site"}},
		{[]string{"metaq", "lag"}, []string{"-addr", "-json", "-token"}, []string{"-zk", "-topic"}},
		{[]string{"metaq-server"}, []string{"start", "switchover"}, nil},
		{[]string{"metaq-server", "start"}, []string{"-f", "-s", "-allow-unknown"}, []string{"-topic", "-tries"}},
		{[]string{"metaq-server", "stop"}, []string{"-f", "-tries"}, []string{"-s"}},
		{[]string{"metaq-server", "status"}, []string{"-f"}, []string{"-tries"}},
		{[]string{"metaq-server", "query"}, []string{"-group", "-topic"}, []string{"-start"}},
		{[]string{"metaq-server", "switchover"}, []string{"-to"}, []string{"-force"}},
		{[]string{"configsync"}, []string{"push", "check", "keygen"}, nil},
		{[]string{"configsync", "keygen"}, []string{"-o"}, []string{"-nats", "-f", "-key"}},
		{[]string{"configsync", "check"}, []string{"-f", "-allow-unknown"}, []string{"-nats", "-key"}},
		{[]string{"configsync", "push"}, []string{"-f", "-nats", "-key", "-dry-run", "-allow-unknown", "-allow-topic-removal"}, []string{"-to", "-json", "-o"}},
		{[]string{"configsync", "rollback"}, []string{"-to", "-key", "-dry-run"}, []string{"-json", "-o", "-allow-unknown"}},
		{[]string{"configsync", "status"}, []string{"-json", "-nats"}, []string{"-key", "-sites", "-o"}},
		{[]string{"configsync", "diff"}, []string{"-f", "-nats"}, []string{"-key", "-json"}},
		{[]string{"metaq-bench"}, []string{"-addr", "-duration"}, nil},
		{[]string{"metaq-demo"}, []string{"-once", "-dir"}, nil},
		{[]string{"metaq-soak"}, []string{"-seed", "-duration", "-schedule", "-kinds", "-report"}, nil},
	}
	flagNames := map[string]bool{} // every flag some help lists
	for _, h := range helps {
		for _, flag := range []string{"-h", "--help"} {
			args := append(append([]string{}, h.args...), flag)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut := run(t, args...)
				for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(out, -1) {
					flagNames[m[1]] = true
				}
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
				if !strings.Contains(strings.ToLower(out), "usage") {
					t.Errorf("no usage on stdout:\n%s\nstderr:\n%s", out, errOut)
				}
				for _, f := range h.has {
					if !listed(out, f) {
						t.Errorf("help does not list %s:\n%s", f, out)
					}
				}
				for _, f := range h.not {
					if listed(out, f) {
						t.Errorf("help lists %s, which this command does not take:\n%s", f, out)
					}
				}
			})
		}
	}
	if len(flagNames) < 20 {
		t.Fatalf("only %d flag names found in the helps", len(flagNames))
	}
	docs, _ := filepath.Glob("*/README.md")
	checkDocsSpelling(t, flagNames, append(docs, "../README.md", "../deploy/README.md")...)

	// The word help in place of a command: help, not the default action.
	for _, b := range []string{"metaq", "metaq-server", "configsync", "metaq-bench", "metaq-demo", "metaq-soak"} {
		t.Run(b+" help", func(t *testing.T) {
			code, out, errOut := run(t, b, "help")
			if code != 0 || !strings.Contains(strings.ToLower(out), "usage") {
				t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
	// Words a command does not take: exit 2, named.
	for _, args := range [][]string{
		{"metaq-demo", "tour"},
		{"metaq-demo", "-once", "now"},
		{"metaq-bench", "run"},
		{"metaq-soak", "now"},
		{"metaq-soak", "-kinds", "nosuch"},
		{"metaq-bench", "-duration", "1s", "extra"},
		{"metaq", "nosuchcommand"},
		{"metaq", "topics", "extra"},
		{"metaq", "produce", "-topic", "t", "extra"},
		{"metaq", "lag", "extra"},
		{"metaq-server", "status", "extra"},
		{"metaq-server", "start", "slaev"},
		{"metaq-server", "nosuchcommand"},
		{"configsync", "status", "extra"},
		{"configsync", "keygen", "-o", "k", "extra"},
		{"configsync", "nosuchcommand"},
		{"metaq", "consume", "-nosuchflag"},
		{"metaq-server", "start", "-nosuchflag"},
		{"configsync", "push", "-nosuchflag"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := run(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			last := args[len(args)-1]
			if !strings.Contains(errOut, last) {
				t.Errorf("stderr does not name %q:\n%s", last, errOut)
			}
			// Said once: the usage lists no words given, so a second
			// mention is the same error printed twice.
			if n := strings.Count(errOut, last); n > 1 {
				t.Errorf("stderr names %q %d times:\n%s", last, n, errOut)
			}
		})
	}
}

// checkDocsSpelling fails for a document that spells one of the commands'
// flags with two dashes: help prints -name, and so do the docs.
func checkDocsSpelling(t *testing.T, names map[string]bool, docs ...string) {
	t.Helper()
	re := regexp.MustCompile(`(^|[^a-zA-Z0-9-])--([a-z][a-z0-9-]*)\b`)
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				if names[m[2]] {
					t.Errorf("%s:%d spells -%s as --%s (help prints -%s)", doc, i+1, m[2], m[2], m[2])
				}
			}
		}
	}
}

// listed reports whether the usage text lists flag (as PrintDefaults does,
// "  -name ...") or, for a word without a dash, names it.
func listed(usage, flag string) bool {
	if !strings.HasPrefix(flag, "-") {
		return strings.Contains(usage, flag)
	}
	for _, line := range strings.Split(usage, "\n") {
		if f, ok := strings.CutPrefix(strings.TrimLeft(line, " \t"), flag); ok && (f == "" || f[0] == ' ' || f[0] == '\t') {
			return true
		}
	}
	return false
}
