package bundle

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/configsync"
	"metaq/internal/testutil"
)

// TestBrokerIDOnlyInOverlay follows deploy/: the shared server.ini has no
// brokerId, each site's overlay sets it. The bundle starts with its [nats]
// section, and its configsync agent applies a push.
func TestBrokerIDOnlyInOverlay(t *testing.T) {
	t.Parallel()
	shared := strings.Replace(sharedINI("", "", "[topic=orders]\n"), "brokerId=0\n", "", 1)
	if strings.Contains(shared, "brokerId") {
		t.Fatal("shared file still sets brokerId")
	}
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	b := startSite(t, filepath.Join(t.TempDir(), "bj"), shared, siteSpec{name: "bj", natsListen: natsListen,
		extraOverlay: "[system]\nbrokerId=3\n"})
	if got := b.Config().System.BrokerID; got != 3 {
		t.Fatalf("brokerId = %d, want the overlay's 3", got)
	}
	cs := mustComp[*configSyncComponent](t, b)
	if cs.Agent() == nil {
		t.Fatal("no configsync agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := configsync.NewClient(ctx, configsync.ClientOptions{URL: cs.NATSURL(), SigningKey: pushKey})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Push(ctx, configsync.PushOptions{File: "server.ini", Data: []byte(shared + "[topic=more]\n"), Sites: []string{"bj"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if r := rep.Results["bj"]; !r.OK || fmt.Sprint(r.TopicsAdded) != "[more]" {
		t.Fatalf("bj: %+v", r)
	}
}
