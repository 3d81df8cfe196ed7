package bundle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPromoteRaiseAnswerLost: hf's raise of the generation commits in
// ZooKeeper but its answer is lost with the connection. bj steps down when
// it reads the new generation; hf must recognise the raise as its own and
// finish the promotion, or the generation has no master.
func TestPromoteRaiseAnswerLost(t *testing.T) {
	t.Parallel()
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	s.tapOf("hf").LoseReplyTo("/generation")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rep, err := s.site("hf").Promote(ctx, true)
	cancel()
	if n := s.tapOf("hf").LostReplies(); n != 1 {
		t.Fatalf("%d answers lost at hf, want 1 (the fault did not fire)", n)
	}
	if err != nil {
		t.Fatalf("promote hf with the raise's answer lost: %v", err)
	}
	if rep.Generation != 1 {
		t.Fatalf("promoted at generation %d, want 1", rep.Generation)
	}
	gen, by, err := s.site("hf").Registry.GenerationRaiser(context.Background(), 0)
	if err != nil || gen != 1 || by.Site != "hf" {
		t.Fatalf("ZooKeeper's generation %d raised by %+v (%v); want 1 by hf", gen, by, err)
	}
	s.produce("hf", "orders", 5)
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s after the promotion, want hf", m)
	}
}

// TestPromoteRaiseOutcomeUnknown: hf's raise commits, its answer is lost
// and hf's ZooKeeper then stays away longer than the raise's bound, so hf
// cannot tell whether it raised the generation. bj steps down when it
// reads the new generation; hf must find out once ZooKeeper is back that
// the raise was its own and finish the promotion in the background.
func TestPromoteRaiseOutcomeUnknown(t *testing.T) {
	old := raiseTimeout
	raiseTimeout = time.Second
	t.Cleanup(func() { raiseTimeout = old })
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	tap := s.tapOf("hf")
	tap.LoseReplyThenBlock("/generation")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, err := s.site("hf").Promote(ctx, true)
	cancel()
	if n := tap.LostReplies(); n != 1 {
		t.Fatalf("%d answers lost at hf, want 1 (the fault did not fire)", n)
	}
	if !errors.Is(err, ErrPromotionPending) {
		t.Fatalf("promote hf with the raise's outcome unknown: %v; want it pending", err)
	}
	if p := s.site("hf").Status().PendingPromotion; p == nil || !p.RaiseUnconfirmed || p.Generation != 1 {
		t.Fatalf("hf's pending promotion %+v, want generation 1 with its raise unconfirmed", p)
	}
	s.steppedDown("bj")
	tap.Unblock()
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
	if r := s.site("hf").Role(); r.Generation != 1 {
		t.Fatalf("hf: %v, want master of generation 1", r)
	}
	s.produce("bj", "orders", 5)
	s.converged("orders")
}
