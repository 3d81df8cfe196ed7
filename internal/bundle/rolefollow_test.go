package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/testutil"
)

// TestPromotedSiteStateFollowsRole (ZooKeeper on): once hf, started as a
// slave, is promoted, what it shows follows the role it has now: its NATS
// record in ZooKeeper is named as a master's (hf-0-m) and the slave's
// (hf-0-s1) is gone, and its lag report lists no slave group of the old
// master (bj, gone, whose last gossip still names them).
func TestPromotedSiteStateFollowsRole(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	seed := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://" + natsListen, join: seed})
	produce(t, bj.Broker.Addr().String(), "orders", 10, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	hfTopo := mustComp[*topologyComponent](t, hf).Topology()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		for _, r := range hfTopo.Reports() {
			if r.MasterSite == "bj" && r.SlaveGroup == "meta-slave-group-hf" {
				return nil
			}
		}
		return fmt.Errorf("hf's lag report before the failover: %+v", hfTopo.Reports())
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bj.Close()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		// No receiver (between two of the component's attempts) is no
		// connection either.
		if r := mustComp[*receiverComponent](t, hf).Receiver(); r != nil && r.Status().Connected {
			return errors.New("hf still connected to bj")
		}
		return nil
	})
	if _, err := hf.Promote(ctx, false); err != nil {
		t.Fatal(err)
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		names, err := zc.Children(ctx, zkRoot+"/configsync/nats")
		if err != nil {
			return err
		}
		if !slices.Contains(names, "hf-0-m") || slices.Contains(names, "hf-0-s1") {
			return fmt.Errorf("NATS records %v, want hf-0-m and no hf-0-s1", names)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		for _, r := range hfTopo.Reports() {
			if r.MasterSite != "hf" {
				return fmt.Errorf("hf, promoted, still reports a group of %q: %+v", r.MasterSite, r)
			}
		}
		return nil
	})
}

// TestEmbeddedNATSStaysWithTheHost: the embedded NATS server (no [nats]
// url) is where the other sites' agents point, so it follows the host's
// start command, not the role a failover recorded: a former master
// restarted by its unchanged command as the slave it became still embeds
// it, and a promoted site restarted by its `start slave` command as master
// does not start another.
func TestEmbeddedNATSStaysWithTheHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		mode     Mode
		recorded georeplicator.Role
		want     bool
	}{
		{"former master, now a slave", ModeMaster, georeplicator.Role{Name: georeplicator.RoleSlave, Generation: 1, SlaveID: 1,
			SlaveGroup: "meta-slave-group-bj", MasterAddress: "127.0.0.1:1"}, true},
		{"promoted slave, now master", ModeSlave, georeplicator.Role{Name: georeplicator.RoleMaster, Generation: 1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ini := filepath.Join(dir, "server.ini")
			spec := siteSpec{name: "bj", noNATS: true}
			writeFile(t, ini, sharedINI("", "", "[topic=test]\n"))
			writeFile(t, filepath.Join(dir, "site.ini"), overlayINI(spec, dir, testutil.FreePort(t)))
			props := filepath.Join(dir, "async_slave.properties")
			writeFile(t, props, "slaveId=1\nslaveGroup=meta-slave-group-bj\nmasterAddress=127.0.0.1:1\n")
			if err := os.MkdirAll(filepath.Join(dir, "data", "replication"), 0o755); err != nil {
				t.Fatal(err)
			}
			id, err := georeplicator.OpenIdentity(filepath.Join(dir, "data", "replication", "identity.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := id.SetRole(&c.recorded); err != nil {
				t.Fatal(err)
			}
			b, err := New(Options{ConfigPath: ini, Mode: c.mode, PluginPath: props, Logger: testutil.Logger(t, slog.LevelInfo)})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.applyPersistedRole(); err != nil {
				t.Fatal(err)
			}
			if b.opts.Mode == c.mode {
				t.Fatalf("the recorded role did not apply: mode %v", b.opts.Mode)
			}
			if got := embedsNATS(b); got != c.want {
				t.Fatalf("embeds NATS: %t, want %t", got, c.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
