package bundle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/siterole"
	"metaq/internal/testutil"
)

// failIdentityWrites makes every later write of b's identity file fail, as
// on a full disk: the file is replaced by a directory that is not empty,
// which the atomic rename cannot replace (the identity is already open:
// nothing reads the file again). The returned function undoes it.
func failIdentityWrites(t *testing.T, b *Bundle) func() {
	t.Helper()
	if _, err := b.identity(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(b.Config().System.DataPath, "replication", "identity.json")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(file, "full"), 0o755); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.RemoveAll(file); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPromotionFailedAtIdentityIsFinished: a forced promotion at hf raises
// the generation in ZooKeeper, then cannot write its identity file (a full
// disk). bj, master of the older generation, steps down when it sees the
// newer one. Before the fix hf followed no one (its receiver closed, no
// shipper, role slave) and the deployment had no master for good (found by
// the fault schedules, seed 1635651954). Now hf finishes the promotion once
// the file can be written, and bj and gz follow it.
func TestPromotionFailedAtIdentityIsFinished(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, s.site("bj"), s.site("hf"), "orders", 30*time.Second)
	hf := s.site("hf")
	undo := failIdentityWrites(t, hf)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := hf.Promote(ctx, true)
	if err == nil {
		t.Fatal("hf's promotion succeeded although its identity file cannot be written")
	}
	t.Logf("hf's promotion failed after raising the generation, as wanted: %v", err)
	if st := hf.Status(); st.PendingPromotion == nil || st.PendingPromotion.Generation != 1 {
		t.Fatalf("hf's status reports no pending promotion of generation 1: %+v", st.PendingPromotion)
	}
	// bj sees generation 1 and steps down while hf cannot finish.
	s.steppedDown("bj")
	undo()
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
	if r := hf.Role(); r.Generation != 1 {
		t.Fatalf("hf: %v, want master of generation 1", r)
	}
	if st := hf.Status(); st.PendingPromotion != nil {
		t.Fatalf("hf's status still reports a pending promotion: %+v", st.PendingPromotion)
	}
	s.produce("gz", "orders", 10)
	s.produce("bj", "orders", 10)
	s.converged("orders")
}

// TestPromotionFailedAtMasterNodeIsFinished: a forced promotion at hf that
// fails waiting for the old master's node (bj's session lingers while its
// ZooKeeper connection is blocked, then hf's own connection goes) leaves
// hf shipping at the raised generation and taking no puts. Before the fix
// it stayed so when no newer generation came (seed 761491328): bj stepped
// down at hf's generation and no site was master. Now hf takes the node
// and registers once ZooKeeper lets it.
func TestPromotionFailedAtMasterNodeIsFinished(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, s.site("bj"), s.site("hf"), "orders", 30*time.Second)
	hf := s.site("hf")
	t.Logf("hf's promotion failed half way, as wanted: %v", s.promoteHalfWay("hf", "bj"))
	if r := hf.Role(); r.Role != siterole.Slave || hf.promotedShipper() == nil {
		t.Fatalf("hf: role %+v, promoted shipper %v: not the half-promoted state this test is about", r, hf.promotedShipper() != nil)
	}
	s.healZK("hf")
	s.healZK("bj")
	// bj sees generation 1 once it reads ZooKeeper again, and steps down.
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if m := s.master(); m != "hf" {
			return fmt.Errorf("master %q, want hf (hf: %v; pending %+v)", m, hf.Role(), hf.Status().PendingPromotion)
		}
		return nil
	})
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
	s.produce("bj", "orders", 10)
	s.converged("orders")
}

// TestPromotionFinishedWhenSessionIsBack: hf's forced promotion fails
// half way with its ZooKeeper cut (as bj's did with its ZooKeeper down in
// seed 941054), and its finisher's wait between attempts is made an hour.
// Before the fix the finisher waited it out after hf's registry had its
// session again, and no site was master meanwhile (the schedule's checker
// found none). Now the finisher tries again as soon as the session is back.
func TestPromotionFinishedWhenSessionIsBack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, s.site("bj"), s.site("hf"), "orders", 30*time.Second)
	hf := s.site("hf")
	hf.finishRetry = time.Hour // read by the finisher, which the promotion starts
	t.Logf("hf's promotion failed half way, as wanted: %v", s.promoteHalfWay("hf", "bj"))
	if hf.Status().PendingPromotion == nil {
		t.Fatal("hf reports no pending promotion: not the half-promoted state this test is about")
	}
	// bj reads generation 1 and steps down (its master node goes) before
	// hf's ZooKeeper is back, so that hf's next attempt can finish.
	s.healZK("bj")
	s.steppedDown("bj")
	s.healZK("hf")
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		if m := s.master(); m != "hf" {
			return fmt.Errorf("master %q, want hf (hf: %v; pending %+v)", m, hf.Role(), hf.Status().PendingPromotion)
		}
		return nil
	})
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
}

// TestSwitchoverNotTakenOverKeepsMaster: bj hands over to hf while hf's
// ZooKeeper is cut, so hf gets the whole log and the handover message but
// cannot raise the generation. Before the fix bj stepped down anyway
// (its shipper had observed the generation it expected) and became a
// slave of a master that never came: no site was master (seed 761491324).
// Now bj steps down only once the new generation is seen, takes puts
// again, and hf follows it again.
func TestSwitchoverNotTakenOverKeepsMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	t.Run("shared", func(t *testing.T) { switchoverNotTakenOver(t, sitesSpec{}) })
	// deploy/'s layout: bj takes its confirmation back when the handover
	// fails and acknowledges again once a majority of the listed sites'
	// ensembles confirm its generation (siterole.ConfirmsGeneration).
	t.Run("perzk-sites", func(t *testing.T) {
		switchoverNotTakenOver(t, sitesSpec{perSiteZK: true, replication: "sites=bj,gz,hf\n"})
	})
}

