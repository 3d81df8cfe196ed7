package bundle

import (
	"context"
	"errors"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// TestPromotionHoldsPutsUntilWritesOpen: a promotion (not a switchover)
// registers this site as master in ZooKeeper before it opens its writes. A
// put that reached it in between took a slave's route: with forwardPuts,
// to its own write gateway, which found this site named as master and
// answered 503 ("find the master: the new master has not registered yet")
// after its wait; without, it was refused (403) naming the old master. The
// hook pauses hf's promotion in that window until the put is held (or
// answered); it must be acknowledged once writes open, and stored at hf.
func TestPromotionHoldsPutsUntilWritesOpen(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	t.Run("forwarded", func(t *testing.T) { promotionHoldsPuts(t, forwardingEverywhere(sitesSpec{})) })
	t.Run("refused", func(t *testing.T) { promotionHoldsPuts(t, sitesSpec{}) })
}

// promotionHoldsPuts is TestPromotionHoldsPutsUntilWritesOpen with spec.
func promotionHoldsPuts(t *testing.T, spec sitesSpec) {
	s := newSites(t, spec)
	hf := s.site("hf")
	inWindow, release := make(chan struct{}), make(chan struct{})
	hook := func() {
		close(inWindow)
		select {
		case <-release:
		case <-time.After(time.Minute): // the test failed; let the promotion end
		}
	}
	hf.failover.beforeWritesOpen.Store(&hook)
	defer hf.failover.beforeWritesOpen.Store(nil)

	s.stop("bj")
	promoted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := hf.Promote(ctx, true)
		promoted <- err
	}()
	select {
	case <-inWindow:
	case err := <-promoted:
		t.Fatalf("hf's promotion ended before it opened writes (the hook did not run): %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("hf's promotion did not reach the opening of its writes")
	}

	type answer struct {
		r   *wire.Result
		err error
	}
	answered := make(chan answer, 1)
	body := []byte("put while hf is promoted")
	go func() {
		r, err := putOnce(hf.Broker.Addr().String(), &wire.Put{Topic: "orders", Partition: 0, Checksum: wire.Checksum(body), Body: body, Opaque: 9})
		answered <- answer{r, err}
	}()
	// Writes stay closed until the put is held (or, as before, answered).
	var got *answer
	var hold *broker.Hold
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		select {
		case a := <-answered:
			got = &a
			return nil
		default:
		}
		hf.failover.mu.Lock()
		hold = hf.failover.takingOver
		hf.failover.mu.Unlock()
		if hold == nil || hold.Stats().Held == 0 {
			return errors.New("the put is neither held nor answered")
		}
		return nil
	})
	close(release)
	if got == nil {
		select {
		case a := <-answered:
			got = &a
		case <-time.After(time.Minute):
			t.Fatal("the held put was not answered within a minute of hf opening its writes")
		}
	}
	if got.err != nil {
		t.Fatalf("put to hf while it was promoted: %v", got.err)
	}
	if !got.r.OK() {
		t.Fatalf("put to hf between its registration as master and the opening of its writes: answered %s, want acknowledged", got.r)
	}
	if err := <-promoted; err != nil {
		t.Fatalf("promote hf: %v", err)
	}
	if hold == nil {
		t.Fatal("hf held no put while it was promoted")
	}
	if st := hold.Stats(); st.Held != 1 || st.Local != 1 {
		t.Errorf("hf's hold while promoted: %+v, want the one put held and stored at hf", st)
	}
}
