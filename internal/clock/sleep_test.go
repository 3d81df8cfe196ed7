package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSleep: Sleep returns nil once d passed with ctx alive, and the
// context's error when ctx ends first (here an hour's sleep, cancelled).
func TestSleep(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatalf("Sleep with a live context: %v", err)
	}
	if time.Since(start) < 10*time.Millisecond {
		t.Fatalf("Sleep returned after %s, before its 10ms", time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep cancelled: %v, want context.Canceled", err)
	}
	dl, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if err := Sleep(dl, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep past its context's deadline: %v, want context.DeadlineExceeded", err)
	}
}
