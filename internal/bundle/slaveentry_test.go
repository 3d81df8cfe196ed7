package bundle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSwitchoverOldMasterOwnsSlaveEntry: after a switchover to hf, bj's
// slave entry under topics-pub is the node hf left for it (hf's session).
// hf is then killed: once its session expires, bj's entry must be bj's own
// node, not gone with hf's session.
func TestSwitchoverOldMasterOwnsSlaveEntry(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{sites: []string{"bj", "hf"}})
	s.switchover("bj", "hf")
	bj := s.site("bj")
	entry := bj.Registry.Paths().TopicsPub() + "/orders/0-s1"
	ctx := context.Background()
	if ok, err := s.site("hf").Registry.Owns(ctx, entry); err != nil || !ok {
		t.Fatalf("%s after the switchover is not hf's node: %v %v (the case this test is about)", entry, ok, err)
	}
	s.kill("hf")
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if ok, err := bj.Registry.Owns(ctx, entry); err != nil || !ok {
			return fmt.Errorf("%s is not bj's node: %v %v", entry, ok, err)
		}
		return nil
	})
}
