package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"metaq/internal/clock"
	"metaq/internal/testutil"
)

// TestRetentionSchedule drives the deleteWhen crons with a fake clock: each
// topic with data is retained on its own schedule, and Close stops them.
func TestRetentionSchedule(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=hourly]\nnumPartitions=1\ndeleteWhen=0 30 * * * ?\n"))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.Local)
	fc := clock.NewFake(start)
	var hs *hookStore
	brk := startBroker(t, cfg, func(o *Options) {
		o.Clock = fc
		hs = &hookStore{Store: o.Store}
		o.Store = hs
	})
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "a")
	mustPut(t, cl, "hourly", 0, "b")

	count := func(prefix string) int {
		n := 0
		for _, r := range hs.retainedTopics() {
			if strings.HasPrefix(r, prefix+"@") {
				n++
			}
		}
		return n
	}
	// 00:00 -> 00:31: the hourly topic's cron (minute 30) fires, test's (06:00, 18:00) does not.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if fc.Now().Before(start.Add(31 * time.Minute)) {
			fc.Advance(time.Minute)
		}
		if count("hourly") == 0 {
			return errors.New("hourly not retained yet")
		}
		return nil
	})
	if n := count("test"); n != 0 {
		t.Fatalf("test retained %d times before 06:00", n)
	}
	// On to 06:01: test's cron fires once.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if fc.Now().Before(start.Add(6*time.Hour + time.Minute)) {
			fc.Advance(10 * time.Minute)
		}
		if count("test") != 1 {
			return fmt.Errorf("test retained %d times", count("test"))
		}
		return nil
	})
	brk.Close()
	before := len(hs.retainedTopics())
	fc.Advance(24 * time.Hour)
	time.Sleep(50 * time.Millisecond)
	if after := len(hs.retainedTopics()); after != before {
		t.Fatalf("retention ran after Close: %d -> %d", before, after)
	}
}
