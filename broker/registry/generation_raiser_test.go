package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
)

// TestRaiseGenerationLostReply: ZooKeeper applies a raise of the
// generation but its answer is lost (the connection drops first). The
// raiser recognises its own raise by the token it wrote beside the
// generation, instead of reporting a failure while the generation is
// raised; the raiser node names its site. Both forms of the raise, the
// node missing and present.
func TestRaiseGenerationLostReply(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	tap := &zktest.Tap{}
	opts := testOptions(t, root)
	opts.Dialer, opts.Site = tap.Dial, "hf"
	r := newRegistry(t, opts)
	for i, raise := range []func(context.Context, int, uint64) (uint64, error){r.RaiseGenerationFrom, r.RaiseGeneration} {
		known := uint64(i)
		tap.LoseReplyTo("/" + generationNode)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		gen, err := raise(ctx, 3, known)
		cancel()
		if lost := tap.LostReplies(); lost != i+1 {
			t.Fatalf("raise %d: %d answers lost, want %d (the fault did not fire)", i, lost, i+1)
		}
		if err != nil || gen != known+1 {
			t.Fatalf("raise %d from %d with its answer lost: %d %v; want %d (the raise committed)", i, known, gen, err, known+1)
		}
		g, by, err := r.GenerationRaiser(context.Background(), 3)
		if err != nil || g != known+1 || by.Site != "hf" || by.Token == "" {
			t.Fatalf("after raise %d: generation %d raised by %+v (%v); want %d by hf", i, g, by, err, known+1)
		}
	}
	// Exactly once each: a retry of a committed raise would have moved it
	// one further, or failed as moved.
	if g, err := r.Generation(context.Background(), 3); err != nil || g != 2 {
		t.Fatalf("generation %d %v, want 2", g, err)
	}
}

// TestGenerationRaiserOldData: a generation written without a raiser (an
// older version, or a mirror) reads as before, with an unknown raiser; so
// does a raiser node left from an earlier generation.
func TestGenerationRaiserOldData(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	opts := testOptions(t, root)
	opts.Site = "bj"
	r := newRegistry(t, opts)
	ctx := context.Background()
	path := r.Paths().GenerationPath(4)
	if err := r.createParents(ctx, path); err != nil {
		t.Fatal(err)
	}
	if err := r.call(ctx, func() error { _, err := r.conn.Create(path, []byte("7\n"), 0, openACL); return err }); err != nil {
		t.Fatal(err)
	}
	if g, by, err := r.GenerationRaiser(ctx, 4); err != nil || g != 7 || by != (Raiser{}) {
		t.Fatalf("old data: %d %+v %v; want 7, unknown raiser", g, by, err)
	}
	if g, err := r.RaiseGenerationFrom(ctx, 4, 7); err != nil || g != 8 {
		t.Fatalf("raise from old data: %d %v", g, err)
	}
	if _, by, _ := r.GenerationRaiser(ctx, 4); by.Site != "bj" || by.Generation != 8 {
		t.Fatalf("raiser %+v, want bj at 8", by)
	}
	// A generation mirrored from another ensemble names its raiser too.
	if g, _, err := r.RaiseGenerationToBy(ctx, 4, 9, Raiser{Site: "hf"}, false); err != nil || g != 9 {
		t.Fatalf("raise to 9: %d %v", g, err)
	}
	if g, by, err := r.GenerationRaiser(ctx, 4); err != nil || g != 9 || by.Site != "hf" || by.Generation != 9 {
		t.Fatalf("after a mirror's raise: %d %+v %v; want 9 raised by hf", g, by, err)
	}
	if _, err := r.RaiseGenerationFrom(ctx, 4, 8); !errors.Is(err, ErrGenerationMoved) {
		t.Fatalf("raise from 8 at 9: %v, want ErrGenerationMoved", err)
	}
}

// TestUndoRaiseAndRaiseToBy: a raise that lost the deployment's majority is
// set back (generation and previous raiser) only while it is still there;
// the winner's RaiseGenerationToBy overwrites a losing raise of the same
// generation only when told to, and never lowers a newer one.
func TestUndoRaiseAndRaiseToBy(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	opts := testOptions(t, root)
	opts.Site = "gz"
	r := newRegistry(t, opts)
	ctx := context.Background()
	first := Raiser{Site: "bj", Token: "t-bj"}
	if g, err := r.RaiseGenerationFromAs(ctx, 5, 0, first); err != nil || g != 1 {
		t.Fatalf("raise to 1: %d %v", g, err)
	}
	_, prev, _ := r.GenerationRaiser(ctx, 5)
	loser := Raiser{Site: "gz", Token: "t-gz"}
	if g, err := r.RaiseGenerationFromAs(ctx, 5, 1, loser); err != nil || g != 2 {
		t.Fatalf("raise to 2: %d %v", g, err)
	}
	// A token that is not the one written changes nothing.
	if ok, err := r.UndoRaise(ctx, 5, 2, "t-other", prev); err != nil || ok {
		t.Fatalf("undo with another token: %v %v, want false", ok, err)
	}
	if ok, err := r.UndoRaise(ctx, 5, 2, "t-gz", prev); err != nil || !ok {
		t.Fatalf("undo: %v %v, want true", ok, err)
	}
	// The raiser set back carries the mark of the give-back.
	want := prev
	want.GivenBack, want.GivenBackBy = 2, "gz"
	if g, by, err := r.GenerationRaiser(ctx, 5); err != nil || g != 1 || by != want {
		t.Fatalf("after the undo: %d by %+v (%v), want 1 by %+v", g, by, err, want)
	}
	if ok, err := r.UndoRaise(ctx, 5, 2, "t-gz", prev); err != nil || ok {
		t.Fatalf("second undo: %v %v, want false", ok, err)
	}
	// The losing raise again, then the winner's number written over it.
	if _, err := r.RaiseGenerationFromAs(ctx, 5, 1, loser); err != nil {
		t.Fatal(err)
	}
	winner := Raiser{Site: "hf", Token: "t-hf"}
	if g, by, err := r.RaiseGenerationToBy(ctx, 5, 2, winner, false); err != nil || g != 2 || by.Token != "t-gz" {
		t.Fatalf("raise to 2 by hf without overwrite: %d %+v %v, want 2 held by gz", g, by, err)
	}
	if g, by, err := r.RaiseGenerationToBy(ctx, 5, 2, winner, true); err != nil || g != 2 || by.Token != "t-hf" {
		t.Fatalf("raise to 2 by hf with overwrite: %d %+v %v", g, by, err)
	}
	if ok, err := r.UndoRaise(ctx, 5, 2, "t-gz", prev); err != nil || ok {
		t.Fatalf("undo after the winner wrote over it: %v %v, want false", ok, err)
	}
	if g, by, err := r.GenerationRaiser(ctx, 5); err != nil || g != 2 || by.Site != "hf" || by.Token != "t-hf" {
		t.Fatalf("end: %d by %+v (%v), want 2 by hf", g, by, err)
	}
	// Never lowered; a missing node is created with its raiser.
	if g, _, err := r.RaiseGenerationToBy(ctx, 5, 1, winner, true); err != nil || g != 2 {
		t.Fatalf("raise to 1 over 2: %d %v, want 2", g, err)
	}
	if g, by, err := r.RaiseGenerationToBy(ctx, 6, 3, winner, false); err != nil || g != 3 || by.Site != "hf" {
		t.Fatalf("raise a missing node to 3: %d %+v %v", g, by, err)
	}
}

