package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/configsync"
	"metaq/internal/testutil"
)

// sharedFile is a shared server.ini that names no NATS server: its
// embedded-server address (serverPort+4) is wrong for every site.
func sharedFile(zk, root, extra string) []byte {
	return []byte(fmt.Sprintf(`[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1073741824
maxTransferSize=1048576
serverPort=%d

[zookeeper]
zk.zkConnect=%s
zk.zkRoot=%s

[site]
overlay=site.ini

[nats]
bucket=metaq_config

[topic=test]
%s`, 1, zk, root, extra))
}

// TestPushFindsNATSAndPreviewsWithOverlay: the operator's shared file names
// no NATS server, yet push finds the one the bundles recorded in ZooKeeper
// (or the local bundle's overlay names); the per-site preview leaves out keys
// the site's overlay sets; diff without -f compares what the sites run.
func TestPushFindsNATSAndPreviewsWithOverlay(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := fmt.Sprintf("/metaq-test-cs-%d", rand.Int64())
	t.Cleanup(func() {
		if r, err := registry.New(context.Background(), registry.Options{Connect: zk, ConnectionTimeout: 5 * time.Second}); err == nil {
			r.DeleteTree(context.Background(), root)
			r.Close()
		}
	})
	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	must(t, err)
	defer ns.Close()
	t.Setenv("METAQ_CONF", filepath.Join(t.TempDir(), "none.ini"))

	// One site whose overlay sets its own serverPort and the NATS url.
	siteDir := t.TempDir()
	sitePath := filepath.Join(siteDir, "server.ini")
	must(t, os.WriteFile(sitePath, sharedFile(zk, root, ""), 0o644))
	// Pushes are signed; the site trusts the operator's key.
	keyPEM, pub, err := configsync.GenerateKey()
	must(t, err)
	keyFile := filepath.Join(t.TempDir(), "push.key")
	must(t, os.WriteFile(keyFile, keyPEM, 0o600))
	t.Setenv("METAQ_CONFIGSYNC_KEY", keyFile)
	overlay := "[system]\nserverPort=18123\n[site]\nname=bj\n[nats]\nurl=" + ns.ClientURL() + "\ntrustedKeys=" + pub + "\n"
	must(t, os.WriteFile(filepath.Join(siteDir, "site.ini"), []byte(overlay), 0o644))
	got, _, err := config.Load(sitePath)
	must(t, err)
	agent, err := configsync.NewAgent(configsync.Options{ConfigPath: sitePath, HeartbeatInterval: 100 * time.Millisecond,
		Reloader: configsync.ReloaderFunc(func(_ context.Context, cfg *config.Server) (config.Changes, error) {
			ch := config.Diff(got, cfg)
			got = cfg
			return ch, nil
		})})
	must(t, err)
	must(t, agent.Start(context.Background()))
	defer agent.Close()
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	opFile := filepath.Join(t.TempDir(), "server.ini") // no overlay next to it
	must(t, os.WriteFile(opFile, sharedFile(zk, root, ";; v1\n"), 0o644))
	// Nothing names a server yet: a clear refusal, not serverPort+4 of the file.
	if code, _, errOut := cmd("status", "-f", opFile); code != 2 || !strings.Contains(errOut, "no NATS server found") {
		t.Fatalf("status with no NATS server anywhere: %d %s", code, errOut)
	}

	reg, err := registry.New(context.Background(), registry.Options{Connect: zk, Root: root})
	must(t, err)
	must(t, configsync.RecordNATS(context.Background(), reg, "bj-0-m", ns.ClientURL()))
	reg.Close()
	code, out, errOut := cmd("push", "-f", opFile, "-sites", "bj", "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "published version 1") || !strings.Contains(errOut, "recorded by the bundles in ZooKeeper") {
		t.Fatalf("push without -nats: %d\n%s\n%s", code, out, errOut)
	}

	// The shared file changes serverPort, which bj's overlay sets: the
	// preview predicts no restart there.
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		st, err := agentState(agent)
		if err != nil || len(st.OverlayKeys) == 0 {
			return fmt.Errorf("overlay keys not recorded yet: %v", err)
		}
		return nil
	})
	changed := bytes.Replace(sharedFile(zk, root, ";; v2\n"), []byte("serverPort=1\n"), []byte("serverPort=2\n"), 1)
	must(t, os.WriteFile(opFile, changed, 0o644))
	code, out, errOut = cmd("push", "-f", opFile, "-dry-run")
	if code != 0 || strings.Contains(out, "restart needed") || !strings.Contains(out, "bj  from v1:  no changes") {
		t.Fatalf("preview: %d\n%s\n%s", code, out, errOut)
	}

	// The local bundle's configuration (its overlay names the url) is used
	// before ZooKeeper.
	t.Setenv("METAQ_CONF", sitePath)
	code, out, errOut = cmd("status", "-f", opFile)
	if code != 0 || !strings.Contains(errOut, "local bundle") {
		t.Fatalf("status through the local bundle: %d\n%s\n%s", code, out, errOut)
	}

	// diff without -f: what the site runs against the desired version.
	code, out, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-timeout", "5s")
	if code != 0 {
		t.Fatalf("push 2: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = cmd("diff")
	if code != 0 || !strings.Contains(out, "bj runs desired v2") {
		t.Fatalf("diff without -f: %d\n%s\n%s", code, out, errOut)
	}
}

func agentState(a *configsync.Agent) (configsync.SiteState, error) { return a.State(), nil }

// TestPushFindsTheEmbeddedNATS: the file is a bundle's whose master embeds
// NATS (no [nats] url), read here without its overlay and with a ZooKeeper
// that does not answer: push finds the embedded server at once, as the
// bundle does, instead of waiting on ZooKeeper and giving up. With nothing
// there, the error lists what it tried.
func TestPushFindsTheEmbeddedNATS(t *testing.T) {
	t.Setenv("METAQ_CONF", filepath.Join(t.TempDir(), "none.ini"))
	port := testutil.FreePort(t) // serverPort; its +4 is the embedded server's
	file := filepath.Join(t.TempDir(), "server.ini")
	data := bytes.Replace(sharedFile("127.0.0.1:1", "/meta", ""), []byte("serverPort=1\n"), []byte(fmt.Sprintf("serverPort=%d\n", port)), 1)
	must(t, os.WriteFile(file, data, 0o644))
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	start := time.Now()
	code, _, errOut := cmd("status", "-f", file)
	if code != 2 || !strings.Contains(errOut, fmt.Sprintf("no NATS server answers at nats://127.0.0.1:%d", port+4)) ||
		!strings.Contains(errOut, "ZooKeeper 127.0.0.1:1") || !strings.Contains(errOut, "none.ini") {
		t.Fatalf("without NATS: exit %d\n%s", code, errOut)
	}
	t.Logf("gave up in %v", time.Since(start).Round(time.Millisecond))

	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: fmt.Sprintf("127.0.0.1:%d", port+4), StoreDir: t.TempDir()})
	must(t, err)
	defer ns.Close()
	start = time.Now()
	code, out, errOut := cmd("status", "-f", file)
	if code != 0 || !strings.Contains(errOut, fmt.Sprintf("NATS: nats://127.0.0.1:%d (the server the bundle of %s embeds, read without its overlay)", port+4, file)) {
		t.Fatalf("with the embedded server: exit %d\n%s%s", code, out, errOut)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("found the embedded server in %v", d)
	}
}
