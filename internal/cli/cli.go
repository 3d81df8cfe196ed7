// Package cli holds the command-line conventions every command under cmd/
// follows: help that is asked for goes to stdout with exit status 0, a bad
// flag or a word the command does not take is refused with exit status 2,
// and each command and subcommand lists only the flags it takes (each has
// its own flag.FlagSet).
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// UsageError is a command line the command refuses: exit status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Parse parses args into fs. When help is asked for (-h, -help, --help) it
// writes the usage to stdout and returns flag.ErrHelp. On a bad flag it
// writes the error and the usage to stderr and returns a UsageError, as it
// does for words left after the flags when positional is false. A Usage
// function set on fs must write to fs.Output().
func Parse(fs *flag.FlagSet, args []string, positional bool, stdout, stderr io.Writer) error {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		stdout.Write(buf.Bytes())
		return flag.ErrHelp
	case err != nil:
		stderr.Write(buf.Bytes())
		return UsageError{err}
	case !positional && fs.NArg() > 0:
		err := fmt.Errorf("%s: unexpected argument %q (it takes flags only; -h lists them)", fs.Name(), strings.Join(fs.Args(), " "))
		fmt.Fprintln(stderr, err)
		return UsageError{err}
	}
	return nil
}

// IsHelp reports whether word asks for help in place of a command.
func IsHelp(word string) bool {
	switch word {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// ExitCode is the exit status for the error a command returned: 0 for
// none or for help, 2 for a UsageError, else 1.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(UsageError)):
		return 2
	}
	return 1
}
