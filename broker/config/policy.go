package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDeletePolicy parses MetaQ's deletePolicy value (DeletePolicyFactory):
//
//	delete,<age>              remove segments older than age
//	archive,<age>[,true|false] rename to .arc, or zip when the flag is true
//
// age is an integer with an optional unit: s, m or h; no unit means hours
// (DiscardDeletePolicy.init). Any other policy name is refused, as MetaQ
// refuses it with UnknownDeletePolicyException. MetaQ silently ignores
// fields after the age of a delete policy; so do we, but the returned
// warning says so ("" when there is nothing to say).
func ParseDeletePolicy(text string) (p DeletePolicy, warning string, err error) {
	parts := strings.Split(text, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	p = DeletePolicy{Name: parts[0], Text: text}
	switch p.Name {
	case "delete", "archive":
	default:
		return DeletePolicy{}, "", fmt.Errorf("unknown policy %q: want delete,<age> or archive,<age>[,true|false]", p.Name)
	}
	if len(parts) < 2 || parts[1] == "" {
		return DeletePolicy{}, "", fmt.Errorf("%s needs an age: %s,<n>[s|m|h]", p.Name, p.Name)
	}
	if p.MaxAge, err = parseAge(parts[1]); err != nil {
		return DeletePolicy{}, "", err
	}
	switch {
	case p.Name == "archive" && len(parts) >= 3:
		switch strings.ToLower(parts[2]) {
		case "true":
			p.Compress = true
		case "false":
		default:
			return DeletePolicy{}, "", fmt.Errorf("archive compress flag %q: want true or false", parts[2])
		}
		if len(parts) > 3 {
			warning = fmt.Sprintf("fields after %q are ignored", strings.Join(parts[:3], ","))
		}
	case p.Name == "delete" && len(parts) > 2:
		warning = fmt.Sprintf("fields after %q are ignored", strings.Join(parts[:2], ","))
	}
	return p, warning, nil
}

// parseAge reads "<n>[s|m|h]", hours when there is no unit.
func parseAge(s string) (time.Duration, error) {
	unit := time.Hour
	num := s
	switch s[len(s)-1] {
	case 's':
		unit, num = time.Second, s[:len(s)-1]
	case 'm':
		unit, num = time.Minute, s[:len(s)-1]
	case 'h':
		unit, num = time.Hour, s[:len(s)-1]
	}
	// MetaQ parses the number with Integer.parseInt: a 32-bit int.
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("age %q: want a non-negative integer with an optional unit s, m or h (default hours)", s)
	}
	return time.Duration(n) * unit, nil
}
