package bundle

import (
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestComponentsStopTheirGoroutines starts a master and a slave with every
// component (replication both ways, configsync with embedded NATS, gossip,
// dashboard), uses them, closes both and checks that the goroutine count
// returns to where it was.
func TestComponentsStopTheirGoroutines(t *testing.T) {
	http.DefaultClient.CloseIdleConnections()
	before := runtime.NumGoroutine()
	root := t.TempDir()
	shared := sharedINI("", "", "[topic=test]\n")
	master := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: "127.0.0.1:0"})
	slave := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: master.ReplicationAddr(), natsURL: master.NATSURL(), join: []string{master.Topology().Addr()}})
	produce(t, master.Broker.Addr().String(), "test", 20, "g")
	waitCaughtUp(t, master, slave, "test", 20*time.Second)
	testutil.HTTPDo(t, "GET", "http://"+master.DashboardAddr()+"/metrics", "")
	testutil.HTTPDo(t, "GET", "http://"+slave.DashboardAddr()+"/lag", "")
	if err := slave.Close(); err != nil {
		t.Fatal(err)
	}
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var metaq []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "metaq/") || strings.Contains(g, "nats") || strings.Contains(g, "memberlist") {
					metaq = append(metaq, g)
				}
			}
			return fmt.Errorf("%d goroutines, %d before; still running:\n%s", n, before, strings.Join(metaq, "\n\n"))
		}
		return nil
	})
}
