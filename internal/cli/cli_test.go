package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		positional bool
		code       int
		stdout     string // text stdout must hold ("" = empty)
		stderr     string
	}{
		{"ok", []string{"-n", "3"}, false, 0, "", ""},
		{"-h", []string{"-h"}, false, 0, "-n int", ""},
		{"--help", []string{"--help"}, false, 0, "-n int", ""},
		{"bad flag", []string{"-x"}, false, 2, "", "flag provided but not defined: -x"},
		{"word refused", []string{"help"}, false, 2, "", `unexpected argument "help"`},
		{"word taken", []string{"-n", "1", "word"}, true, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
			fs.Int("n", 0, "a number")
			var out, errb bytes.Buffer
			err := Parse(fs, tc.args, tc.positional, &out, &errb)
			if got := ExitCode(err); got != tc.code {
				t.Errorf("exit %d, want %d (err %v)", got, tc.code, err)
			}
			if tc.stdout == "" && out.Len() > 0 || !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
			if tc.stderr == "" && errb.Len() > 0 || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr %q, want %q", errb.String(), tc.stderr)
			}
		})
	}
	if ExitCode(errors.New("x")) != 1 || ExitCode(nil) != 0 {
		t.Error("ExitCode")
	}
}
