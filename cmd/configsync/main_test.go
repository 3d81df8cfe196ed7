package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/configsync"
	"metaq/internal/testutil"
)

func ini(url, extra string) []byte {
	return []byte(`[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1073741824
maxTransferSize=1048576
serverPort=18123

[zookeeper]
zk.zkConnect=127.0.0.1:2181

[site]
overlay=site.ini

[nats]
url=` + url + `

[topic=test]
` + extra)
}

func TestCommandPushStatusDiffRollback(t *testing.T) {
	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	url := ns.ClientURL()

	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	// The operator makes a signing key; the site trusts its public key.
	keyFile := filepath.Join(t.TempDir(), "push.key")
	code, out, errOut := cmd("keygen", "-o", keyFile)
	m := regexp.MustCompile(`public key: (ed25519:\S+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("keygen: %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := cmd("keygen", "-o", keyFile); code != 2 || !strings.Contains(errOut, "exists") {
		t.Fatalf("keygen over an existing key: %d %s", code, errOut)
	}

	// One site with an agent.
	siteDir := t.TempDir()
	sitePath := filepath.Join(siteDir, "server.ini")
	must(t, os.WriteFile(sitePath, ini(url, ""), 0o644))
	must(t, os.WriteFile(filepath.Join(siteDir, "site.ini"), []byte("[system]\nbrokerId=7\n[site]\nname=bj\n[nats]\ntrustedKeys="+m[1]+"\n"), 0o644))
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

	// The operator's copy.
	opDir := t.TempDir()
	opFile := filepath.Join(opDir, "server.ini")
	v1 := ini(url, ";; new topic\n[topic=orders]\n")
	must(t, os.WriteFile(opFile, v1, 0o644))

	// Without a key nothing is published.
	code, _, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-timeout", "5s")
	if code != 2 || !strings.Contains(errOut, "no signing key") {
		t.Fatalf("push without a key: %d %s", code, errOut)
	}
	// Unsigned: published, and refused by the site, which says why.
	code, out, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-timeout", "5s", "-unsigned")
	if code != 1 || !strings.Contains(out, "version 1 is unsigned") {
		t.Fatalf("unsigned push: %d\n%s\n%s", code, out, errOut)
	}
	t.Setenv("METAQ_CONFIGSYNC_KEY", keyFile)

	// Versions are numbered by what was signed: the refused unsigned entry
	// does not count, and the first signed version is version 1.
	code, out, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "published version 1") || !strings.Contains(out, "bj  ok  v1: topics added: orders") {
		t.Fatalf("push: %d\n%s\n%s", code, out, errOut)
	}
	b, _ := os.ReadFile(sitePath)
	if !bytes.Equal(b, v1) {
		t.Fatalf("site file %q", b)
	}

	code, out, _ = cmd("status", "-f", opFile, "-json")
	var st configsync.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Sites) != 1 || st.Sites[0].Version != 1 || st.Desired.Version != 1 {
		t.Fatalf("status: %d %s", code, out)
	}
	code, out, _ = cmd("status", "-f", opFile)
	if code != 0 || !strings.Contains(out, "desired: v1") || !strings.Contains(out, "bj") {
		t.Fatalf("status: %d %s", code, out)
	}

	must(t, os.WriteFile(opFile, ini(url, "[topic=orders]\n[topic=audit]\n"), 0o644))
	code, out, _ = cmd("diff", "-f", opFile)
	if code != 0 || !strings.Contains(out, "topics added: audit") || !strings.Contains(out, "+[topic=audit]") {
		t.Fatalf("diff: %d %s", code, out)
	}
	code, out, _ = cmd("push", "-f", opFile, "-dry-run")
	if code != 0 || !strings.Contains(out, "bj  from v1:  topics added: audit") || !strings.Contains(out, "nothing published") {
		t.Fatalf("dry run: %d %s", code, out)
	}
	code, out, errOut = cmd("push", "-f", opFile)
	if code != 0 || !strings.Contains(out, "published version 2") {
		t.Fatalf("push 3: %d %s %s", code, out, errOut)
	}

	code, out, errOut = cmd("rollback", "-f", opFile, "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "published version 3 = bytes of version 1") || !strings.Contains(out, "topics removed: audit") {
		t.Fatalf("rollback: %d %s %s", code, out, errOut)
	}
	b, _ = os.ReadFile(sitePath)
	if !bytes.Equal(b, v1) {
		t.Fatalf("site file after rollback %q", b)
	}

	// An invalid file: the loader's error, exit 2, nothing published.
	must(t, os.WriteFile(opFile, bytes.Replace(v1, []byte("unflushInterval=1000"), []byte("unflushInterval=x"), 1), 0o644))
	code, _, errOut = cmd("push", "-f", opFile)
	if code != 2 || !strings.Contains(errOut, "unflushInterval") {
		t.Fatalf("invalid push: %d %s", code, errOut)
	}
	// A site that does not answer: exit 1, named.
	must(t, os.WriteFile(opFile, ini(url, "[topic=z]\n"), 0o644))
	code, out, _ = cmd("push", "-f", opFile, "-sites", "bj,nowhere", "-timeout", "1s")
	if code != 1 || !strings.Contains(out, "nowhere  NO ANSWER") || !strings.Contains(out, "bj       ok") {
		t.Fatalf("missing site: %d %s", code, out)
	}
	if code, _, _ := cmd("bogus"); code != 2 {
		t.Fatal("unknown command accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnknownKeysRefused: push and check refuse a misspelt key or section
// with a "did you mean", publish nothing, and publish it with
// -allow-unknown; the site then runs it, and a restart of its bundle
// accepts that file (configsync.AppliedHere).
func TestUnknownKeysRefused(t *testing.T) {
	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	url := ns.ClientURL()
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	siteDir := t.TempDir()
	sitePath := filepath.Join(siteDir, "server.ini")
	must(t, os.WriteFile(sitePath, ini(url, ""), 0o644))
	must(t, os.WriteFile(filepath.Join(siteDir, "site.ini"), []byte("[system]\nbrokerId=7\n[site]\nname=bj\n[nats]\nallowUnsigned=true\n"), 0o644))
	agent, err := configsync.NewAgent(configsync.Options{ConfigPath: sitePath, HeartbeatInterval: 100 * time.Millisecond,
		Reloader: configsync.ReloaderFunc(func(context.Context, *config.Server) (config.Changes, error) { return config.Changes{}, nil })})
	must(t, err)
	must(t, agent.Start(context.Background()))
	defer agent.Close()

	opFile := filepath.Join(t.TempDir(), "server.ini")
	bad := ini(url, "minSyncSite=1\n\n[replicaton]\nstuckAfterMs=1000\n")
	must(t, os.WriteFile(opFile, bad, 0o644))
	hints := []string{`minSyncSite: unknown key`, `did you mean "minSyncSites"`, `did you mean [replication]`, "-allow-unknown"}
	code, _, errOut := cmd("check", "-f", opFile)
	if code != 2 {
		t.Errorf("check: exit %d, want 2", code)
	}
	for _, h := range hints {
		if !strings.Contains(errOut, h) {
			t.Errorf("check output lacks %q:\n%s", h, errOut)
		}
	}
	if code, out, errOut := cmd("check", "-allow-unknown", "-f", opFile); code != 0 || !strings.Contains(out, "is valid") {
		t.Errorf("check -allow-unknown: exit %d %s %s", code, out, errOut)
	}
	code, out, errOut := cmd("push", "-f", opFile, "-sites", "bj", "-unsigned", "-timeout", "5s")
	if code != 2 || strings.Contains(out, "published") || !strings.Contains(errOut, "nothing published") || !strings.Contains(errOut, `did you mean "minSyncSites"`) {
		t.Fatalf("push of unknown keys: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := cmd("status", "-f", opFile); code != 0 || !strings.Contains(out, "none pushed yet") {
		t.Fatalf("a refused push published something: %d %s", code, out)
	}
	if b, _ := os.ReadFile(sitePath); configsync.AppliedHere(sitePath, b) {
		t.Error("AppliedHere before any push")
	}
	code, out, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-unsigned", "-allow-unknown", "-timeout", "5s")
	if code != 0 || !strings.Contains(out, "published version 1") || !strings.Contains(out, "bj  ok  v1") {
		t.Fatalf("push -allow-unknown: exit %d\n%s\n%s", code, out, errOut)
	}
	b, _ := os.ReadFile(sitePath)
	if !bytes.Equal(b, bad) || !configsync.AppliedHere(sitePath, b) {
		t.Errorf("site file after push: AppliedHere %v, %q", configsync.AppliedHere(sitePath, b), b)
	}
	if configsync.AppliedHere(sitePath, append(b, "\n; edited by hand\n"...)) {
		t.Error("AppliedHere for bytes the agent did not write")
	}
}

// TestDryRunShowsDiffAgainstWhatSitesRun: the first dry run, against a site
// that runs a file configsync never published, previews the changes and the
// line diff against that file (its agent reports it without secret lines),
// and later dry runs against the published version.
func TestDryRunShowsDiffAgainstWhatSitesRun(t *testing.T) {
	ns, err := configsync.StartEmbeddedNATS(configsync.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	url := ns.ClientURL()
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	siteDir := t.TempDir()
	sitePath := filepath.Join(siteDir, "server.ini")
	must(t, os.WriteFile(sitePath, ini(url, "[topic=old-only]\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(siteDir, "site.ini"), []byte("[system]\nbrokerId=7\n[site]\nname=bj\ntoken=s3cr3t-token-value\n[nats]\nallowUnsigned=true\n"), 0o644))
	agent, err := configsync.NewAgent(configsync.Options{ConfigPath: sitePath, HeartbeatInterval: 100 * time.Millisecond,
		Reloader: configsync.ReloaderFunc(func(context.Context, *config.Server) (config.Changes, error) { return config.Changes{}, nil })})
	must(t, err)
	must(t, agent.Start(context.Background()))
	defer agent.Close()

	opFile := filepath.Join(t.TempDir(), "server.ini")
	must(t, os.WriteFile(opFile, ini(url, "[topic=orders]\n"), 0o644))
	var out, errOut string
	testutil.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		var code int
		code, out, errOut = cmd("push", "-f", opFile, "-sites", "bj", "-dry-run")
		if code != 0 || !strings.Contains(out, "changes against it:") {
			return fmt.Errorf("dry run: exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
	for _, want := range []string{"runs a file not published by configsync", "topics added: orders", "topics removed: old-only", "-[topic=old-only]", "+[topic=orders]", "nothing published"} {
		if !strings.Contains(out, want) {
			t.Errorf("first dry run lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cr3t") {
		t.Errorf("the preview shows a secret:\n%s", out)
	}
	if code, out, errOut := cmd("push", "-f", opFile, "-sites", "bj", "-unsigned", "-timeout", "5s"); code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	must(t, os.WriteFile(opFile, ini(url, "[topic=orders]\n[topic=audit]\n"), 0o644))
	code, out, errOut := cmd("push", "-f", opFile, "-sites", "bj", "-dry-run")
	if code != 0 || !strings.Contains(out, "bj  from v1:  topics added: audit") || !strings.Contains(out, "+[topic=audit]") {
		t.Errorf("dry run against v1: exit %d\n%s%s", code, out, errOut)
	}
}
