package store

import (
	"context"
	"strings"
	"testing"
)

// TestReadLogKeepsUnitsWhole: ReadLog with a maxBytes that one partition's
// entry fills never ends between the entries of an AppendUnitAsync (a
// transaction's partitions at its commit), of three partitions here, read
// from the unit's start and from before it; the same appends through
// AppendManyAsync are read in maxBytes pieces as before. A replica that
// ships the log in ReadLog's pieces then holds all of a commit or none.
func TestReadLogKeepsUnitsWhole(t *testing.T) {
	s := openT(t, Options{})
	ctx := context.Background()
	body := strings.Repeat("u", 20<<10)
	group := func(topic string) []PartitionAppend {
		var apps []PartitionAppend
		for p := range 3 {
			apps = append(apps, PartitionAppend{Topic: topic, Partition: p, Msgs: []Message{{Body: []byte(body)}}})
		}
		return apps
	}
	write := func(unit bool, apps []PartitionAppend) {
		t.Helper()
		got := make(chan []AppendOutcome, 1)
		if unit {
			s.AppendUnitAsync(ctx, apps, func(o []AppendOutcome) { got <- o })
		} else {
			s.AppendManyAsync(ctx, apps, func(o []AppendOutcome) { got <- o })
		}
		for i, o := range <-got {
			if o.Err != nil {
				t.Fatalf("append %d: %v", i, o.Err)
			}
		}
	}
	start, _ := s.LogBounds()
	mustAppend(t, s, "before", 0, body)
	_, unitStart := s.LogBounds()
	write(true, group("commit"))
	_, plainStart := s.LogBounds()
	write(false, group("plain"))

	topics := func(ents []LogEntry) string {
		var names []string
		for _, e := range ents {
			names = append(names, e.Topic)
		}
		return strings.Join(names, ",")
	}
	for _, from := range []int64{start, unitStart} {
		ents, next, err := s.ReadLog(from, 8<<10)
		if err != nil {
			t.Fatal(err)
		}
		if from == start {
			if got := topics(ents); got != "before" {
				t.Fatalf("first read from %d: %s", from, got)
			}
			ents, next, err = s.ReadLog(next, 8<<10)
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := topics(ents); got != "commit,commit,commit" {
			t.Fatalf("read of the unit (from %d): entries of %s; the unit was cut", from, got)
		}
		if rest, _, err := s.ReadLog(next, 8<<10); err != nil || topics(rest) != "plain" {
			t.Fatalf("read after the unit (from %d): %s %v", next, topics(rest), err)
		}
	}
	ents, _, err := s.ReadLog(plainStart, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if got := topics(ents); got != "plain" {
		t.Fatalf("read of a group that is not a unit: %s", got)
	}
}
