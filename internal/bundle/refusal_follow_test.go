package bundle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestReplicaRefusalNamesMasterRegisteredAfterFollow: gz, a slave site,
// follows hf's promotion (found by gossip) before hf registered as master
// in ZooKeeper, where bj's node, left by its killed session, still named
// bj. gz's put refusal was rewritten once for the new generation, read the
// fenced bj from ZooKeeper then, and kept naming it. The hook keeps hf
// from registering until gz follows it and has had two of its refusal
// checks; once hf registers, gz's refusal must name hf.
func TestReplicaRefusalNamesMasterRegisteredAfterFollow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{sessionTimeout: 10 * time.Second})
	hf, gz := s.site("hf"), s.site("gz")
	bjURL := s.site("bj").Broker.URL()
	if r := gz.Broker.WriteRefusal(); r == nil || !strings.Contains(r.Reason, bjURL) {
		t.Fatalf("gz's refusal before the promotion: %+v, want it to name bj (%s)", r, bjURL)
	}
	hookErr := make(chan error, 1)
	hook := func() {
		deadline := time.Now().Add(time.Minute)
		for {
			id := gz.failover.openedIdentity()
			if id != nil && id.Generation() >= 1 && gz.connectedMaster() != "" {
				break
			}
			if time.Now().After(deadline) {
				hookErr <- errors.New("gz did not follow hf's generation within a minute")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The window in which gz's refusal check reads ZooKeeper before hf
		// registered there (it checks every refusalEvery).
		time.Sleep(2*refusalEvery + 500*time.Millisecond)
		hookErr <- nil
	}
	hf.failover.beforeRegister.Store(&hook)
	defer hf.failover.beforeRegister.Store(nil)

	s.kill("bj") // its master node stays until its session expires
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := hf.Promote(ctx, true); err != nil {
		t.Fatalf("promote hf: %v", err)
	}
	select {
	case err := <-hookErr:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("hf's promotion did not reach its registration (the hook did not run)")
	}
	hfURL := hf.Broker.URL()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		r := gz.Broker.WriteRefusal()
		if r == nil {
			return errors.New("gz refuses no puts")
		}
		if !strings.Contains(r.Reason, hfURL) {
			return fmt.Errorf("gz's refusal %q does not name hf's %s", r.Reason, hfURL)
		}
		return nil
	})
}
