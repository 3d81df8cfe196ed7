package georeplicator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestRedialSkipsTheBackoff: a receiver that failed to find its master
// waits out its backoff (here an hour) before the next attempt; Redial (the
// master's address changed) makes it try again at once.
func TestRedialSkipsTheBackoff(t *testing.T) {
	var attempts atomic.Int64
	res := ResolverFunc(func(context.Context) (string, error) {
		attempts.Add(1)
		return "", errors.New("no master published yet")
	})
	r, err := NewReceiver(ReceiverOptions{
		Sink: newMemStore(), Resolver: res, BrokerID: 0, SlaveID: 1,
		CheckpointFile: filepath.Join(t.TempDir(), "cp"),
		BackoffMin:     time.Hour, BackoffMax: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantAttempts := func(n int64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
			if got := attempts.Load(); got != n {
				return fmt.Errorf("%d attempts, want %d", got, n)
			}
			return nil
		})
	}
	wantAttempts(1)
	r.Redial()
	wantAttempts(2)
	r.Redial()
	wantAttempts(3)
}
