package config

import (
	"strings"
	"testing"
	"time"
)

func TestEvalInt(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"42", 42},
		{"1024*1024*1024", 1 << 30},
		{" 1024 * 1024 ", 1 << 20},
		{"(1+2)*3", 9},
		{"1+2*3", 7},
		{"10-4-3", 3},
		{"7/2", 3},
		{"-7/2", -3}, // Java truncates toward zero
		{"7%4", 3},
		{"-5", -5},
		{"--5", 5},
		{"+5", 5},
		{"2*(3+(4-1))", 12},
		{"0x10", 16},
		{"0XfF", 255},
		{"10L", 10},
		{"9223372036854775807", 9223372036854775807},
	}
	for _, c := range good {
		t.Run(c.in, func(t *testing.T) {
			got, err := evalInt(c.in)
			if err != nil || got != c.want {
				t.Errorf("evalInt(%q) = %d, %v; want %d", c.in, got, err, c.want)
			}
		})
	}
	bad := []string{"", " ", "abc", "1.5", "1e3", "10s", "1+", "(1", "1)", "1 2", "1/0", "5%0",
		"9223372036854775808", "9223372036854775807+1", "-9223372036854775807-2", "4611686018427387904*2", "true", "0x"}
	for _, in := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			if v, err := evalInt(in); err == nil {
				t.Errorf("evalInt(%q) = %d, want an error", in, v)
			}
		})
	}
}

func TestParseDeletePolicy(t *testing.T) {
	good := []struct {
		in       string
		want     DeletePolicy
		warnings bool
	}{
		{"delete,168", DeletePolicy{"delete", 168 * time.Hour, false, "delete,168"}, false},
		{"delete,10s", DeletePolicy{"delete", 10 * time.Second, false, "delete,10s"}, false},
		{"delete,10m", DeletePolicy{"delete", 10 * time.Minute, false, "delete,10m"}, false},
		{"delete,5h", DeletePolicy{"delete", 5 * time.Hour, false, "delete,5h"}, false},
		{"delete,0", DeletePolicy{"delete", 0, false, "delete,0"}, false},
		{"delete, 3", DeletePolicy{"delete", 3 * time.Hour, false, "delete, 3"}, false},
		{"delete,1,x", DeletePolicy{"delete", time.Hour, false, "delete,1,x"}, true},
		{"archive,24", DeletePolicy{"archive", 24 * time.Hour, false, "archive,24"}, false},
		{"archive,24,true", DeletePolicy{"archive", 24 * time.Hour, true, "archive,24,true"}, false},
		{"archive,30m,false", DeletePolicy{"archive", 30 * time.Minute, false, "archive,30m,false"}, false},
		{"archive,1,TRUE", DeletePolicy{"archive", time.Hour, true, "archive,1,TRUE"}, false},
		{"archive,1,true,x", DeletePolicy{"archive", time.Hour, true, "archive,1,true,x"}, true},
	}
	for _, c := range good {
		t.Run(c.in, func(t *testing.T) {
			got, warn, err := ParseDeletePolicy(c.in)
			if err != nil || got != c.want || (warn != "") != c.warnings {
				t.Errorf("got %+v %q %v, want %+v (warning %v)", got, warn, err, c.want, c.warnings)
			}
		})
	}
	bad := []string{"", "delete", "delete,", "delete,x", "delete,-1", "delete,1d", "delete,1.5", "delete,h",
		"archive", "archive,1,yes", "remove,1", "Delete,1", "delete,99999999999"}
	for _, in := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			if p, _, err := ParseDeletePolicy(in); err == nil {
				t.Errorf("ParseDeletePolicy(%q) = %+v, want an error", in, p)
			}
		})
	}
}

