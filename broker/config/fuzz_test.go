package config

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// FuzzParse: no input makes the loader panic, and whatever loads can be
// described.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/metaq-style-server.ini", "testdata/metaq-style-sample.server.ini", "testdata/vectors-server.ini", "../../conf/server.ini"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(minimalDoc().set("system", "deleteWhen", "0 0 0 ? * 6#3 2030").String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, _, err := Parse("fuzz.ini", data)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := Describe(&buf, s, nil); err != nil {
			t.Fatal(err)
		}
		for _, tp := range s.Topics {
			tp.DeleteWhen.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			s.TopicFor(tp.Name)
		}
	})
}

// FuzzParseCron: no expression makes ParseCron or Next panic, and Next
// always moves forward.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 0 6,18 * * ?", "0 0 0 L * ?", "0 0 0 15W * ?", "0 0 0 ? * 6#3", "0 0 0 ? * 6L", "0 0 0 1 1 ? 2030/2", "*/5 * * * * ?"} {
		f.Add(s)
	}
	from := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCron(expr)
		if err != nil {
			return
		}
		if n := c.Next(from); !n.IsZero() && !n.After(from) {
			t.Fatalf("%q: Next(%v) = %v", expr, from, n)
		}
	})
}

func FuzzSlave(f *testing.F) {
	if data, err := os.ReadFile("testdata/metaq-style-async_slave.properties"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("slaveId=1\\\n  2\nslaveGroup=\\u0041\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = ParseSlave("fuzz.properties", data)
	})
}