func switchoverNotTakenOver(t *testing.T, spec sitesSpec) {
	s := newSites(t, spec)
	s.produce("bj", "orders", 10)
	waitCaughtUp(t, s.site("bj"), s.site("hf"), "orders", 30*time.Second)
	s.cutZK("hf")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rep, err := s.site("bj").Switchover(ctx, "hf", "")
	if err == nil {
		t.Fatalf("the switchover succeeded although hf could not raise the generation: %+v", rep)
	}
	t.Logf("switchover failed, as wanted: %v", err)
	s.healZK("hf")
	if m := s.converged("orders"); m != "bj" {
		t.Fatalf("master %s, want bj", m)
	}
	if r := s.site("bj").Role(); r.Generation != 0 {
		t.Fatalf("bj: %v, want master of generation 0", r)
	}
	s.produce("hf", "orders", 10)
	s.produce("bj", "orders", 10)
	if m := s.converged("orders"); m != "bj" {
		t.Fatalf("master %s, want bj", m)
	}
	if r := s.site("hf").Role(); r.Role != siterole.Slave {
		t.Fatalf("hf: %v, want a slave", r)
	}
}

// TestPromotionGivenUpOldMasterTakesBack: hf's forced promotion raises the
// generation and then cannot write its identity file (a disk that stays
// full); bj steps down for the new generation. Before the fix hf retried
// for ever and the brokerId had no master while bj was alive. Now hf gives
// up after its bound, marks the generation abandoned, and follows again;
// bj takes mastership back at the next generation and takes puts, with
// hf's disk still full.
func TestPromotionGivenUpOldMasterTakesBack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	// One ensemble, and one per site (hf marks the generation abandoned in
	// its own; bj reads it there).
	t.Run("shared", func(t *testing.T) { promotionGivenUp(t, false) })
	t.Run("perzk", func(t *testing.T) { promotionGivenUp(t, true) })
}

func promotionGivenUp(t *testing.T, perZK bool) {
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}, perSiteZK: perZK})
	hf := s.site("hf")
	hf.opts.PromoteFinishTimeout = 2 * time.Second
	undo := failIdentityWrites(t, hf)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := hf.Promote(ctx, true); !errors.Is(err, ErrPromotionPending) {
		t.Fatalf("hf's promotion: %v; want it pending (its identity file cannot be written)", err)
	}
	// bj steps down for generation 1 while hf cannot finish.
	s.steppedDown("bj")
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if m := s.master(); m != "bj" || s.site("bj").Role().Generation != 2 {
			return fmt.Errorf("master %q, want bj back (bj %v; hf %v, pending %+v)", m, s.site("bj").Role(), hf.Role(), hf.Status().PendingPromotion)
		}
		return nil
	})
	if r := s.site("bj").Role(); r.Generation != 2 {
		t.Fatalf("bj: %v, want master of generation 2", r)
	}
	st := hf.Status()
	if st.PendingPromotion != nil || st.PromotionGivenUp == nil || st.PromotionGivenUp.Generation != 1 || !st.PromotionGivenUp.Abandoned {
		t.Fatalf("hf's status: pending %+v, given up %+v; want generation 1 given up and abandoned", st.PendingPromotion, st.PromotionGivenUp)
	}
	if r := hf.Role(); r.Role != siterole.Slave {
		t.Fatalf("hf: %v, want a slave", r)
	}
	s.produce("bj", "orders", 10)
	undo()
	if m := s.converged("orders"); m != "bj" {
		t.Fatalf("master %s, want bj", m)
	}
	s.produce("hf", "orders", 10)
	s.converged("orders")
}

// TestPromoteAnswerNamesPendingFinisher: POST /promote (what `metaq-server
// promote` calls) after a step past the raise failed waits up to
// finishWait for the background finisher; not finished by then, it fails
// naming the pending promotion and when it gives up. Once the disk is
// back the finisher completes and awaitPromotionFinish, what the endpoint
// waits with, reports the promotion done.
func TestPromoteAnswerNamesPendingFinisher(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	hf := s.site("hf")
	undo := failIdentityWrites(t, hf)
	w := httptest.NewRecorder()
	(&Admin{b: hf}).servePromote(w, httptest.NewRequest("POST", "/promote?force=true&finishWait=300ms", nil))
	body := w.Body.String()
	if w.Code != http.StatusInternalServerError || !strings.Contains(body, "generation 1 is raised") || !strings.Contains(body, "pendingPromotion") {
		t.Fatalf("POST /promote with the finisher pending: %d %s; want 500 naming the pending promotion", w.Code, body)
	}
	undo()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := hf.awaitPromotionFinish(ctx, 45*time.Second)
	if err != nil || rep.Generation != 1 {
		t.Fatalf("the finisher after the disk came back: %+v %v; want generation 1 done", rep, err)
	}
	if m := s.converged("orders"); m != "hf" {
		t.Fatalf("master %s, want hf", m)
	}
}