// TestRaiseToAClassNumberAndBack: a raise to a number above known+1 (the
// next of its site's class) writes that number only while the generation
// is not above known, returns what it replaced, and its undo sets back
// exactly that: the generation before it and its raiser, not gen-1, a
// generation nobody raised.
func TestRaiseToAClassNumberAndBack(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	r := newRegistry(t, testOptions(t, root))
	ctx := context.Background()
	first := Raiser{Site: "bj", Token: "t-bj"}
	if g, err := r.RaiseGenerationFromAs(ctx, 5, 0, first); err != nil || g != 1 {
		t.Fatalf("raise to 1: %d %v", g, err)
	}
	gz := Raiser{Site: "gz", Token: "t-gz"}
	if _, err := r.RaiseGenerationFromToAs(ctx, 5, 1, 1, gz); err == nil {
		t.Fatal("a raise from 1 to 1 was taken")
	}
	prev, err := r.RaiseGenerationFromToAs(ctx, 5, 1, 4, gz)
	if err != nil {
		t.Fatal(err)
	}
	if prev.Generation != 1 || prev.Site != "bj" || prev.Token != "t-bj" {
		t.Fatalf("replaced %+v, want generation 1 raised by bj", prev)
	}
	if g, by, err := r.GenerationRaiser(ctx, 5); err != nil || g != 4 || by.Site != "gz" {
		t.Fatalf("after the raise: %d by %+v (%v), want 4 by gz", g, by, err)
	}
	// From a generation it is above: moved.
	if _, err := r.RaiseGenerationFromToAs(ctx, 5, 3, 5, Raiser{Site: "hf", Token: "t-hf"}); !errors.Is(err, ErrGenerationMoved) {
		t.Fatalf("a raise from 3 over 4: %v, want ErrGenerationMoved", err)
	}
	if ok, err := r.UndoRaise(ctx, 5, 4, "t-gz", prev); err != nil || !ok {
		t.Fatalf("undo: %v %v", ok, err)
	}
	want := prev
	want.GivenBack, want.GivenBackBy = 4, "gz"
	if g, by, err := r.GenerationRaiser(ctx, 5); err != nil || g != 1 || by != want {
		t.Fatalf("after the undo: %d by %+v (%v), want 1 by %+v", g, by, err, want)
	}
}

// TestMasterOfGeneration: a master node created after the generation took
// its value is a master of it; one older than the raise is not.
func TestMasterOfGeneration(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	r := newRegistry(t, testOptions(t, root))
	ctx := context.Background()
	if g, ok, err := r.MasterOfGeneration(ctx, 7); err != nil || g != 0 || ok {
		t.Fatalf("nothing yet: %d %v %v", g, ok, err)
	}
	if _, err := r.RaiseGenerationFromAs(ctx, 7, 0, Raiser{Site: "gz", Token: "t1"}); err != nil {
		t.Fatal(err)
	}
	if g, ok, err := r.MasterOfGeneration(ctx, 7); err != nil || g != 1 || ok {
		t.Fatalf("raised, no master: %d %v %v", g, ok, err)
	}
	master := r.Paths().Broker(7, -1)
	if err := r.EnsurePath(ctx, r.Paths().BrokerID(7)); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateEphemeral(ctx, master, []byte("meta://x")); err != nil {
		t.Fatal(err)
	}
	if g, ok, err := r.MasterOfGeneration(ctx, 7); err != nil || g != 1 || !ok {
		t.Fatalf("registered after the raise: %d %v %v, want 1 true", g, ok, err)
	}
	if _, err := r.RaiseGenerationFromAs(ctx, 7, 1, Raiser{Site: "hf", Token: "t2"}); err != nil {
		t.Fatal(err)
	}
	if g, ok, err := r.MasterOfGeneration(ctx, 7); err != nil || g != 2 || ok {
		t.Fatalf("a master node older than the raise: %d %v %v, want 2 false", g, ok, err)
	}
}
