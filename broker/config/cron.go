package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// quartzParser reads the first six Quartz fields. robfig/cron already
// accepts '?' as "no specific value" in the day fields.
var quartzParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Quartz limits years to this range (CronExpression.MAX_YEAR is 2099).
const (
	quartzMinYear = 1970
	quartzMaxYear = 2099
)

// ParseCron parses a Quartz 2.1 cron expression as MetaQ's deleteWhen uses it:
// "sec min hour day-of-month month day-of-week [year]". As in Quartz exactly
// one of day-of-month and day-of-week must be '?', and day-of-week numbers
// run 1 (SUN) to 7 (SAT). The special forms L, W, # and C are not supported
// and give an error; everything else MetaQ's Quartz accepts is.
func ParseCron(text string) (Cron, error) {
	fields := strings.Fields(strings.ToUpper(text))
	if len(fields) != 6 && len(fields) != 7 {
		return Cron{}, fmt.Errorf("%d fields, want 6 or 7 (sec min hour day-of-month month day-of-week [year])", len(fields))
	}
	for i, f := range fields {
		if strings.ContainsAny(f, "LW#C") && !isDowName(i, f) && !isMonthName(i, f) {
			return Cron{}, fmt.Errorf("field %d %q: the Quartz forms L, W, # and C are not supported", i+1, f)
		}
		if strings.Contains(f, "?") && i != 3 && i != 5 {
			return Cron{}, fmt.Errorf("field %d %q: '?' is only allowed in day-of-month or day-of-week", i+1, f)
		}
	}
	domAny, dowAny := fields[3] == "?", fields[5] == "?"
	if domAny == dowAny {
		return Cron{}, fmt.Errorf("exactly one of day-of-month (%q) and day-of-week (%q) must be '?', as Quartz requires", fields[3], fields[5])
	}
	dow, err := quartzDow(fields[5])
	if err != nil {
		return Cron{}, fmt.Errorf("day-of-week %q: %w", fields[5], err)
	}
	six := strings.Join(append(append([]string{}, fields[:5]...), dow), " ")
	sched, err := quartzParser.Parse(six)
	if err != nil {
		return Cron{}, err
	}
	var years map[int]bool
	if len(fields) == 7 && fields[6] != "*" {
		if years, err = parseYears(fields[6]); err != nil {
			return Cron{}, fmt.Errorf("year %q: %w", fields[6], err)
		}
	}
	next := func(t time.Time) time.Time { return sched.Next(t) }
	if years != nil {
		next = func(t time.Time) time.Time {
			// robfig/cron has no year field: step through its activations and
			// jump to the next allowed year whenever one falls outside.
			for range quartzMaxYear - quartzMinYear + 2 {
				n := sched.Next(t)
				if n.IsZero() || n.Year() > quartzMaxYear {
					return time.Time{}
				}
				if years[n.Year()] {
					return n
				}
				y := n.Year() + 1
				for y <= quartzMaxYear && !years[y] {
					y++
				}
				if y > quartzMaxYear {
					return time.Time{}
				}
				t = time.Date(y, 1, 1, 0, 0, 0, 0, n.Location()).Add(-time.Second)
			}
			return time.Time{}
		}
	}
	return Cron{Text: text, Next: next}, nil
}

var dowNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}

// isDowName and isMonthName keep names such as WED, SAT or JUL from being
// mistaken for the unsupported W, L or C forms.
func isDowName(i int, f string) bool   { return i == 5 && onlyNames(f, dowNames) }
func isMonthName(i int, f string) bool { return i == 4 && onlyNames(f, monthNames) }

func onlyNames(f string, names []string) bool {
	rest := f
	for _, n := range names {
		rest = strings.ReplaceAll(rest, n, "")
	}
	return !strings.ContainsAny(rest, "LWC#")
}

// quartzDow turns Quartz day-of-week numbers (1=SUN..7=SAT) into robfig's
// (0=SUN..6=SAT). Names are the same in both.
func quartzDow(f string) (string, error) {
	if f == "?" || f == "*" {
		return f, nil
	}
	items := strings.Split(f, ",")
	for i, item := range items {
		rng, step, hasStep := strings.Cut(item, "/")
		if hasStep {
			if _, err := strconv.Atoi(step); err != nil {
				return "", fmt.Errorf("bad step %q", step)
			}
		}
		if rng != "*" && rng != "?" {
			lo, hi, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = dowNumber(lo); err != nil {
				return "", err
			}
			rng = lo
			if isRange {
				if hi, err = dowNumber(hi); err != nil {
					return "", err
				}
				rng += "-" + hi
			}
		}
		if hasStep {
			rng += "/" + step
		}
		items[i] = rng
	}
	return strings.Join(items, ","), nil
}

func dowNumber(s string) (string, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		for _, name := range dowNames {
			if s == name {
				return s, nil
			}
		}
		return "", fmt.Errorf("%q is not a day of the week (1-7 or SUN-SAT)", s)
	}
	if n < 1 || n > 7 {
		return "", fmt.Errorf("%d is outside 1-7 (1=SUN)", n)
	}
	return strconv.Itoa(n - 1), nil
}

// parseYears reads the optional seventh field: a list of years, ranges
// and a/step forms within 1970-2099.
func parseYears(f string) (map[int]bool, error) {
	years := map[int]bool{}
	for item := range strings.SplitSeq(f, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			var err error
			if step, err = strconv.Atoi(stepText); err != nil || step < 1 {
				return nil, fmt.Errorf("bad step %q", stepText)
			}
		}
		lo, hi := quartzMinYear, quartzMaxYear
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = strconv.Atoi(a); err != nil {
				return nil, fmt.Errorf("bad year %q", a)
			}
			hi = lo
			if isRange {
				if hi, err = strconv.Atoi(b); err != nil {
					return nil, fmt.Errorf("bad year %q", b)
				}
			} else if hasStep {
				hi = quartzMaxYear
			}
		}
		if lo < quartzMinYear || hi > quartzMaxYear || lo > hi {
			return nil, fmt.Errorf("years must lie within %d-%d", quartzMinYear, quartzMaxYear)
		}
		for y := lo; y <= hi; y += step {
			years[y] = true
		}
	}
	return years, nil
}
