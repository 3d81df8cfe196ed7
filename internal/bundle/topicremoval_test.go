package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/configsync"
	"metaq/internal/testutil"
)

// TestTopicRemovalThroughConfigsync removes topics with configsync at a
// master (bj) and a slave site (hf) sharing one ZooKeeper:
//
//   - a rollback that drops an empty topic unregisters it at both sites
//     (no topics-pub, topics-sub or topics entry left) and bj refuses puts;
//   - a push that drops a topic holding messages is refused before anything
//     is published, naming the topic and its count per site; with
//     AllowTopicRemoval it goes through and the topic is unregistered too.
func TestTopicRemovalThroughConfigsync(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	zk := testutil.ZooKeeper(t)
	dir := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk}, "bj", "hf")
	base := sharedINI(zk, zkRoot, "[topic=orders]\nnumPartitions=2\n\n[topic=payments]\nnumPartitions=1\n")
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	bj := startSite(t, filepath.Join(dir, "bj"), base, siteSpec{name: "bj", natsListen: natsListen})
	natsURL := mustComp[*configSyncComponent](t, bj).NATSURL()
	hf := startSite(t, filepath.Join(dir, "hf"), base, siteSpec{name: "hf", slave: true, slaveID: 1,
		masterAddr: mustComp[*shipperComponent](t, bj).Addr(), natsURL: natsURL,
		join: []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := configsync.NewClient(ctx, configsync.ClientOptions{URL: natsURL, SigningKey: pushKey})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	sites := []string{"bj", "hf"}
	push := func(data string, allow bool) (*configsync.PushReport, error) {
		return cs.Push(ctx, configsync.PushOptions{File: "server.ini", Data: []byte(data), Sites: sites,
			Timeout: 15 * time.Second, AllowTopicRemoval: allow})
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	registered := func(topic string) []string {
		var out []string
		for _, tree := range []registry.Tree{registry.TreeTopicsPub, registry.TreeTopicsSub, registry.TreeTopics} {
			tbs, err := zc.TopicBrokers(ctx, tree, topic)
			if err != nil && !errors.Is(err, registry.ErrNoNode) {
				t.Fatal(err)
			}
			for _, tb := range tbs {
				out = append(out, string(tree)+"/"+tb.Broker)
			}
		}
		return out
	}
	putRefused := func(topic string) bool {
		c, err := dialMeta(bj.Broker.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _, err = c.put(topic, 0, []byte("x"))
		return err != nil
	}

	// v1 = base, v2 adds an empty topic "temp"; rolling back to v1 removes it.
	if _, err := push(base, false); err != nil {
		t.Fatalf("push v1: %v", err)
	}
	withTemp := base + "\n[topic=temp]\nnumPartitions=1\n"
	if _, err := push(withTemp, false); err != nil {
		t.Fatalf("push v2: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := registered("temp"); len(got) != 6 {
			return fmt.Errorf("temp registered as %v, want 3 nodes at each of 2 sites", got)
		}
		return nil
	})
	rep, err := cs.Rollback(ctx, configsync.RollbackOptions{Sites: sites, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	for _, s := range sites {
		if r := rep.Results[s]; !r.OK || fmt.Sprint(r.TopicsRemoved) != "[temp]" {
			t.Errorf("rollback at %s: %+v", s, r)
		}
	}
	if got := registered("temp"); len(got) != 0 {
		t.Errorf("after the rollback, temp is still registered: %v", got)
	}
	if !putRefused("temp") {
		t.Error("bj accepts puts to temp after the rollback removed it")
	}

	// payments holds messages: removing it needs AllowTopicRemoval.
	produce(t, bj.Broker.Addr().String(), "payments", 7, "pay")
	waitCaughtUp(t, bj, hf, "payments", 20*time.Second)
	desired, err := cs.Desired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(base, "[topic=payments]\nnumPartitions=1\n", "", 1)
	_, err = push(without, false)
	if !errors.Is(err, configsync.ErrTopicRemoval) {
		t.Fatalf("push removing payments without the flag: %v, want ErrTopicRemoval", err)
	}
	for _, want := range []string{"payments holds 7 messages at bj", "7 messages at hf", "-allow-topic-removal"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if now, _ := cs.Desired(ctx); now.Version != desired.Version {
		t.Errorf("a refused push published version %d", now.Version)
	}
	if putRefused("payments") {
		t.Error("payments refused after a refused push")
	}
	rep, err = push(without, true)
	if err != nil {
		t.Fatalf("push with AllowTopicRemoval: %v", err)
	}
	for _, s := range sites {
		if r := rep.Results[s]; !r.OK || fmt.Sprint(r.TopicsRemoved) != "[payments]" {
			t.Errorf("push at %s: %+v", s, r)
		}
	}
	if got := registered("payments"); len(got) != 0 {
		t.Errorf("payments still registered: %v", got)
	}
	if !putRefused("payments") {
		t.Error("bj accepts puts to payments after its removal")
	}
	if _, ok := hf.Config().TopicFor("payments"); ok {
		t.Error("hf still runs payments")
	}
}
