package bundle

import (
	"context"
	"testing"
	"time"
)

// TestPromoteRaiseAnswerLost: hf's raise of the generation commits in
// ZooKeeper but its answer is lost with the connection. bj steps down when
// it reads the new generation; hf must recognise the raise as its own and
// finish the promotion, or the generation has no master.
func TestPromoteRaiseAnswerLost(t *testing.T) {
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
