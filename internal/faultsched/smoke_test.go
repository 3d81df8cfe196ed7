package faultsched

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSmokeLayout(t *testing.T) {
	if os.Getenv("CHAOS_SMOKE") == "" {
		t.Skip()
	}
	repo, _ := filepath.Abs("../..")
	dir := t.TempDir()
	ctx := context.Background()
	l, err := WriteLayout(ctx, repo, "/tmp/chaos/bin", dir, LayoutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCluster(l, "/tmp/chaos/bin", repo)
	defer c.Close()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b, _ := os.ReadFile(filepath.Join(l.SiteDir("bj"), "logs", "server.out"))
		t.Fatalf("%v\n%s", err, b)
	}
	t.Logf("up in %v", time.Since(start))
	for _, s := range Sites {
		st, err := c.Status(ctx, s)
		t.Logf("%s %+v %v", s, st, err)
	}
	rc, err := rawDial(l.MetaQAddr("bj"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p, off, err := rc.put(SyncTopic, 0, []byte("hello"))
		t.Logf("put %d %d %v", p, off, err)
	}
	rc2, _ := rawDial(l.MetaQAddr("hf"), 5*time.Second)
	p, off, err := rc2.put(SyncTopic, 0, []byte("hello"))
	t.Logf("put at hf %d %d %v", p, off, err)
	time.Sleep(time.Second)
	for _, s := range Sites {
		st, data, err := readPartition(l.MetaQAddr(s), SyncTopic, 0)
		t.Logf("%s: start %d len %d err %v", s, st, len(data), err)
	}
	out, err := c.Command(ctx, "bj", 30*time.Second, "switchover", "-to", "hf")
	t.Logf("switchover: %v\n%s", err, out)
	for _, s := range Sites {
		st, err := c.Status(ctx, s)
		t.Logf("%s %+v %v", s, st, err)
	}
}
