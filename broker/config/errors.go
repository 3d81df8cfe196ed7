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

// unknownf records an unknown key or section: a Warning marked Unknown.
func (p *problems) unknownf(file, section, key, format string, args ...any) {
	p.warnings = append(p.warnings, Warning{File: file, Section: section, Key: key, Message: fmt.Sprintf(format, args...), Unknown: true})
}

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return p.errs
}

// UnknownError lists the unknown keys and sections of a load: the commands
// that start a broker or publish a file refuse it unless told to carry on.
type UnknownError struct {
	Warnings []Warning // each marked Unknown, in file order
}

func (e *UnknownError) Error() string {
	var b strings.Builder
	if len(e.Warnings) == 1 {
		b.WriteString("config: unknown key or section (a typo silently loses the setting): ")
		b.WriteString(e.Warnings[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, "config: %d unknown keys or sections (a typo silently loses the setting):", len(e.Warnings))
	for _, w := range e.Warnings {
		b.WriteString("\n  ")
		b.WriteString(w.String())
	}
	return b.String()
}

// CheckUnknown returns an *UnknownError holding the warnings marked Unknown,
// or nil when there are none.
func CheckUnknown(warnings []Warning) error {
	var unknown []Warning
	for _, w := range warnings {
		if w.Unknown {
			unknown = append(unknown, w)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return &UnknownError{Warnings: unknown}
}
