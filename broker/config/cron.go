package config

import (
	"errors"
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
// run 1 (SUN) to 7 (SAT). The day fields also take Quartz's special forms:
// L, L-n, nW and LW in day-of-month; L, nL and n#k in day-of-week. Only the
// rarely used C (calendar) form is refused.
//
// robfig/cron handles the six standard fields; the year field and the
// special day forms are applied on top by stepping through its activations.
func ParseCron(text string) (Cron, error) {
	fields := strings.Fields(strings.ToUpper(text))
	if len(fields) != 6 && len(fields) != 7 {
		return Cron{}, fmt.Errorf("%d fields, want 6 or 7 (sec min hour day-of-month month day-of-week [year])", len(fields))
	}
	for i, f := range fields {
		if strings.Contains(f, "?") && i != 3 && i != 5 {
			return Cron{}, fmt.Errorf("field %d %q: '?' is only allowed in day-of-month or day-of-week", i+1, f)
		}
		if i != 3 && i != 5 && strings.ContainsAny(f, "LW#") && !isMonthName(i, f) {
			return Cron{}, fmt.Errorf("field %d %q: L, W and # are only allowed in the day fields", i+1, f)
		}
		if (i == 3 || i == 5) && strings.Contains(f, "C") {
			return Cron{}, fmt.Errorf("field %d %q: the Quartz calendar form C is not supported", i+1, f)
		}
	}
	domAny, dowAny := fields[3] == "?", fields[5] == "?"
	if domAny == dowAny {
		return Cron{}, fmt.Errorf("exactly one of day-of-month (%q) and day-of-week (%q) must be '?', as Quartz requires", fields[3], fields[5])
	}
	var dayMatch func(time.Time) bool
	if special, err := specialDom(fields[3]); err != nil {
		return Cron{}, fmt.Errorf("day-of-month %q: %w", fields[3], err)
	} else if special != nil {
		dayMatch, fields[3] = special, "*"
	}
	if fields[5] == "L" {
		fields[5] = "7" // a lone L in day-of-week means Saturday
	}
	if special, err := specialDow(fields[5]); err != nil {
		return Cron{}, fmt.Errorf("day-of-week %q: %w", fields[5], err)
	} else if special != nil {
		dayMatch, fields[5] = special, "?"
		fields[3] = "*"
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
	if years == nil && dayMatch == nil {
		return Cron{Text: text, Next: sched.Next}, nil
	}
	next := func(t time.Time) time.Time {
		// Step through robfig's activations, skipping whole days that the
		// special day form rejects and whole years outside the year field.
		// The bound covers ten years of daily skips.
		for range 3700 {
			n := sched.Next(t)
			if n.IsZero() || n.Year() > quartzMaxYear {
				return time.Time{}
			}
			if years != nil && !years[n.Year()] {
				y := n.Year() + 1
				for y <= quartzMaxYear && !years[y] {
					y++
				}
				if y > quartzMaxYear {
					return time.Time{}
				}
				t = time.Date(y, 1, 1, 0, 0, 0, 0, n.Location()).Add(-time.Second)
				continue
			}
			if dayMatch != nil && !dayMatch(n) {
				t = time.Date(n.Year(), n.Month(), n.Day()+1, 0, 0, 0, 0, n.Location()).Add(-time.Second)
				continue
			}
			return n
		}
		return time.Time{}
	}
	return Cron{Text: text, Next: next}, nil
}

func lastDayOfMonth(t time.Time) int {
	return time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, t.Location()).Day()
}

// specialDom returns a day matcher for L, L-n, nW and LW, or nil when the
// field has none of these forms (robfig then handles it).
func specialDom(f string) (func(time.Time) bool, error) {
	if !strings.ContainsAny(f, "LW") {
		return nil, nil
	}
	switch {
	case f == "L":
		return func(t time.Time) bool { return t.Day() == lastDayOfMonth(t) }, nil
	case f == "LW":
		return func(t time.Time) bool {
			last := time.Date(t.Year(), t.Month(), lastDayOfMonth(t), 0, 0, 0, 0, t.Location())
			switch last.Weekday() {
			case time.Saturday:
				last = last.AddDate(0, 0, -1)
			case time.Sunday:
				last = last.AddDate(0, 0, -2)
			}
			return t.Day() == last.Day()
		}, nil
	case strings.HasPrefix(f, "L-"):
		n, err := strconv.Atoi(f[2:])
		if err != nil || n < 0 || n > 30 {
			return nil, errors.New("day of month: L-n needs n in 0..30")
		}
		return func(t time.Time) bool { return t.Day() == lastDayOfMonth(t)-n }, nil
	case strings.HasSuffix(f, "W"):
		n, err := strconv.Atoi(f[:len(f)-1])
		if err != nil || n < 1 || n > 31 {
			return nil, fmt.Errorf("nW needs one day 1..31 (no list or range)")
		}
		return func(t time.Time) bool {
			// The weekday nearest to day n, without leaving the month.
			last := lastDayOfMonth(t)
			if n > last {
				return false
			}
			target := time.Date(t.Year(), t.Month(), n, 0, 0, 0, 0, t.Location())
			switch target.Weekday() {
			case time.Saturday:
				if n == 1 {
					target = target.AddDate(0, 0, 2)
				} else {
					target = target.AddDate(0, 0, -1)
				}
			case time.Sunday:
				if n == last {
					target = target.AddDate(0, 0, -2)
				} else {
					target = target.AddDate(0, 0, 1)
				}
			}
			return t.Day() == target.Day()
		}, nil
	}
	return nil, errors.New("day of month: L and W take the forms L, L-n, nW or LW")
}

// specialDow returns a day matcher for nL (last such weekday of the month)
// and n#k (k-th such weekday), or nil when the field has neither.
func specialDow(f string) (func(time.Time) bool, error) {
	// No day name ends in L, so a trailing L is always the nL form.
	if day, ok := strings.CutSuffix(f, "L"); ok {
		if day == "" || strings.ContainsAny(day, ",-/*") {
			return nil, fmt.Errorf("nL needs one day of the week, such as 6L or FRIL")
		}
		wd, err := weekday(day)
		if err != nil {
			return nil, err
		}
		return func(t time.Time) bool {
			return t.Weekday() == wd && t.Day()+7 > lastDayOfMonth(t)
		}, nil
	}
	if day, nth, ok := strings.Cut(f, "#"); ok {
		if strings.ContainsAny(day, ",-/*") {
			return nil, fmt.Errorf("n#k needs one day of the week, such as 6#3")
		}
		wd, err := weekday(day)
		if err != nil {
			return nil, err
		}
		k, err := strconv.Atoi(nth)
		if err != nil || k < 1 || k > 5 {
			return nil, fmt.Errorf("n#k needs k in 1..5")
		}
		return func(t time.Time) bool {
			return t.Weekday() == wd && (t.Day()-1)/7+1 == k
		}, nil
	}
	return nil, nil
}

// weekday reads one Quartz day of the week: 1 (SUN) .. 7 (SAT) or a name.
func weekday(s string) (time.Weekday, error) {
	d, err := dowNumber(s)
	if err != nil {
		return 0, err
	}
	for i, name := range dowNames {
		if d == name {
			return time.Weekday(i), nil
		}
	}
	n, err := strconv.Atoi(d)
	if err != nil {
		return 0, fmt.Errorf("%q is not a day of the week", s)
	}
	return time.Weekday(n), nil
}

var dowNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}

// isMonthName keeps month names such as JUL from being mistaken for the
// L form, which only the day fields take.
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
