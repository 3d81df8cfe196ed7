package backoff

import (
	"testing"
	"time"
)

func TestDoublesUpToMax(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("pause %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %v, want the minimum", got)
	}
}

func TestManyAttemptsStayAtMax(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: time.Hour}
	for i := 0; i < 200; i++ {
		if d := b.Next(); d <= 0 || d > time.Hour {
			t.Fatalf("attempt %d: %v out of (0, 1h]", i, d)
		}
	}
}

func TestJitterBetweenHalfAndWhole(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: true}
	exp := []time.Duration{100, 200, 400, 400}
	for round := 0; round < 50; round++ {
		b.Reset()
		for i, e := range exp {
			e *= time.Millisecond
			if d := b.Next(); d < e/2 || d > e {
				t.Fatalf("pause %d: %v outside [%v, %v]", i, d, e/2, e)
			}
		}
	}
}
