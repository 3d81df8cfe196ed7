package config

import (
	"fmt"
	"strings"
)

// Error is one bad value in a configuration file: start-up must stop. It
// names the file, the section, the key, the value as written and what was
// expected, so an operator can fix the file without reading the code.
type Error struct {
	File     string // path or name of the file
	Section  string // section name without brackets ("system", "topic=test"); "" for a .properties file
	Key      string // "" when a whole section is missing or wrong
	Value    string // the value as written ("" when missing)
	Expected string // what would have been accepted
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Section != "" {
		b.WriteString("[" + e.Section + "]")
		if e.Key != "" {
			b.WriteString(" ")
		}
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		fmt.Fprintf(&b, " = %q", e.Value)
	}
	b.WriteString(": expected ")
	b.WriteString(e.Expected)
	return b.String()
}

// ErrorList holds every problem found in one load, in file order, so an
// operator sees all of them at once instead of fixing one per restart.
// errors.As(err, **Error) finds the first one; Unwrap gives all of them.
type ErrorList []*Error

func (l ErrorList) Error() string {
	if len(l) == 1 {
		return l[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d errors:", len(l))
	for _, e := range l {
		b.WriteString("\n  ")
		b.WriteString(strings.TrimPrefix(e.Error(), "config: "))
	}
	return b.String()
}

// Unwrap returns the individual errors (for errors.Is/As).
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// problems collects errors and warnings while a file is being checked.
type problems struct {
	errs     ErrorList
	warnings []Warning
}

func (p *problems) errorf(file, section, key, value, expected string, args ...any) {
	if len(args) > 0 {
		expected = fmt.Sprintf(expected, args...)
	}
	if IsSecretKey(section, key) && value != "" {
		value = hiddenValue // errors end up in logs
	}
	p.errs = append(p.errs, &Error{File: file, Section: section, Key: key, Value: value, Expected: expected})
}

func (p *problems) warnf(file, section, key, format string, args ...any) {
	p.warnings = append(p.warnings, Warning{File: file, Section: section, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return p.errs
}