func TestParseCron(t *testing.T) {
	loc := time.UTC
	at := func(y int, mo time.Month, d, h, mi, s int) time.Time { return time.Date(y, mo, d, h, mi, s, 0, loc) }
	cases := []struct {
		expr string
		from time.Time
		want []time.Time // successive activations
	}{
		{"0 0 6,18 * * ?", at(2026, 1, 1, 5, 0, 0), []time.Time{at(2026, 1, 1, 6, 0, 0), at(2026, 1, 1, 18, 0, 0), at(2026, 1, 2, 6, 0, 0)}},
		{"0 0 6,18 * * ?", at(2026, 1, 1, 6, 0, 0), []time.Time{at(2026, 1, 1, 18, 0, 0)}}, // strictly after
		{"*/15 * * * * ?", at(2026, 1, 1, 0, 0, 1), []time.Time{at(2026, 1, 1, 0, 0, 15), at(2026, 1, 1, 0, 0, 30)}},
		{"0 30 2 ? * 2", at(2026, 11, 29, 0, 0, 0), []time.Time{at(2026, 11, 30, 2, 30, 0), at(2026, 12, 7, 2, 30, 0)}}, // 2 = Monday in Quartz
		{"0 0 0 ? * 1", at(2026, 11, 24, 0, 0, 0), []time.Time{at(2026, 11, 29, 0, 0, 0)}},                              // 1 = Sunday
		{"0 0 0 ? * 7", at(2026, 11, 24, 0, 0, 0), []time.Time{at(2026, 11, 28, 0, 0, 0)}},                              // 7 = Saturday
		{"0 0 0 ? * 2-6", at(2026, 11, 28, 0, 0, 0), []time.Time{at(2026, 11, 30, 0, 0, 0)}},                            // MON-FRI
		{"0 0 0 ? * SAT,SUN", at(2026, 11, 24, 0, 0, 0), []time.Time{at(2026, 11, 28, 0, 0, 0), at(2026, 11, 29, 0, 0, 0)}},
		{"0 0 0 ? * mon-wed", at(2026, 11, 28, 0, 0, 0), []time.Time{at(2026, 11, 30, 0, 0, 0)}},
		{"0 0 12 1 JUL ?", at(2026, 1, 1, 0, 0, 0), []time.Time{at(2026, 7, 1, 12, 0, 0), at(2027, 7, 1, 12, 0, 0)}},
		{"0 0 0 1 1 ? 2030", at(2026, 1, 1, 0, 0, 0), []time.Time{at(2030, 1, 1, 0, 0, 0)}},
		{"0 0 0 1 1 ? 2028-2029", at(2026, 6, 1, 0, 0, 0), []time.Time{at(2028, 1, 1, 0, 0, 0), at(2029, 1, 1, 0, 0, 0), {}}},
		{"0 0 0 1 1 ? 2027/3", at(2026, 6, 1, 0, 0, 0), []time.Time{at(2027, 1, 1, 0, 0, 0), at(2030, 1, 1, 0, 0, 0)}},
		{"0 0 0 1 6 ? *", at(2026, 6, 1, 0, 0, 0), []time.Time{at(2027, 6, 1, 0, 0, 0)}},
		{"0 0 0 1 1 ? 2020", at(2026, 1, 1, 0, 0, 0), []time.Time{{}}}, // never again
		// Quartz's special day forms. November 2026: the 1st is a Sunday, the 30th a Monday.
		{"0 0 3 L * ?", at(2026, 11, 2, 0, 0, 0), []time.Time{at(2026, 11, 30, 3, 0, 0), at(2026, 12, 31, 3, 0, 0), at(2027, 1, 31, 3, 0, 0), at(2027, 2, 28, 3, 0, 0)}},
		{"0 0 0 L-2 * ?", at(2026, 11, 2, 0, 0, 0), []time.Time{at(2026, 11, 28, 0, 0, 0), at(2026, 12, 29, 0, 0, 0)}},
		{"0 0 0 LW * ?", at(2026, 1, 1, 0, 0, 0), []time.Time{at(2026, 1, 30, 0, 0, 0), at(2026, 2, 27, 0, 0, 0), at(2026, 3, 31, 0, 0, 0)}}, // 31 Jan and 28 Feb 2026 are a Saturday
		{"0 0 0 15W * ?", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 16, 0, 0, 0), at(2026, 12, 15, 0, 0, 0)}},                       // 15 Nov is a Sunday
		{"0 0 0 1W * ?", at(2026, 10, 31, 12, 0, 0), []time.Time{at(2026, 11, 2, 0, 0, 0)}},                                                  // Sunday the 1st: Monday the 2nd, not October
		{"0 0 0 14W * ?", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 13, 0, 0, 0)}},                                                  // Saturday the 14th: Friday
		{"0 0 0 ? * 6#3", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 20, 0, 0, 0), at(2026, 12, 18, 0, 0, 0)}},                       // third Friday
		{"0 0 0 ? * MON#1", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 2, 0, 0, 0), at(2026, 12, 7, 0, 0, 0)}},
		{"0 0 0 ? * 6L", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 27, 0, 0, 0), at(2026, 12, 25, 0, 0, 0)}}, // last Friday
		{"0 0 0 ? * SUNL", at(2026, 11, 1, 0, 0, 0), []time.Time{at(2026, 11, 29, 0, 0, 0)}},
		{"0 0 0 ? * L", at(2026, 11, 24, 0, 0, 0), []time.Time{at(2026, 11, 28, 0, 0, 0), at(2026, 12, 5, 0, 0, 0)}}, // L alone is Saturday
		{"0 0 0 L 2 ? 2028", at(2026, 1, 1, 0, 0, 0), []time.Time{at(2028, 2, 29, 0, 0, 0)}},
	}
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			cr, err := ParseCron(c.expr)
			if err != nil {
				t.Fatal(err)
			}
			if cr.Text != c.expr {
				t.Errorf("text %q", cr.Text)
			}
			tm := c.from
			for i, want := range c.want {
				got := cr.Next(tm)
				if !got.Equal(want) {
					t.Fatalf("activation %d after %v: got %v, want %v", i, tm, got, want)
				}
				tm = got
			}
		})
	}
	bad := []struct{ expr, why string }{
		{"", "fields"},
		{"0 6 * * ?", "5 fields"},
		{"0 0 6 * * ? 2030 x", "8 fields"},
		{"0 0 6 * * *", "exactly one"},
		{"0 0 6 ? * ?", "exactly one"},
		{"0 0 6 1 * 2", "exactly one"},
		{"? 0 6 * * ?", "'?' is only allowed"},
		{"0 0 6 5C * ?", "not supported"},
		{"0 0 6 ? * 1C", "not supported"},
		{"0 0 L * * ?", "only allowed in the day fields"},
		{"0 0 6 1W,15W * ?", "nW needs one day"},
		{"0 0 6 32W * ?", "nW needs one day"},
		{"0 0 6 L-31 * ?", "L-n needs"},
		{"0 0 6 W * ?", "nW needs one day"},
		{"0 0 6 ? * 6#6", "k in 1..5"},
		{"0 0 6 ? * 1-3#2", "one day of the week"},
		{"0 0 6 ? * 8L", "outside 1-7"},
		{"0 0 6 ? * 1,2L", "one day of the week"},
		{"0 0 6 ? * 8", "outside 1-7"},
		{"0 0 6 ? * 0", "outside 1-7"},
		{"0 0 6 ? * FOO", "day of the week"},
		{"60 0 6 * * ?", ""},
		{"0 60 6 * * ?", ""},
		{"0 0 24 * * ?", ""},
		{"0 0 0 32 * ?", ""},
		{"0 0 0 1 13 ?", ""},
		{"0 0 0 1 1 ? 2100", "1970-2099"},
		{"0 0 0 1 1 ? 1969", "1970-2099"},
		{"0 0 0 1 1 ? 20x", "year"},
		{"a b c d e f", ""},
	}
	for _, c := range bad {
		t.Run("bad "+c.expr, func(t *testing.T) {
			_, err := ParseCron(c.expr)
			if err == nil {
				t.Fatalf("ParseCron(%q) accepted", c.expr)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Errorf("error %q lacks %q", err, c.why)
			}
		})
	}
}
